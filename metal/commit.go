package metal

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// How work reaches the GPU. Ops append launches to the backend's open batch
// (host only: nothing is encoded yet). The batch becomes one command buffer
// when its estimated work (cost.go) reaches the buffer budget (bufferSeconds,
// lowered when the GPU proves slower than the estimate: calibrate) or it
// holds bufferDispatches launches, and at every Read. After each commit the
// host waits until at most maxInFlight command buffers are queued ahead of
// the GPU (Throttle); otherwise only Read waits, for everything committed.
// At every launch and commit, and between the throttle's looks, the
// decision's context (Interrupt) is checked: when it is done the open batch
// is dropped unencoded, so a cancelled decision stops after the command
// buffers already committed: at most maxInFlight+1 of about a quarter
// second of GPU work each.

// pending is one launch of the open batch (a deep copy of the op's
// dispatch) with its estimated cost.
type pending struct {
	d       dispatch
	seconds float64
	c       cost
}

// batch is the open batch and the buffers to free once it is committed.
type batch struct {
	launches []pending
	seconds  float64
	// after holds buffers released while launches of the open batch may
	// still use them (host-written tables, trimmed pool buffers): they are
	// freed once the batch is committed (a committed command buffer keeps
	// what it uses alive) or dropped.
	after []gbuf
}

// Stats is the backend's accounting since it was opened.
type Stats struct {
	Buffers             int     // command buffers committed
	Dispatches          int     // dispatches committed
	MaxBufferSeconds    float64 // largest estimated GPU work (seconds) in one command buffer
	MaxBufferDispatches int     // most dispatches in one command buffer
	LiveBytes           int64   // pool buffers in use (activations, tables, scratch) and uploads
	CachedBytes         int64   // pool buffers kept for reuse
	WeightBytes         int64   // weight views (page-rounded), weight copies and their f32 tables
	PeakBytes           int64   // peak of LiveBytes+CachedBytes+WeightBytes
	WorkingSet          int64   // the budget (recommendedMaxWorkingSetSize), 0 = unknown
	Kernels             map[string]KernelStats
}

// KernelStats is the work of one kernel (all its specialisations).
type KernelStats struct {
	Dispatches int
	Bytes      float64 // estimated bytes moved (cost model)
	FLOPs      float64 // estimated floating-point operations
	EstSeconds float64 // estimated seconds on the conservative chip (cost.go)
	GPUSeconds float64 // measured, only while tracing (one dispatch per command buffer)
}

// Stats returns the backend's accounting.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.LiveBytes, s.CachedBytes, s.WeightBytes = b.pool.live, b.pool.cached, b.pool.weights
	s.PeakBytes, s.WorkingSet = b.pool.peak, b.pool.budget
	s.Kernels = make(map[string]KernelStats, len(b.stats.Kernels))
	for k, v := range b.stats.Kernels {
		s.Kernels[k] = v
	}
	return s
}

// SetTrace makes every launch its own command buffer, committed and waited
// for at once (slow): the first failure then names its kernel, grid,
// threadgroup and buffer sizes, and Stats reports each kernel's measured GPU
// time.
func (b *Backend) SetTrace(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trace = on
}

// launch appends one launch of estimated cost c to the open batch,
// committing before it when it would take the batch past bufferSeconds,
// and after it when the batch is full.
func (b *Backend) launch(d *dispatch, c cost) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("metal: backend used after Close")
	}
	if err := b.interrupted(); err != nil {
		return err
	}
	if err := b.failed; err != nil {
		b.failed = nil
		return err
	}
	s := c.seconds()
	limit := b.bufferLimit()
	if len(b.open.launches) > 0 && b.open.seconds+s > limit {
		if err := b.commit(); err != nil {
			return err
		}
	}
	p := pending{d: copyDispatch(d), seconds: s, c: c}
	b.open.launches = append(b.open.launches, p)
	b.open.seconds += s
	if b.trace {
		return b.traceOne(p)
	}
	if b.open.seconds >= limit || len(b.open.launches) >= bufferDispatches {
		return b.commit()
	}
	return nil
}

// copyDispatch copies d and the slices it holds (gpu.Dispatch may be called
// long after the op that made d returned).
func copyDispatch(d *dispatch) dispatch {
	c := *d
	c.Consts = append([]fconst(nil), d.Consts...)
	c.Args = append([]byte(nil), d.Args...)
	c.Bufs = append([]arg(nil), d.Bufs...)
	if d.Indirect != nil {
		in := *d.Indirect
		c.Indirect = &in
	}
	return c
}

// interrupted returns an error wrapping the interrupt's ctx.Err() when the
// decision running now was abandoned, after dropping the open batch.
func (b *Backend) interrupted() error {
	in := b.intr.Load()
	if in == nil {
		return nil
	}
	if err := in.ctx.Err(); err != nil {
		b.drop()
		return fmt.Errorf("metal: interrupted: %w", err)
	}
	return nil
}

// drop discards the open batch unencoded.
func (b *Backend) drop() {
	b.open.launches, b.open.seconds = b.open.launches[:0], 0
	b.freeAfter()
}

// freeAfter frees the buffers that waited for the open batch.
func (b *Backend) freeAfter() {
	for _, g := range b.open.after {
		b.pool.freeNow(g)
	}
	b.open.after = b.open.after[:0]
}

// ctx returns the decision's context (Background when none is set).
func (b *Backend) ctx() context.Context {
	if in := b.intr.Load(); in != nil {
		return in.ctx
	}
	return context.Background()
}

// commit encodes the open batch into one command buffer and commits it
// (nothing to do for an empty batch), then waits until at most maxInFlight
// committed buffers are unfinished (not while tracing: traceOne waits for
// each). When the decision was abandoned the batch is dropped instead.
func (b *Backend) commit() error {
	if err := b.interrupted(); err != nil {
		return err
	}
	if len(b.open.launches) == 0 {
		b.freeAfter()
		return nil
	}
	for i := range b.open.launches {
		p := &b.open.launches[i]
		if err := b.dev.Dispatch(&p.d); err != nil {
			// The launches before this one are in the device's open batch:
			// they must never be encoded (their buffers go back to the pool).
			b.dev.Drop()
			b.drop()
			return fmt.Errorf("metal: encoding %s: %w", describe(&p.d), err)
		}
	}
	if err := b.dev.Commit(); err != nil {
		b.dev.Drop()
		b.drop()
		return fmt.Errorf("metal: committing %d launches (%s … %s): %w", len(b.open.launches),
			b.open.launches[0].d.Kernel, b.open.launches[len(b.open.launches)-1].d.Kernel, err)
	}
	b.seq++
	b.inflight = append(b.inflight, bufferEstimate{seq: b.seq, seconds: b.open.seconds})
	if len(b.inflight) > maxEstimates { // times never reported (a GPU that has none)
		b.inflight = append(b.inflight[:0], b.inflight[len(b.inflight)-maxEstimates:]...)
	}
	s := &b.stats
	s.Buffers++
	s.Dispatches += len(b.open.launches)
	s.MaxBufferSeconds = max(s.MaxBufferSeconds, b.open.seconds)
	s.MaxBufferDispatches = max(s.MaxBufferDispatches, len(b.open.launches))
	if s.Kernels == nil {
		s.Kernels = map[string]KernelStats{}
	}
	for i := range b.open.launches {
		p := &b.open.launches[i]
		k := s.Kernels[p.d.Kernel]
		k.Dispatches++
		k.Bytes += p.c.bytes
		k.FLOPs += p.c.flops
		k.EstSeconds += p.seconds
		s.Kernels[p.d.Kernel] = k
	}
	b.open.launches, b.open.seconds = b.open.launches[:0], 0
	b.freeAfter()
	if b.trace {
		return nil
	}
	err := b.dev.Throttle(b.ctx(), maxInFlight)
	b.calibrate()
	if err != nil {
		if isInterrupt(err) {
			return fmt.Errorf("metal: interrupted: %w", err)
		}
		return fmt.Errorf("metal: %w", err)
	}
	return nil
}

// bufferEstimate is the estimated GPU work of one committed command buffer,
// by its sequence number since open.
type bufferEstimate struct {
	seq     int
	seconds float64
}

// calibrate compares the measured GPU time of the command buffers completed
// since the last call with their estimates and raises the backend's
// slowdown when one ran slower than estimated: the cost model is a
// roofline at the conservative chip's peaks, which real kernels reach only
// in part (30-60%), so buffers committed at bufferSeconds of estimated work
// could hold the GPU several times longer. The slowdown follows the worst
// ratio seen (buffers of at least calibrateSeconds only: tiny ones measure
// launch overheads) and decays slowly toward 1 while no buffer is as slow
// again. Where nothing is measured (the emulator) nothing changes. It
// returns the measured seconds. Called with b.mu held.
func (b *Backend) calibrate() float64 {
	var total float64
	for _, t := range b.dev.GPUTimes() {
		total += t.Seconds
		est := 0.0
		for i, e := range b.inflight {
			if e.seq == t.Seq {
				est = e.seconds
				b.inflight = append(b.inflight[:i], b.inflight[i+1:]...)
				break
			}
		}
		if est < calibrateSeconds || t.Seconds <= 0 {
			continue
		}
		r := min(t.Seconds/est, maxSlowdown)
		b.slow = max(r, b.slow-(b.slow-1)*slowdownDecay, 1)
	}
	return total
}

// bufferLimit is the estimated work at which the open batch is committed:
// bufferSeconds, divided by the measured slowdown.
func (b *Backend) bufferLimit() float64 { return bufferSeconds / max(1, b.slow) }

// opLimit is the estimated work at which an op splits its launch: the
// backend's opSeconds, divided by the measured slowdown.
func (b *Backend) opLimit() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opSeconds / max(1, b.slow)
}

// traceOne commits the one launch of the open batch and waits for it; a
// failure names the launch.
func (b *Backend) traceOne(p pending) error {
	if err := b.commit(); err != nil {
		return err
	}
	err := b.dev.Wait(b.ctx())
	secs := b.calibrate()
	b.inflight = b.inflight[:0] // every buffer completed
	if err != nil {
		return fmt.Errorf("metal: trace: %s failed: %w", describe(&p.d), err)
	}
	k := b.stats.Kernels[p.d.Kernel]
	k.GPUSeconds += secs
	b.stats.Kernels[p.d.Kernel] = k
	return nil
}

// describe names a launch for error messages: kernel, constants, grid,
// threadgroup and the size of every bound buffer.
func describe(d *dispatch) string {
	var s strings.Builder
	s.WriteString(d.Kernel)
	for _, c := range d.Consts {
		fmt.Fprintf(&s, "[fc%d=%d]", c.Index, c.Value)
	}
	if d.Indirect != nil {
		s.WriteString(" grid (indirect)")
	} else {
		fmt.Fprintf(&s, " grid %v", d.Grid)
	}
	fmt.Fprintf(&s, " group %v, buffers", d.Group)
	for _, a := range d.Bufs {
		n := -1
		if a.Buf != nil {
			n = a.Buf.Len()
		}
		fmt.Fprintf(&s, " %d:%d@%d", a.Index, n, a.Off)
	}
	return s.String()
}

// sync commits the open batch and waits for every command buffer: after it
// the device's results can be read.
func (b *Backend) sync(ctx context.Context) error {
	if err := b.failed; err != nil {
		b.failed = nil
		return err
	}
	if err := b.commit(); err != nil {
		return err
	}
	err := b.dev.Wait(ctx)
	b.calibrate()
	b.inflight = b.inflight[:0] // every buffer completed
	if err != nil {
		return fmt.Errorf("metal: %w", err)
	}
	return nil
}
