package cpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// parallelSplit is how many chunks per worker parallel cuts its items
// into (each at least minChunk items): more than one so that a cancelled
// decision is seen between chunks (Interrupt) and a worker slowed by the
// rest of the machine does not hold up the others.
const parallelSplit = 4

// parallel splits [0, n) into contiguous chunks of at least minChunk items,
// about parallelSplit per worker, and runs fn on them over the backend's
// workers, which pull them in turn; it returns when all are done. The
// calling goroutine is a worker too, so a fork-join wakes one goroutine
// fewer. Once the backend's interrupt is done the chunks not yet started
// are skipped and parallel returns the interrupt's error: the op's result
// is then incomplete and must be dropped. Every op that uses parallel
// computes each item on its own, so the chunking changes no bits.
func (b *Backend) parallel(n, minChunk int, fn func(lo, hi int)) error {
	if n <= 0 {
		return b.interrupted()
	}
	if minChunk < 1 {
		minChunk = 1
	}
	chunk := max(minChunk, (n+b.threads*parallelSplit-1)/(b.threads*parallelSplit))
	chunks := (n + chunk - 1) / chunk
	return b.parallelDynamic(chunks, func(_, i int) {
		fn(i*chunk, min(n, (i+1)*chunk))
	})
}

// parallelDynamic runs fn(worker, i) for i in [0, n) with workers pulling
// items one at a time, in order: for uneven items such as the experts of a
// MoE layer. worker is in [0, Threads()) and no two calls running at once
// share it, so it can index per-worker scratch. The calling goroutine is
// worker 0. Items not started when the backend's interrupt is done are
// skipped, and the interrupt's error returned.
func (b *Backend) parallelDynamic(n int, fn func(worker, i int)) error {
	workers := min(b.threads, n)
	stop := b.stop.Load()
	if workers <= 1 {
		for i := 0; i < n; i++ {
			if stop.done() {
				break
			}
			fn(0, i)
		}
		return stop.err()
	}
	var next atomic.Int64
	run := func(w int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n || stop.done() {
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
	return stop.err()
}

// stopper is the interrupt set by Interrupt: the context of the decision
// running on the backend.
type stopper struct {
	ctx  context.Context
	quit <-chan struct{}
}

// done reports whether the interrupt's context is done (false for none).
func (s *stopper) done() bool {
	if s == nil {
		return false
	}
	select {
	case <-s.quit:
		return true
	default:
		return false
	}
}

// err is the error of an op stopped by the interrupt, nil while it is not done.
func (s *stopper) err() error {
	if s == nil {
		return nil
	}
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("cpu: interrupted: %w", err)
	}
	return nil
}

// Interrupt implements backend.Interruptible: until restore is called,
// every op checks ctx between the chunks its workers pull and gives up
// once it is done, returning an error that wraps ctx.Err(). A context
// that can never be done (context.Background) sets nothing.
func (b *Backend) Interrupt(ctx context.Context) (restore func()) {
	if ctx == nil || ctx.Done() == nil {
		return func() {}
	}
	s := &stopper{ctx: ctx, quit: ctx.Done()}
	prev := b.stop.Swap(s)
	return func() { b.stop.CompareAndSwap(s, prev) }
}

// interrupted is the interrupt's error, nil when there is none or its
// context is not done: ops that do not go through parallel check it.
func (b *Backend) interrupted() error { return b.stop.Load().err() }
