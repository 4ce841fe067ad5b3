//go:build darwin && arm64

package metal

import (
	"context"
	"fmt"
	"log"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/shaders"
	"github.com/ebitengine/purego/objc"
)

func init() {
	backend.Register("metal", func(o backend.Options) (backend.Backend, error) {
		b, err := New()
		if err != nil {
			log.Printf("clef: Metal unavailable (%v): using the CPU backend", err)
			return nil, err
		}
		return b, nil
	})
}

// mtlBuf is an MTLBuffer with its CPU address (shared storage).
type mtlBuf struct {
	id      objc.ID
	ptr     unsafe.Pointer
	n       int
	class   int    // size class for the pool (0: not pooled)
	keep    []byte // a wrapped Go slice, kept alive while the buffer lives
	wrapped bool
}

func (b *mtlBuf) Len() int { return b.n }

// metalGPU drives one MTLDevice from a goroutine locked to its OS thread.
type metalGPU struct {
	calls chan func()

	device, queue, library objc.ID
	name                   string
	maxBuffer              uint64
	workingSet             uint64
	families               []string

	pipelines map[string]objc.ID // by kernel name + constants
	cmd, enc  objc.ID            // the open command buffer and its encoder
	pool      objc.ID            // the autorelease pool of the open command buffer
	free      map[int][]*mtlBuf  // released scratch buffers by size class
	wrapped   []*mtlBuf          // no-copy weight views, sorted by address
	wrapBytes uint64             // bytes of weights wrapped so far
	lastGPU   float64            // seconds of GPU time of the last command buffer
}

var (
	openOnce sync.Once
	openDev  *metalGPU
	openErr  error
)

// Available reports whether a Metal device can be used, and names it (or
// says why not).
func Available() (bool, string) {
	g, err := sharedGPU()
	if err != nil {
		return false, err.Error()
	}
	return true, g.name
}

// sharedGPU opens the device once per process.
func sharedGPU() (*metalGPU, error) {
	openOnce.Do(func() { openDev, openErr = openGPU() })
	return openDev, openErr
}

// New opens the Metal backend on the system's default GPU.
func New() (*Backend, error) {
	g, err := sharedGPU()
	if err != nil {
		return nil, err
	}
	return newBackend(g, "metal"), nil
}

func openGPU() (*metalGPU, error) {
	if err := loadObjC(); err != nil {
		return nil, err
	}
	g := &metalGPU{calls: make(chan func()), pipelines: map[string]objc.ID{}, free: map[int][]*mtlBuf{}}
	ready := make(chan error)
	go g.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return g, nil
}

// loop owns the OS thread every Metal call is made on (autorelease pools
// must be drained on the thread that made them).
func (g *metalGPU) loop(ready chan<- error) {
	runtime.LockOSThread()
	ready <- g.init()
	for fn := range g.calls {
		fn()
	}
}

// do runs fn on the Metal thread and waits for it.
func (g *metalGPU) do(fn func()) {
	done := make(chan struct{})
	g.calls <- func() {
		defer close(done)
		fn()
	}
	<-done
}

func (g *metalGPU) init() error {
	pool := objc.ID(classNSAutoreleasePool).Send(selNew)
	defer pool.Send(selDrain)
	dev := mtlCreateSystemDefaultDevice()
	if dev == 0 {
		// Over SSH or in a CI session the default device can be nil; take
		// the first of all devices instead.
		all := mtlCopyAllDevices()
		if all != 0 {
			if objc.Send[uint64](all, selCount) > 0 {
				dev = all.Send(selObjectAtIdx, uint64(0)).Send(selRetain)
			}
			release(all)
		}
	}
	if dev == 0 {
		return fmt.Errorf("no Metal device (MTLCreateSystemDefaultDevice and MTLCopyAllDevices found none)")
	}
	g.device = dev
	g.name = goString(dev.Send(selName))
	g.maxBuffer = objc.Send[uint64](dev, selMaxBufferLength)
	g.workingSet = objc.Send[uint64](dev, selRecommendedMaxWorkingSetSize)
	for _, f := range []struct {
		code int64
		name string
	}{{mtlGPUFamilyApple7, "Apple7"}, {mtlGPUFamilyApple8, "Apple8"}, {mtlGPUFamilyApple9, "Apple9"}, {mtlGPUFamilyMetal3, "Metal3"}} {
		if objc.Send[bool](dev, selSupportsFamily, f.code) {
			g.families = append(g.families, f.name)
		}
	}
	// simdgroup matrices and simd-group reductions need Apple7 (M1) or later.
	if !objc.Send[bool](dev, selSupportsFamily, int64(mtlGPUFamilyApple7)) {
		return fmt.Errorf("%s lacks GPU family Apple7 (simdgroup matrices); Apple silicon M1 or later is required", g.name)
	}
	g.queue = dev.Send(selNewCommandQueue)
	if g.queue == 0 {
		return fmt.Errorf("%s: newCommandQueue failed", g.name)
	}
	return g.compile()
}

// compile builds the library from the embedded shader source at run time,
// trying MSL 3.0 and then 2.4, with safe math (the kernels rely on IEEE
// infinities for masking).
func (g *metalGPU) compile() error {
	src, err := shaders.Library()
	if err != nil {
		return err
	}
	source := nsString(src)
	defer release(source)
	var msgs []string
	for _, ver := range []uint64{mtlLanguageVersion3_0, mtlLanguageVersion2_4} {
		opts := objc.ID(classMTLCompileOptions).Send(selNew)
		opts.Send(selSetLanguageVersion, ver)
		if responds(opts, selSetMathMode) {
			opts.Send(selSetMathMode, int64(0)) // MTLMathModeSafe
		} else {
			opts.Send(selSetFastMathEnabled, false)
		}
		var nserr objc.ID
		lib := g.device.Send(selNewLibraryWithSource, source, opts, unsafe.Pointer(&nserr))
		release(opts)
		if lib != 0 {
			g.library = lib
			return nil
		}
		msgs = append(msgs, fmt.Sprintf("MSL %d.%d: %s", ver>>16, ver&0xffff, nsError(nserr)))
	}
	return fmt.Errorf("compiling the shaders failed:\n%s", strings.Join(msgs, "\n"))
}

func (g *metalGPU) Name() string {
	return fmt.Sprintf("%s (%s; working set %.1f GiB, max buffer %.1f GiB)", g.name, strings.Join(g.families, ","),
		float64(g.workingSet)/(1<<30), float64(g.maxBuffer)/(1<<30))
}

// pipeline returns the cached pipeline of a kernel specialised with consts.
func (g *metalGPU) pipeline(name string, consts []fconst) (objc.ID, error) {
	key := name
	for _, c := range consts {
		key += fmt.Sprintf("|%d=%d", c.Index, c.Value)
	}
	if p, ok := g.pipelines[key]; ok {
		return p, nil
	}
	fname := nsString(name)
	defer release(fname)
	var fn objc.ID
	if len(consts) == 0 {
		fn = g.library.Send(selNewFunctionWithName, fname)
		if fn == 0 {
			return 0, fmt.Errorf("metal: no kernel %q in the library", name)
		}
	} else {
		vals := objc.ID(classMTLFunctionConsts).Send(selNew)
		for _, c := range consts {
			v := c.Value
			if c.Bool {
				b := v != 0
				vals.Send(selSetConstantValue, unsafe.Pointer(&b), uint64(mtlDataTypeBool), uint64(c.Index))
			} else {
				i := int32(v)
				vals.Send(selSetConstantValue, unsafe.Pointer(&i), uint64(mtlDataTypeInt), uint64(c.Index))
			}
		}
		var nserr objc.ID
		fn = g.library.Send(selNewFunctionWithNameConsts, fname, vals, unsafe.Pointer(&nserr))
		release(vals)
		if fn == 0 {
			return 0, fmt.Errorf("metal: specialising %s: %s", name, nsError(nserr))
		}
	}
	var nserr objc.ID
	p := g.device.Send(selNewComputePipelineState, fn, unsafe.Pointer(&nserr))
	release(fn)
	if p == 0 {
		return 0, fmt.Errorf("metal: pipeline %s: %s", name, nsError(nserr))
	}
	g.pipelines[key] = p
	return p, nil
}

func (g *metalGPU) newBuffer(n int) (*mtlBuf, error) {
	id := g.device.Send(selNewBufferWithLength, uint64(n), uint64(mtlResourceStorageModeShared))
	if id == 0 {
		return nil, fmt.Errorf("metal: cannot allocate a %d-byte buffer", n)
	}
	return &mtlBuf{id: id, ptr: objc.Send[unsafe.Pointer](id, selContents), n: n}, nil
}

func (g *metalGPU) Alloc(n int) (gbuf, error) {
	var out gbuf
	var err error
	g.do(func() {
		c := sizeClass(n)
		if l := g.free[c]; len(l) > 0 {
			b := l[len(l)-1]
			g.free[c] = l[:len(l)-1]
			b.n = n
			out = b
			return
		}
		var b *mtlBuf
		if b, err = g.newBuffer(c); err == nil {
			b.class, b.n = c, n
			out = b
		}
	})
	return out, err
}

func (g *metalGPU) Upload(data []byte) (gbuf, error) {
	var out gbuf
	var err error
	g.do(func() {
		n := max(len(data), 4)
		var b *mtlBuf
		if b, err = g.newBuffer(n); err != nil {
			return
		}
		copy(unsafe.Slice((*byte)(b.ptr), n), data)
		b.n = len(data)
		out = b
	})
	return out, err
}

// wrapMin is the size below which weights are copied instead of wrapped.
const wrapMin = 64 << 10

// Wrap makes a no-copy view over data (a slice of a mapped weight file):
// the view starts at data's page (16 KiB on Apple silicon) and ends on a page
// boundary, and an existing view that already covers data is reused.
func (g *metalGPU) Wrap(data []byte) (gbuf, int, error) {
	if len(data) < wrapMin {
		b, err := g.Upload(data)
		return b, 0, err
	}
	var out gbuf
	var off int
	var err error
	g.do(func() {
		page := uintptr(os.Getpagesize())
		start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		end := start + uintptr(len(data))
		i := sort.Search(len(g.wrapped), func(i int) bool { return uintptr(g.wrapped[i].ptr) > start })
		if i > 0 {
			if w := g.wrapped[i-1]; uintptr(w.ptr)+uintptr(w.n) >= end {
				out, off = w, int(start-uintptr(w.ptr))
				return
			}
		}
		base := start &^ (page - 1)
		length := (end - base + page - 1) &^ (page - 1)
		if uint64(length) > g.maxBuffer {
			err = fmt.Errorf("a %d-byte tensor is %w of this GPU (%d bytes)", len(data), errTooLarge, g.maxBuffer)
			return
		}
		g.wrapBytes += uint64(length)
		if g.workingSet > 0 && g.wrapBytes > g.workingSet {
			err = FitError(int64(g.wrapBytes), int64(g.workingSet), g.name)
			return
		}
		basePtr := unsafe.Add(unsafe.Pointer(unsafe.SliceData(data)), -int(start-base))
		id := g.device.Send(selNewBufferWithBytesNoCopy, basePtr, uint64(length), uint64(mtlResourceStorageModeShared), objc.ID(0))
		if id == 0 {
			err = fmt.Errorf("newBufferWithBytesNoCopy failed for %d bytes", length)
			return
		}
		w := &mtlBuf{id: id, ptr: basePtr, n: int(length), keep: data, wrapped: true}
		g.wrapped = append(g.wrapped, nil)
		copy(g.wrapped[i+1:], g.wrapped[i:])
		g.wrapped[i] = w
		out, off = w, int(start-base)
	})
	return out, off, err
}

func (g *metalGPU) Release(b gbuf) {
	mb, ok := b.(*mtlBuf)
	if !ok || mb.wrapped {
		return
	}
	g.do(func() {
		if mb.class > 0 {
			g.free[mb.class] = append(g.free[mb.class], mb)
			return
		}
		release(mb.id)
	})
}

// Dispatch encodes one launch into the open command buffer (opening one,
// inside a fresh autorelease pool, if needed).
func (g *metalGPU) Dispatch(d *dispatch) error {
	var err error
	g.do(func() {
		if g.cmd == 0 {
			g.pool = objc.ID(classNSAutoreleasePool).Send(selNew)
			g.cmd = g.queue.Send(selCommandBuffer)
			g.enc = g.cmd.Send(selComputeCommandEncoder)
		}
		var p objc.ID
		if p, err = g.pipeline(d.Kernel, d.Consts); err != nil {
			return
		}
		threads := d.Group[0] * d.Group[1] * d.Group[2]
		if maxT := objc.Send[uint64](p, selMaxTotalThreads); uint64(threads) > maxT {
			err = fmt.Errorf("metal: %s: %d threads per threadgroup, the pipeline allows %d", d.Kernel, threads, maxT)
			return
		}
		g.enc.Send(selSetComputePipelineState, p)
		if len(d.Args) > 0 {
			g.enc.Send(selSetBytes, unsafe.Pointer(&d.Args[0]), uint64(len(d.Args)), uint64(0))
		}
		for _, a := range d.Bufs {
			mb, ok := a.Buf.(*mtlBuf)
			if !ok {
				err = fmt.Errorf("metal: %s: buffer %d is not a Metal buffer", d.Kernel, a.Index)
				return
			}
			g.enc.Send(selSetBuffer, mb.id, uint64(a.Off), uint64(a.Index))
		}
		group := MTLSize{uint64(d.Group[0]), uint64(d.Group[1]), uint64(d.Group[2])}
		if d.Indirect != nil {
			ib, ok := d.Indirect.Buf.(*mtlBuf)
			if !ok {
				err = fmt.Errorf("metal: %s: indirect buffer is not a Metal buffer", d.Kernel)
				return
			}
			g.enc.Send(selDispatchIndirect, ib.id, uint64(d.Indirect.Off), group)
			return
		}
		grid := MTLSize{uint64(d.Grid[0]), uint64(d.Grid[1]), uint64(d.Grid[2])}
		g.enc.Send(selDispatchThreadgroups, grid, group)
	})
	return err
}

// Commit runs the work recorded so far and waits for it: the command-buffer
// boundaries of an interrupted decision (Backend.Interrupt).
func (g *metalGPU) Commit() error {
	var err error
	g.do(func() { err = g.flush() })
	return err
}

// flush commits the open command buffer and waits for it.
func (g *metalGPU) flush() error {
	if g.cmd == 0 {
		return nil
	}
	g.enc.Send(selEndEncoding)
	g.cmd.Send(selCommit)
	g.cmd.Send(selWaitUntilCompleted)
	status := objc.Send[uint64](g.cmd, selStatus)
	var err error
	if status != mtlCommandBufferStatusCompleted {
		err = fmt.Errorf("metal: command buffer failed (status %d): %s", status, nsError(g.cmd.Send(selError)))
	}
	g.lastGPU = objc.Send[float64](g.cmd, selGPUEndTime) - objc.Send[float64](g.cmd, selGPUStartTime)
	g.cmd, g.enc = 0, 0
	g.pool.Send(selDrain) // releases the autoreleased command buffer and encoder
	g.pool = 0
	return err
}

func (g *metalGPU) Read(ctx context.Context, b gbuf, off int, dst []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mb, ok := b.(*mtlBuf)
	if !ok || off < 0 || off+len(dst) > mb.n {
		return fmt.Errorf("metal: read of %d bytes at %d outside the buffer", len(dst), off)
	}
	var err error
	g.do(func() {
		if err = g.flush(); err != nil {
			return
		}
		copy(dst, unsafe.Slice((*byte)(unsafe.Add(mb.ptr, off)), len(dst)))
	})
	return err
}

// GPUSeconds returns the GPU time of the last command buffer.
func (g *metalGPU) GPUSeconds() float64 {
	var s float64
	g.do(func() { s = g.lastGPU })
	return s
}

// Close flushes pending work. The device itself stays open for the
// process (other backends may share it).
func (g *metalGPU) Close() error {
	var err error
	g.do(func() { err = g.flush() })
	return err
}

// Budget returns the working-set limit and the device name.
func (g *metalGPU) Budget() (int64, string) { return int64(g.workingSet), g.name }

// Info describes the device for selftest.
func (g *metalGPU) Info() DeviceInfo {
	return DeviceInfo{Name: g.name, Families: g.families, MaxBuffer: g.maxBuffer, WorkingSet: g.workingSet}
}
