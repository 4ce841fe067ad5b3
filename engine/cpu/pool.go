package cpu

import "sync"

// parallel splits [0, n) into contiguous chunks of at least minChunk items
// and runs fn on them over the backend's workers, returning when all are done.
func (b *Backend) parallel(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if minChunk < 1 {
		minChunk = 1
	}
	workers := b.threads
	if w := (n + minChunk - 1) / minChunk; w < workers {
		workers = w
	}
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// parallelDynamic runs fn(i) for i in [0, n) with workers pulling items one
// at a time: for uneven items such as the experts of a MoE layer.
func (b *Backend) parallelDynamic(n int, fn func(worker, i int)) {
	workers := min(b.threads, n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				fn(w, i)
			}
		}()
	}
	wg.Wait()
}
