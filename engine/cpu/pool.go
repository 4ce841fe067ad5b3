package cpu

import (
	"sync"
	"sync/atomic"
)

// parallel splits [0, n) into contiguous chunks of at least minChunk items
// and runs fn on them over the backend's workers, returning when all are
// done. The calling goroutine runs the first chunk itself, so a fork-join
// wakes one goroutine fewer.
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
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	fn(0, min(chunk, n))
	wg.Wait()
}

// parallelDynamic runs fn(worker, i) for i in [0, n) with workers pulling
// items one at a time, in order: for uneven items such as the experts of a
// MoE layer. worker is in [0, Threads()) and no two calls running at once
// share it, so it can index per-worker scratch. The calling goroutine is
// worker 0.
func (b *Backend) parallelDynamic(n int, fn func(worker, i int)) {
	workers := min(b.threads, n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	run := func(w int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			fn(w, i)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(w)
		}()
	}
	run(0)
	wg.Wait()
}
