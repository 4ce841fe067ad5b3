package metal

import (
	"context"
	"errors"
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
	WorkingSet uint64 // recommendedMaxWorkingSetSize
}

// gpu is what the backend needs from a device. The Metal implementation
// records dispatches into one command buffer and runs them at the next read;
// the emulator runs each dispatch at once on the CPU (internal/mslemu).
type gpu interface {
	// Name describes the device.
	Name() string
	// Alloc returns a new scratch buffer of n bytes (contents undefined).
	Alloc(n int) (gbuf, error)
	// Upload returns a new buffer holding a copy of data.
	Upload(data []byte) (gbuf, error)
	// Wrap returns a buffer over data without copying it where the device
	// allows, and the offset of data[0] in it. data must stay alive and
	// unchanged while the buffer is in use. An error wrapping errTooLarge
	// says that data exceeds the device's largest buffer.
	Wrap(data []byte) (gbuf, int, error)
	// Dispatch records (or runs) one kernel launch.
	Dispatch(d *dispatch) error
	// Read waits for the recorded work and copies len(dst) bytes from b at
	// off into dst.
	Read(ctx context.Context, b gbuf, off int, dst []byte) error
	// Release returns a buffer from Alloc or Upload; the device may reuse it
	// for later allocations (work recorded before stays ordered before them).
	Release(b gbuf)
	// Close releases the device.
	Close() error
}
