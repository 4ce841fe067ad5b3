package metal

import (
	"context"
	"errors"

	"github.com/clefrt/clef/engine/backend"
)

var _ backend.Interruptible = (*Backend)(nil)

// interrupt is the context set by Interrupt.
type interrupt struct{ ctx context.Context }

// Interrupt implements backend.Interruptible: until restore is called,
// every launch and every commit (commit.go) first checks ctx, and when it is
// done the open batch is dropped unencoded and the op returns an error
// wrapping ctx.Err(). After each commit the host lets at most maxInFlight
// command buffers (about a quarter second of estimated GPU work each,
// calibrated against the measured time) wait unfinished, checking ctx
// between looks, so a cancelled decision frees the GPU within about a
// second; the buffers already committed run to their end (Read waits for
// them before it returns, as the pool may hand their buffers out again). A
// context that can never be done sets nothing.
//
// Installing a context starts a new decision: a failure an earlier one
// left unreported (a commit made to free memory) is forgotten, unless the
// GPU reported it (a *BufferError), which the next op still returns.
func (b *Backend) Interrupt(ctx context.Context) (restore func()) {
	if ctx == nil || ctx.Done() == nil {
		return func() {}
	}
	in := &interrupt{ctx: ctx}
	b.mu.Lock()
	var be *BufferError
	if b.failed != nil && !errors.As(b.failed, &be) {
		b.failed = nil
	}
	prev := b.intr.Swap(in)
	b.mu.Unlock()
	return func() { b.intr.CompareAndSwap(in, prev) }
}
