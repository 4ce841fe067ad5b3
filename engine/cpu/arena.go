package cpu

import "sync"

// arena recycles activation buffers: the model frees each intermediate as
// soon as it is consumed and the next layer asks for the same sizes again,
// so reusing them keeps the heap (and the resident set) near the live
// activations instead of letting garbage pile up between collections.
type arena struct {
	mu     sync.Mutex
	free   map[int][][]float32
	pooled int // floats held in free
}

// arenaMaxFloats bounds what the arena keeps (32 MiB, about one chunk's worth
// of activations); past it, buffers of other sizes are dropped for the
// garbage collector.
const arenaMaxFloats = 8 << 20

// get returns a buffer of n floats with unspecified contents.
func (a *arena) get(n int) []float32 {
	a.mu.Lock()
	if l := a.free[n]; len(l) > 0 {
		f := l[len(l)-1]
		a.free[n] = l[:len(l)-1]
		a.pooled -= n
		a.mu.Unlock()
		return f
	}
	a.mu.Unlock()
	return make([]float32, n)
}

// zeroed returns a buffer of n zeros.
func (a *arena) zeroed(n int) []float32 {
	f := a.get(n)
	clear(f)
	return f
}

// put hands a buffer back; it must not be used afterwards.
func (a *arena) put(f []float32) {
	n := len(f)
	if n == 0 || n != cap(f) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.free == nil {
		a.free = map[int][][]float32{}
	}
	if a.pooled+n > arenaMaxFloats {
		for size := range a.free {
			if size != n {
				a.pooled -= size * len(a.free[size])
				delete(a.free, size)
			}
		}
		if a.pooled+n > arenaMaxFloats {
			return
		}
	}
	a.free[n] = append(a.free[n], f)
	a.pooled += n
}
