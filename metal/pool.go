package metal

import (
	"fmt"
)

// The memory of one open device, all counted against its working set
// (recommendedMaxWorkingSetSize): weights (no-copy views, page-rounded, and
// the copies of tensors the kernels cannot read in place), host uploads,
// and the activation pool. macOS does not fail an allocation past the
// working set: it fails command buffers later (out of memory) or pages the
// machine to a crawl, so the backend refuses first, with an error that says
// how much was asked, what holds the memory and what to do.
//
// The pool hands out device-written buffers (activations, scratch) by size
// class (sizeClass: powers of two to 1 MiB, whole MiB above). A released
// buffer is kept for reuse: every layer asks for the same sizes again. The
// cached bytes are bounded (cacheLimit) and, when a new buffer would not fit
// the working set, trimmed first. Trimming frees the least recently
// released buffers first (LRU): within a forward the sizes asked for next
// are the ones just released, and a class nobody asked for since is one of
// an earlier request (another prompt length, a tower's sizes), the least
// likely to come back. (Largest-first would free the residual stream's
// buffers, which every layer asks for again.)
//
// A buffer the host writes (Upload: a table, an input) is never pooled:
// the GPU may still be reading its previous contents, so it is fresh, and
// freed after the command buffer that uses it is committed.
type pool struct {
	dev gpu
	// budget is the working set (0: unknown, nothing is refused);
	// cacheLimit bounds the cached bytes.
	budget, cacheLimit int64

	live, cached, weights, peak int64
	// owned maps every buffer of this open to its accounting.
	owned map[gbuf]owned
	// free holds released pool buffers, least recently released first.
	free []gbuf
}

// owned is what a buffer counts as.
type owned struct {
	bytes int64
	kind  int // kindPool, kindUpload or kindWeight
	// inFree marks a pool buffer that is in free (not in use).
	inFree bool
}

const (
	kindPool = iota
	kindUpload
	kindWeight
)

func newPool(dev gpu, budget int64) pool {
	limit := int64(1 << 30)
	if budget > 0 {
		limit = max(256<<20, budget/4)
	}
	return pool{dev: dev, budget: budget, cacheLimit: limit, owned: map[gbuf]owned{}}
}

// MemoryError says that an allocation would take the GPU past its working
// set.
type MemoryError struct {
	Need                  int64  // bytes asked for
	What                  string // what for
	Budget                int64  // the working set
	Weights, Live, Cached int64  // what holds memory now (Cached after trimming)
	Device                string // the device's name
	weightsOnly           bool   // asked for by a weight
}

func (e *MemoryError) Error() string {
	gib := sizeString
	msg := fmt.Sprintf("metal: out of GPU memory: %s needs %s more, but %s can keep %s resident (recommendedMaxWorkingSetSize) and %s is in use: weights %s, activations %s, pool cache %s",
		e.What, gib(e.Need), e.Device, gib(e.Budget), gib(e.Weights+e.Live+e.Cached), gib(e.Weights), gib(e.Live), gib(e.Cached))
	if e.weightsOnly {
		msg += "; the model does not fit: use a smaller quantization or --backend cpu"
	} else {
		msg += "; use a shorter input (fewer tokens, images or seconds of audio), a smaller quantization, or --backend cpu"
	}
	return msg + " (or raise the limit: sudo sysctl iogpu.wired_limit_mb=<MiB>)"
}

// sizeString writes n bytes in GiB, or MiB below one GiB.
func sizeString(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// total is every byte this open holds on the device.
func (p *pool) total() int64 { return p.live + p.cached + p.weights }

// reserve makes room for n more bytes: when they would not fit the
// budget it runs trim (the backend commits its open batch, which frees the
// buffers that waited for it, and which may use cached buffers), frees
// cached buffers, least recently released first, and fails when the bytes
// still would not fit.
func (p *pool) reserve(n int64, what string, weight bool, trim func()) error {
	if p.budget <= 0 || p.total()+n <= p.budget {
		return nil
	}
	trim()
	for len(p.free) > 0 && p.total()+n > p.budget {
		p.freeOldest()
	}
	if p.total()+n <= p.budget {
		return nil
	}
	return &MemoryError{Need: n, What: what, Budget: p.budget, Weights: p.weights, Live: p.live, Cached: p.cached,
		Device: p.dev.Name(), weightsOnly: weight}
}

// get returns a buffer of at least n bytes for the GPU to write: a cached
// one of n's size class, or a new one.
func (p *pool) get(n int, what string, trim func()) (gbuf, error) {
	class := sizeClass(n)
	for i := len(p.free) - 1; i >= 0; i-- {
		g := p.free[i]
		if o := p.owned[g]; o.bytes == int64(class) {
			p.free = append(p.free[:i], p.free[i+1:]...)
			o.inFree = false
			p.owned[g] = o
			p.cached -= o.bytes
			p.live += o.bytes
			return g, nil
		}
	}
	if err := p.reserve(int64(class), what, false, trim); err != nil {
		return nil, err
	}
	g, err := p.dev.NewBuffer(class)
	if err != nil {
		return nil, fmt.Errorf("metal: %s (%d bytes): %w", what, class, err)
	}
	p.add(g, int64(class), kindPool)
	return g, nil
}

// add counts a new buffer.
func (p *pool) add(g gbuf, n int64, kind int) {
	p.owned[g] = owned{bytes: n, kind: kind}
	if kind == kindWeight {
		p.weights += n
	} else {
		p.live += n
	}
	p.peak = max(p.peak, p.total())
}

// put takes back a pool buffer the ops are done with (kept for reuse,
// trimmed past cacheLimit: trim runs first, as in reserve) and reports
// whether g was one: a buffer of another kind is for the caller to free
// once the open batch is committed.
func (p *pool) put(g gbuf, trim func()) bool {
	o, ok := p.owned[g]
	if !ok || o.kind != kindPool || o.inFree {
		return false
	}
	o.inFree = true
	p.owned[g] = o
	p.live -= o.bytes
	p.cached += o.bytes
	p.free = append(p.free, g)
	if p.cached > p.cacheLimit {
		trim()
		for p.cached > p.cacheLimit {
			p.freeOldest()
		}
	}
	return true
}

// freeOldest frees the least recently released cached buffer.
func (p *pool) freeOldest() {
	g := p.free[0]
	p.free = p.free[1:]
	p.freeNow(g)
}

// freeNow frees g on the device and stops counting it.
func (p *pool) freeNow(g gbuf) {
	o, ok := p.owned[g]
	if !ok {
		return
	}
	delete(p.owned, g)
	switch {
	case o.kind == kindWeight:
		p.weights -= o.bytes
	case o.inFree:
		p.cached -= o.bytes
	default:
		p.live -= o.bytes
	}
	p.dev.Free(g)
}

// freeAll frees every buffer of this open.
func (p *pool) freeAll() {
	for g := range p.owned {
		p.dev.Free(g)
	}
	p.owned = map[gbuf]owned{}
	p.free = nil
	p.live, p.cached, p.weights, p.peak = 0, 0, 0, 0
}
