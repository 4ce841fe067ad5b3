package metal

import (
	"context"
	"errors"
	"fmt"
)

// errTooLarge is wrapped by Wrap's error for data larger than the device's
// largest buffer.
var errTooLarge = errors.New("larger than the largest buffer")

// gbuf is one block of device memory: an MTLBuffer on a Mac, a byte slice in
// the emulator.
type gbuf interface {
	// Len returns the usable length in bytes.
	Len() int
}

// arg binds a buffer (at a byte offset) to a kernel's [[buffer(Index)]].
// Out marks the buffers the kernel writes.
type arg struct {
	Index int
	Buf   gbuf
	Off   int
	Out   bool
}

// fconst is one function-constant value of a specialised pipeline.
type fconst struct {
	Index int
	Bool  bool // MTLDataTypeBool, else MTLDataTypeInt
	Value int
}

// dispatch is one kernel launch: dispatchThreadgroups(Grid, Group) of the
// named kernel (specialised with Consts) with Args (a kargs struct) at
// buffer(0).
//
// With Indirect set, the grid is read on the device from three uint32 at
// Indirect.Off of Indirect.Buf (dispatchThreadgroupsWithIndirectBuffer), and
// Grid is ignored; a zero dimension launches nothing.
type dispatch struct {
	Kernel   string
	Consts   []fconst
	Grid     [3]int
	Group    [3]int
	Args     []byte
	Bufs     []arg
	Indirect *arg
}

// DeviceInfo describes a Metal device.
type DeviceInfo struct {
	Name       string
	Families   []string
	MaxBuffer  uint64 // maxBufferLength
	WorkingSet uint64 // recommendedMaxWorkingSetSize; 0 = unknown
}

// gpu is one opened device: everything it creates belongs to this open and
// is released by Close. The backend (backend.go) owns the policy: when to
// commit, the buffer pool, the byte accounting; a gpu only does what it is
// told.
type gpu interface {
	// Name describes the device.
	Name() string
	// Info returns the device's name, families and limits.
	Info() DeviceInfo

	// NewBuffer returns a fresh device buffer of n > 0 bytes (contents
	// undefined). No pooling here: the backend's pool keeps, reuses, bounds
	// and trims buffers, and counts bytes.
	NewBuffer(n int) (gbuf, error)
	// Upload returns a fresh buffer holding a copy of data.
	Upload(data []byte) (gbuf, error)
	// Wrap returns a NEW no-copy view over data (never a lookup of an
	// earlier view by address) and the offset of data[0] in it; the view
	// starts on data's page and ends on a page boundary; its byte length is
	// what the view costs in the working set (gbuf.Len()). An error wrapping
	// errTooLarge: data exceeds MaxBuffer. data must stay alive and unchanged
	// while the view is in use.
	Wrap(data []byte) (gbuf, int, error)
	// Free releases a buffer or view now. Work committed earlier that uses
	// it keeps it alive until done.
	Free(b gbuf)

	// Prepare builds (and caches for this open) the pipeline of a kernel
	// specialised with consts; an error names the kernel and carries the
	// compiler's log. The backend prepares every pipeline it can use at
	// open; Dispatch of an unprepared pipeline prepares it.
	Prepare(kernel string, consts []fconst) error
	// PipelineInfo reports a prepared pipeline's limits (selftest prints
	// them). The emulator returns MaxThreads 1024, ExecWidth 32 and the
	// kernel's static threadgroup memory when known.
	PipelineInfo(kernel string, consts []fconst) (PipelineInfo, error)

	// Dispatch appends one launch to the open batch: host only, no device
	// call, no OS-thread hop. d and its slices are not retained after the
	// call returns (copy what you keep).
	Dispatch(d *dispatch) error
	// Commit encodes the open batch into one command buffer and commits it
	// without waiting. An empty batch is a no-op. It returns an error only
	// for encoding failures.
	Commit() error
	// Drop discards the open batch unencoded (the backend calls it when a
	// launch of the batch could not be appended, so that the launches before
	// it never reach a command buffer: their buffers go back to the pool).
	Drop()
	// Throttle waits until at most n committed command buffers have not
	// completed, so that a long pass keeps only a few buffers queued ahead
	// of the GPU (a cancelled decision then waits for those few only). When
	// ctx is done before they completed it returns ctx.Err() wrapped at
	// once; when a committed buffer failed it returns that failure (a
	// *BufferError, reported by the next Wait too) rather than wait for
	// buffers behind it that may never complete.
	Throttle(ctx context.Context, n int) error
	// Wait blocks until every committed command buffer completed. It
	// returns the first failure as a *BufferError. When ctx is done it still
	// waits for the buffers already committed (the GPU may be writing
	// buffers the pool will hand out again) and then returns ctx.Err()
	// wrapped.
	Wait(ctx context.Context) error
	// Read copies len(dst) bytes at off of b into dst; the caller has
	// committed and waited first.
	Read(b gbuf, off int, dst []byte) error
	// GPUTimes returns the GPU time of each command buffer completed since
	// the previous call whose time is known (none where it is not, as on the
	// emulator), by sequence number: the successful Commits of non-empty
	// batches, numbered from 1 since open (as BufferError.Seq).
	GPUTimes() []BufferTime
	// Close waits for committed work, then releases everything this open
	// created (buffers, views, pipelines, queue, residency set); the same
	// process can open the device again afterwards.
	Close() error
}

// BufferTime is the measured GPU time (GPUEndTime − GPUStartTime) of one
// completed command buffer.
type BufferTime struct {
	Seq     int
	Seconds float64
}

// PipelineInfo describes a compiled pipeline.
type PipelineInfo struct {
	MaxThreads     int // maxTotalThreadsPerThreadgroup
	ExecWidth      int // threadExecutionWidth
	StaticTGMemory int // staticThreadgroupMemoryLength (bytes)
}

// BufferError says which command buffer failed: its sequence number since
// open, the kernels it held (first and last, and their count), the
// MTLCommandBufferStatus and the NSError text.
type BufferError struct {
	Seq         int
	First, Last string
	Dispatches  int
	Status      int
	Msg         string
}

func (e *BufferError) Error() string {
	kernels := e.First
	if e.Dispatches > 1 {
		kernels = fmt.Sprintf("%s … %s", e.First, e.Last)
	}
	return fmt.Sprintf("metal: command buffer %d (%d dispatches: %s) failed with status %d: %s",
		e.Seq, e.Dispatches, kernels, e.Status, e.Msg)
}
