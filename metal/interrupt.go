package metal

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/clefrt/clef/engine/backend"
)

var _ backend.Interruptible = (*Backend)(nil)

// interruptLaunches is how many launches go into one command buffer while
// an interrupt is set: the work committed together, which runs to its end
// once committed (on a Mac a whole forward is otherwise one command buffer,
// run at the final Read, minutes for a long prompt).
const interruptLaunches = 256

// committer is implemented by devices that record launches: Commit runs the
// recorded work and waits for it (a command-buffer boundary).
type committer interface{ Commit() error }

// interrupt is the context set by Interrupt; commits tells whether its
// launches go in command buffers of interruptLaunches (a context with a
// deadline: a daemon's decision).
type interrupt struct {
	ctx     context.Context
	commits bool
}

// Interrupt implements backend.Interruptible: until restore is called,
// every launch first checks ctx, and an op whose launch finds it done
// returns an error wrapping ctx.Err(). When ctx has a deadline, on a
// device that records launches (a Mac) the recorded work is also committed
// every interruptLaunches launches, so a cancelled decision stops at the
// next command-buffer boundary instead of after its whole forward (without
// a deadline, as in clef bench, a forward stays one command buffer). The
// launches recorded since the last boundary still run at the next Read
// (the device may be shared, so they are not dropped). A context that can
// never be done sets nothing.
func (b *Backend) Interrupt(ctx context.Context) (restore func()) {
	if ctx == nil || ctx.Done() == nil {
		return func() {}
	}
	_, deadline := ctx.Deadline()
	in := &interrupt{ctx: ctx, commits: deadline}
	prev := b.intr.Swap(in)
	return func() { b.intr.CompareAndSwap(in, prev) }
}

// intrState is the Backend's interrupt: the context and the launches
// recorded since the last boundary.
type intrState struct {
	atomic.Pointer[interrupt]
	launches atomic.Int64
}

// dispatch records (or runs) one launch, checking the interrupt first.
func (b *Backend) dispatch(d *dispatch) error {
	if in := b.intr.Load(); in != nil {
		if err := in.ctx.Err(); err != nil {
			return fmt.Errorf("metal: interrupted: %w", err)
		}
		if c, ok := b.dev.(committer); ok && in.commits && b.intr.launches.Add(1)%interruptLaunches == 0 {
			if err := c.Commit(); err != nil {
				return err
			}
		}
	}
	return b.dev.Dispatch(d)
}
