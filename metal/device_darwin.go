//go:build darwin && arm64

package metal

// The gpu of a Mac: one MTLDevice driven through purego/objc
// (objc_darwin.go).
//
// What is process-wide and what belongs to one open:
//   - process-wide: the MTLDevice (the system's default GPU, looked up once)
//     and the compiled MTLLibrary. Compiling the whole shader source takes
//     seconds of CPU, a library holds no state of its own, and Metal objects
//     of this kind may be used from any thread, so a daemon that unloads an
//     idle model and loads it again does not compile twice. A failed compile
//     is not remembered: the next open compiles again and fails with the
//     log again.
//   - per open (metalGPU, released by Close): the OS thread and its
//     goroutine, the command queue, the pipelines, every buffer and view,
//     the residency set and the command buffers in flight.
//
// Threading: every Metal call of an open is made on one goroutine locked
// to its OS thread (autorelease pools must be drained on the thread that
// made them; every call runs inside its own pool). The host side
// (Dispatch, Drop, Free, Read, GPUTimes) touches only Go memory under a
// mutex: a forward pass hops to that thread once per command buffer
// (Commit), once per Throttle and Wait, and once per new buffer or view.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

// How long Wait keeps polling the command buffers committed after one that
// failed (all of them together): once the GPU has stopped a command buffer
// (a watchdog timeout, a revoked channel) macOS may ignore the ones behind
// it, which would never complete.
const afterFailureWait = 10 * time.Second

// errClosed is returned by every call on a closed device.
var errClosed = errors.New("metal: device used after Close")

// sysDevice is the process-wide part: the MTLDevice and, once compiled,
// the library.
type sysDevice struct {
	id       objc.ID
	name     string
	families []string

	libMu   sync.Mutex
	library objc.ID // 0 until a compile succeeded
}

var (
	sysMu sync.Mutex
	sys   *sysDevice
)

// systemDevice returns the process's Metal device, looking it up on first
// use. A failure is not remembered (the next call looks again).
func systemDevice() (*sysDevice, error) {
	sysMu.Lock()
	defer sysMu.Unlock()
	if sys != nil {
		return sys, nil
	}
	if err := loadObjC(); err != nil {
		return nil, fmt.Errorf("metal: %w", err)
	}
	var d *sysDevice
	var err error
	withPool(func() { d, err = findDevice() })
	if err != nil {
		return nil, err
	}
	sys = d
	return d, nil
}

// findDevice takes the default device, or the first of all devices where
// there is no default (over SSH, in a CI session), and checks that it has
// what the kernels need.
func findDevice() (*sysDevice, error) {
	dev := mtlCreateSystemDefaultDevice()
	if dev == 0 {
		if all := mtlCopyAllDevices(); all != 0 {
			if objc.Send[uint64](all, selCount) > 0 {
				dev = all.Send(selObjectAt, uint64(0)).Send(selRetain)
			}
			release(all)
		}
	}
	if dev == 0 {
		return nil, errors.New("metal: no Metal device (MTLCreateSystemDefaultDevice and MTLCopyAllDevices found none)")
	}
	d := &sysDevice{id: dev, name: goString(dev.Send(selName))}
	for _, f := range []struct {
		code int64
		name string
	}{{mtlGPUFamilyApple7, "Apple7"}, {mtlGPUFamilyApple8, "Apple8"}, {mtlGPUFamilyApple9, "Apple9"},
		{mtlGPUFamilyApple10, "Apple10"}, {mtlGPUFamilyMetal3, "Metal3"}, {mtlGPUFamilyMetal4, "Metal4"}} {
		if objc.Send[bool](dev, selSupportsFamily, f.code) {
			d.families = append(d.families, f.name)
		}
	}
	// simdgroup matrices and simd-group reductions need Apple7 (M1) or later.
	if !objc.Send[bool](dev, selSupportsFamily, int64(mtlGPUFamilyApple7)) {
		release(dev)
		return nil, fmt.Errorf("metal: %s lacks GPU family Apple7 (simdgroup matrices): Apple silicon M1 or later is required", d.name)
	}
	return d, nil
}

// compiledLibrary returns the library built from the embedded shader source
// with Apple's compiler, compiling it on first use. It is called on a
// device thread (locked, inside an autorelease pool).
func (d *sysDevice) compiledLibrary() (objc.ID, error) {
	d.libMu.Lock()
	defer d.libMu.Unlock()
	if d.library != 0 {
		return d.library, nil
	}
	src, err := shaders.Library()
	if err != nil {
		return 0, err
	}
	source := nsString(src)
	defer release(source)
	// MSL 3.0 (macOS 13) first, 2.4 (macOS 12, the oldest Go supports)
	// second; safe math: the kernels rely on IEEE infinities for masking.
	var logs []string
	for _, ver := range []uint64{mtlLanguageVersion3_0, mtlLanguageVersion2_4} {
		opts := objc.ID(classMTLCompileOptions).Send(selNew)
		opts.Send(selSetLanguageVersion, ver)
		if responds(opts, selSetMathMode) {
			opts.Send(selSetMathMode, int64(0)) // MTLMathModeSafe (macOS 15)
		} else {
			opts.Send(selSetFastMathEnabled, false)
		}
		var nserr objc.ID
		lib := d.id.Send(selNewLibraryWithSource, source, opts, unsafe.Pointer(&nserr))
		release(opts)
		if lib != 0 {
			d.library = lib
			return lib, nil
		}
		logs = append(logs, fmt.Sprintf("---- MSL %d.%d ----\n%s", ver>>16, ver&0xffff, nsError(nserr)))
	}
	// The log's program_source:LINE refers to the concatenated source: keep
	// a copy to look the lines up in.
	where := ""
	if f, err := os.CreateTemp("", "clef-shaders-*.metal"); err == nil {
		if _, err := f.WriteString(src); err == nil {
			where = fmt.Sprintf(" (program_source:LINE is a line of %s, every shaders/*.metal concatenated with its headers inlined)", f.Name())
		}
		f.Close()
	}
	return 0, fmt.Errorf("metal: Apple's compiler rejected the shaders%s; its log:\n%s", where, strings.Join(logs, "\n"))
}

// Available reports whether a Metal device can be used, and names it (or
// says why not). It only looks the device up: it compiles nothing and
// opens nothing that New would have to reopen.
func Available() (bool, string) {
	d, err := systemDevice()
	if err != nil {
		return false, err.Error()
	}
	return true, d.name
}

// New opens the Metal backend on the system's GPU: a fresh open of the
// device (its own queue, pipelines and buffers) that Close releases.
func New() (*Backend, error) {
	g, err := openGPU()
	if err != nil {
		return nil, err
	}
	b, err := newBackend(g, "metal") // prepares every pipeline the ops use
	if err != nil {
		g.Close()
		return nil, err
	}
	return b, nil
}

// mtlBuf is an MTLBuffer of one open: a buffer with its CPU address
// (shared storage), or a no-copy view over host memory.
type mtlBuf struct {
	g     *metalGPU
	id    objc.ID
	ptr   unsafe.Pointer // contents of a buffer (memory Metal allocated); nil for a view
	n     int
	view  bool
	keep  []byte // a view's data: kept alive (and read by Read) while the view lives
	lead  int    // a view's offset of keep[0]
	freed atomic.Bool
}

// Len returns the usable length: the bytes asked for, or a view's whole
// page-rounded span.
func (b *mtlBuf) Len() int { return b.n }

// mtlLaunch is one dispatch of a batch, its slices stored as ranges of the
// batch's arenas so that a batch allocates nothing once warm.
type mtlLaunch struct {
	kernel        string
	consts        [2]int // range of mtlBatch.consts
	args          [2]int // range of mtlBatch.args
	bufs          [2]int // range of mtlBatch.bufs
	grid, group   MTLSize
	indirect      *mtlBuf
	indirectOff   int
	pipe          *mtlPipeline // nil until prepared
	threads       int
	emptyGridSkip bool // a zero grid dimension: nothing to launch
}

// mtlBound is a buffer bound at an index.
type mtlBound struct {
	buf      *mtlBuf
	off, idx int
}

// mtlBatch is the open batch of launches and its arenas.
type mtlBatch struct {
	launches []mtlLaunch
	consts   []fconst
	args     []byte
	bufs     []mtlBound
}

func (b *mtlBatch) reset() {
	b.launches, b.consts, b.args, b.bufs = b.launches[:0], b.consts[:0], b.args[:0], b.bufs[:0]
}

// mtlPipeline is one prepared compute pipeline.
type mtlPipeline struct {
	consts []fconst
	id     objc.ID
	info   PipelineInfo
}

// cmdRecord is one committed command buffer (retained until Wait).
type cmdRecord struct {
	id          objc.ID
	seq         int
	first, last string
	n           int
	keep        [][]byte // host memory of views freed while it ran
}

// metalGPU is one open of the device.
type metalGPU struct {
	sys *sysDevice

	hopMu sync.Mutex // serialises hops; guards done
	calls chan func()
	done  bool // the loop has exited

	// Set at open (on the device thread), read-only afterwards.
	queue, library objc.ID
	maxBuffer      uint64
	workingSet     uint64
	res            *residency // nil: no residency sets on this OS
	resNote        string

	mu        sync.Mutex // everything below
	closed    bool
	lost      error // the queue stopped completing work: reopen
	open      mtlBatch
	pipes     map[string][]*mtlPipeline
	live      map[*mtlBuf]struct{}
	toRelease []*mtlBuf
	times     []BufferTime // GPU times of completed buffers, not yet reported

	// Device thread only.
	pending []cmdRecord
	failure *BufferError // the first failure reap found, for the next Wait
	stuck   []cmdRecord  // never completed after a failure: never released
	seq     int
	scratch [2]MTLSize // the MTLSize copies the dispatch sends point at
}

// openGPU opens the device: a locked thread, a queue, the library and the
// residency set.
func openGPU() (*metalGPU, error) {
	d, err := systemDevice()
	if err != nil {
		return nil, err
	}
	g := &metalGPU{sys: d, calls: make(chan func()), pipes: map[string][]*mtlPipeline{}, live: map[*mtlBuf]struct{}{}}
	ready := make(chan error, 1)
	go g.loop(ready)
	if err := <-ready; err != nil {
		g.done = true
		return nil, err
	}
	return g, nil
}

// keepResidentEvery is how often an idle open renews its residency request
// (llama.cpp renews its own far more often; the request is cheap).
const keepResidentEvery = time.Second

// loop is the device thread. It is never unlocked: when it returns (Close,
// or a failed open) Go ends the OS thread with it, and whatever the thread
// held goes with it.
func (g *metalGPU) loop(ready chan<- error) {
	runtime.LockOSThread()
	if err := g.start(); err != nil {
		g.teardown()
		ready <- err
		return
	}
	ready <- nil
	var tick <-chan time.Time
	if g.res != nil {
		t := time.NewTicker(keepResidentEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case fn, ok := <-g.calls:
			if !ok {
				return
			}
			// Objects autoreleased by the call (by Metal inside
			// newBuffer, release, status queries) go with its pool, not
			// at Close.
			pool := newARPool()
			fn()
			pool.Send(selDrain)
		case <-tick:
			pool := newARPool()
			g.res.keepAlive()
			pool.Send(selDrain)
		}
	}
}

// start makes what one open owns.
func (g *metalGPU) start() error {
	pool := newARPool()
	defer pool.Send(selDrain)
	dev := g.sys.id
	g.maxBuffer = objc.Send[uint64](dev, selMaxBufferLength)
	g.workingSet = objc.Send[uint64](dev, selRecommendedMaxWorkingSetSize)
	g.queue = dev.Send(selNewCommandQueue)
	if g.queue == 0 {
		return fmt.Errorf("metal: %s: newCommandQueue failed", g.sys.name)
	}
	lib, err := g.sys.compiledLibrary()
	if err != nil {
		return err
	}
	g.library = lib
	g.res, g.resNote = newResidency(dev, g.queue)
	return nil
}

// do runs fn on the device thread and waits for it.
func (g *metalGPU) do(fn func()) error {
	g.hopMu.Lock()
	defer g.hopMu.Unlock()
	if g.done {
		return errClosed
	}
	g.hop(fn)
	return nil
}

// hop runs fn on the device thread; hopMu is held and the loop runs.
func (g *metalGPU) hop(fn func()) {
	done := make(chan struct{})
	g.calls <- func() {
		defer close(done)
		fn()
	}
	<-done
}

// Name describes the device and its limits.
func (g *metalGPU) Name() string {
	return fmt.Sprintf("%s (%s; working set %.1f GiB, max buffer %.1f GiB; %s)", g.sys.name, strings.Join(g.sys.families, ","),
		float64(g.workingSet)/(1<<30), float64(g.maxBuffer)/(1<<30), g.resNote)
}

// Info returns the device's name, families and limits (as read at open:
// recommendedMaxWorkingSetSize follows sysctl iogpu.wired_limit_mb).
func (g *metalGPU) Info() DeviceInfo {
	return DeviceInfo{Name: g.sys.name, Families: g.sys.families, MaxBuffer: g.maxBuffer, WorkingSet: g.workingSet}
}

// ---- Memory ----

func (g *metalGPU) tooLarge(n int) error {
	if uint64(n) > g.maxBuffer {
		return fmt.Errorf("metal: %d bytes is %w of %s (%d bytes)", n, errTooLarge, g.sys.name, g.maxBuffer)
	}
	return nil
}

// NewBuffer returns a fresh shared-storage buffer of n bytes.
func (g *metalGPU) NewBuffer(n int) (gbuf, error) {
	if n <= 0 {
		return nil, fmt.Errorf("metal: NewBuffer of %d bytes", n)
	}
	if err := g.tooLarge(n); err != nil {
		return nil, err
	}
	var mb *mtlBuf
	var err error
	if herr := g.do(func() { mb, err = g.newBuffer(n) }); herr != nil {
		return nil, herr
	}
	if err != nil {
		return nil, err
	}
	return mb, nil
}

// newBuffer allocates on the device thread, after releasing what was
// freed (so a trimmed pool makes room before the next allocation).
func (g *metalGPU) newBuffer(n int) (*mtlBuf, error) {
	g.releaseFreed()
	id := g.sys.id.Send(selNewBufferWithLength, uint64(n), uint64(mtlResourceStorageModeShared))
	if id == 0 {
		return nil, fmt.Errorf("metal: %s could not allocate a %d-byte buffer", g.sys.name, n)
	}
	mb := &mtlBuf{g: g, id: id, ptr: objc.Send[unsafe.Pointer](id, selContents), n: n}
	g.mu.Lock()
	g.live[mb] = struct{}{}
	g.mu.Unlock()
	return mb, nil
}

// Upload returns a fresh buffer holding a copy of data.
func (g *metalGPU) Upload(data []byte) (gbuf, error) {
	b, err := g.NewBuffer(max(len(data), 16)) // Metal has no empty buffers
	if err != nil {
		return nil, err
	}
	mb := b.(*mtlBuf)
	copy(unsafe.Slice((*byte)(mb.ptr), mb.n), data)
	mb.n = len(data)
	return mb, nil
}

// Wrap returns a new no-copy view over data: from data's page (16 KiB on
// Apple silicon) to a page boundary, so its Len is what it costs in the
// working set. data must stay mapped and unchanged while the view lives
// (the view holds the slice, which keeps Go memory alive but cannot keep a
// file mapped). The view joins the open's residency set.
func (g *metalGPU) Wrap(data []byte) (gbuf, int, error) {
	if len(data) == 0 {
		return nil, 0, errors.New("metal: Wrap of no bytes")
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	base := start &^ (page - 1)
	length := (start + uintptr(len(data)) - base + page - 1) &^ (page - 1)
	if err := g.tooLarge(int(length)); err != nil {
		return nil, 0, err
	}
	var mb *mtlBuf
	var err error
	herr := g.do(func() {
		g.releaseFreed()
		// The base address goes to Metal as an integer: it may lie before
		// data in memory Go does not own, so it is never a Go pointer.
		id := g.sys.id.Send(selNewBufferWithBytesNoCopy, base, uint64(length), uint64(mtlResourceStorageModeShared), objc.ID(0))
		if id == 0 {
			err = fmt.Errorf("metal: newBufferWithBytesNoCopy failed for %d bytes at page %#x", length, base)
			return
		}
		mb = &mtlBuf{g: g, id: id, n: int(length), view: true, keep: data, lead: int(start - base)}
		g.res.add(id)
		g.mu.Lock()
		g.live[mb] = struct{}{}
		g.mu.Unlock()
	})
	if herr != nil {
		return nil, 0, herr
	}
	if err != nil {
		return nil, 0, err
	}
	return mb, mb.lead, nil
}

// Free releases a buffer or view. Nothing is sent to Metal here: the
// release happens at the next hop to the device thread (an allocation, a
// commit, a wait). A committed command buffer retains what it uses, and a
// view's host memory is handed to the last command buffer in flight, so
// work committed earlier still finds it.
func (g *metalGPU) Free(b gbuf) {
	mb, ok := b.(*mtlBuf)
	if !ok || mb == nil || mb.g != g || mb.freed.Swap(true) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	delete(g.live, mb)
	g.toRelease = append(g.toRelease, mb)
}

// releaseFreed releases what Free queued (device thread).
func (g *metalGPU) releaseFreed() {
	g.mu.Lock()
	list := g.toRelease
	g.toRelease = nil
	g.mu.Unlock()
	g.releaseBufs(list)
}

// releaseBufs releases buffers and views (device thread). The views leave
// the residency set first, and the set's change is committed before any
// is released: a set must not hold an allocation that no longer exists.
func (g *metalGPU) releaseBufs(list []*mtlBuf) {
	views := false
	for _, mb := range list {
		if mb.view {
			g.res.remove(mb.id)
			views = true
		}
	}
	if views {
		g.res.flush()
	}
	for _, mb := range list {
		if mb.view {
			if n := len(g.pending); n > 0 {
				g.pending[n-1].keep = append(g.pending[n-1].keep, mb.keep)
			}
			mb.keep = nil
		}
		release(mb.id)
	}
}

// Read copies len(dst) bytes at off of b into dst (shared memory: no
// device call). The caller has committed and waited.
func (g *metalGPU) Read(b gbuf, off int, dst []byte) error {
	mb, ok := b.(*mtlBuf)
	switch {
	case !ok || mb == nil || mb.g != g:
		return fmt.Errorf("metal: Read of a buffer (%T) that is not of this device", b)
	case mb.freed.Load():
		return errors.New("metal: Read of a freed buffer")
	case off < 0 || off+len(dst) > mb.n:
		return fmt.Errorf("metal: read of %d bytes at %d outside a %d-byte buffer", len(dst), off, mb.n)
	}
	if !mb.view {
		copy(dst, unsafe.Slice((*byte)(unsafe.Add(mb.ptr, off)), len(dst)))
		return nil
	}
	if off < mb.lead || off-mb.lead+len(dst) > len(mb.keep) {
		return fmt.Errorf("metal: read of %d bytes at %d outside the %d wrapped bytes at %d of the view", len(dst), off, len(mb.keep), mb.lead)
	}
	copy(dst, mb.keep[off-mb.lead:])
	return nil
}

// ---- Pipelines ----

// findPipe returns the prepared pipeline of kernel with consts (nil if
// none). g.mu is held.
func (g *metalGPU) findPipe(kernel string, consts []fconst) *mtlPipeline {
	for _, p := range g.pipes[kernel] {
		if sameConsts(p.consts, consts) {
			return p
		}
	}
	return nil
}

func sameConsts(a, b []fconst) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Prepare builds and caches the pipeline of kernel specialised with consts.
func (g *metalGPU) Prepare(kernel string, consts []fconst) error {
	_, err := g.prepared(kernel, consts)
	return err
}

// PipelineInfo reports a pipeline's limits, preparing it if needed.
func (g *metalGPU) PipelineInfo(kernel string, consts []fconst) (PipelineInfo, error) {
	p, err := g.prepared(kernel, consts)
	if err != nil {
		return PipelineInfo{}, err
	}
	return p.info, nil
}

func (g *metalGPU) prepared(kernel string, consts []fconst) (*mtlPipeline, error) {
	g.mu.Lock()
	p := g.findPipe(kernel, consts)
	g.mu.Unlock()
	if p != nil {
		return p, nil
	}
	var err error
	if herr := g.do(func() { p, err = g.pipeline(kernel, consts) }); herr != nil {
		return nil, herr
	}
	return p, err
}

// pipeline returns the pipeline of kernel with consts, building it if
// needed (device thread).
func (g *metalGPU) pipeline(kernel string, consts []fconst) (*mtlPipeline, error) {
	g.mu.Lock()
	p := g.findPipe(kernel, consts)
	g.mu.Unlock()
	if p != nil {
		return p, nil
	}
	pool := newARPool()
	defer pool.Send(selDrain)
	p, err := g.buildPipeline(kernel, consts)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.pipes[kernel] = append(g.pipes[kernel], p)
	g.mu.Unlock()
	return p, nil
}

func describeConsts(consts []fconst) string {
	var s strings.Builder
	for _, c := range consts {
		if c.Bool {
			fmt.Fprintf(&s, "[fc%d=%t]", c.Index, c.Value != 0)
		} else {
			fmt.Fprintf(&s, "[fc%d=%d]", c.Index, c.Value)
		}
	}
	return s.String()
}

// buildPipeline specialises the kernel's function (function constants set
// through MTLFunctionConstantValues) and builds its compute pipeline. The
// errors carry the compiler's log.
func (g *metalGPU) buildPipeline(kernel string, consts []fconst) (*mtlPipeline, error) {
	what := kernel + describeConsts(consts)
	name := nsString(kernel)
	defer release(name)
	var fn objc.ID
	if len(consts) == 0 {
		fn = g.libraryFor(kernel).Send(selNewFunctionWithName, name)
		if fn == 0 {
			return nil, fmt.Errorf("metal: kernel %s: no such function in the library", kernel)
		}
	} else {
		vals := objc.ID(classMTLFunctionConstantValues).Send(selNew)
		for _, c := range consts {
			if c.Bool {
				v := c.Value != 0
				vals.Send(selSetConstantValue, unsafe.Pointer(&v), uint64(mtlDataTypeBool), uint64(c.Index))
			} else {
				v := int32(c.Value)
				vals.Send(selSetConstantValue, unsafe.Pointer(&v), uint64(mtlDataTypeInt), uint64(c.Index))
			}
		}
		var nserr objc.ID
		fn = g.libraryFor(kernel).Send(selNewFunctionWithNameConsts, name, vals, unsafe.Pointer(&nserr))
		release(vals)
		if fn == 0 {
			return nil, fmt.Errorf("metal: kernel %s: specialising it failed:\n%s", what, nsError(nserr))
		}
	}
	var nserr objc.ID
	id := g.sys.id.Send(selNewComputePipelineState, fn, unsafe.Pointer(&nserr))
	release(fn)
	if id == 0 {
		return nil, fmt.Errorf("metal: kernel %s: building its pipeline failed:\n%s", what, nsError(nserr))
	}
	info := PipelineInfo{
		MaxThreads:     int(objc.Send[uint64](id, selMaxTotalThreads)),
		ExecWidth:      int(objc.Send[uint64](id, selThreadExecutionWidth)),
		StaticTGMemory: int(objc.Send[uint64](id, selStaticThreadgroupMemory)),
	}
	if info.MaxThreads <= 0 {
		release(id)
		return nil, fmt.Errorf("metal: kernel %s: the pipeline allows 0 threads per threadgroup (it cannot run on %s)", what, g.sys.name)
	}
	return &mtlPipeline{consts: append([]fconst(nil), consts...), id: id, info: info}, nil
}

// ---- Batches ----

// Dispatch appends a copy of d to the open batch: host only. It checks
// what can be checked without the device: the buffers belong to this open
// and are live, offsets lie inside them, the arguments fit setBytes, and
// the threadgroup fits the pipeline when it is prepared.
func (g *metalGPU) Dispatch(d *dispatch) error {
	if d == nil || d.Kernel == "" {
		return errors.New("metal: Dispatch of no kernel")
	}
	if err := g.checkLaunch(d); err != nil {
		return fmt.Errorf("metal: %s: %w", d.Kernel, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errClosed
	}
	if g.lost != nil {
		return g.lost
	}
	b := &g.open
	l := mtlLaunch{
		kernel:  d.Kernel,
		grid:    MTLSize{uint64(d.Grid[0]), uint64(d.Grid[1]), uint64(d.Grid[2])},
		group:   MTLSize{uint64(d.Group[0]), uint64(d.Group[1]), uint64(d.Group[2])},
		threads: d.Group[0] * d.Group[1] * d.Group[2],
	}
	if p := g.findPipe(d.Kernel, d.Consts); p != nil {
		if l.threads > p.info.MaxThreads {
			return fmt.Errorf("metal: %s: %d threads per threadgroup, its pipeline allows %d", d.Kernel, l.threads, p.info.MaxThreads)
		}
		l.pipe = p
	}
	l.consts[0] = len(b.consts)
	b.consts = append(b.consts, d.Consts...)
	l.consts[1] = len(b.consts)
	l.args[0] = len(b.args)
	b.args = append(b.args, d.Args...)
	l.args[1] = len(b.args)
	l.bufs[0] = len(b.bufs)
	for _, a := range d.Bufs {
		b.bufs = append(b.bufs, mtlBound{buf: a.Buf.(*mtlBuf), off: a.Off, idx: a.Index})
	}
	l.bufs[1] = len(b.bufs)
	if d.Indirect != nil {
		l.indirect, l.indirectOff = d.Indirect.Buf.(*mtlBuf), d.Indirect.Off
	} else {
		l.emptyGridSkip = d.Grid[0] == 0 || d.Grid[1] == 0 || d.Grid[2] == 0
	}
	b.launches = append(b.launches, l)
	return nil
}

// checkLaunch validates a launch on the host.
func (g *metalGPU) checkLaunch(d *dispatch) error {
	threads := 1
	for i, n := range d.Group {
		if n <= 0 {
			return fmt.Errorf("threadgroup %v has a dimension %d <= 0", d.Group, i)
		}
		threads *= n
	}
	if threads > maxGroupThreads {
		return fmt.Errorf("threadgroup %v has %d threads, more than %d", d.Group, threads, maxGroupThreads)
	}
	if d.Indirect == nil {
		for _, n := range d.Grid {
			if n < 0 {
				return fmt.Errorf("grid %v has a negative dimension", d.Grid)
			}
		}
	}
	if len(d.Args) > maxSetBytes {
		return fmt.Errorf("%d bytes of arguments, more than setBytes takes (%d)", len(d.Args), maxSetBytes)
	}
	for _, a := range d.Bufs {
		if a.Index < 0 || a.Index > maxBufferIndex || (a.Index == 0 && len(d.Args) > 0) {
			return fmt.Errorf("buffer index %d (0 holds the arguments, %d is the last)", a.Index, maxBufferIndex)
		}
		if err := g.checkBuf(a.Buf, a.Off, 0); err != nil {
			return fmt.Errorf("buffer %d: %w", a.Index, err)
		}
	}
	if d.Indirect != nil {
		if d.Indirect.Off%4 != 0 {
			return fmt.Errorf("indirect grid at offset %d, not a multiple of 4", d.Indirect.Off)
		}
		if err := g.checkBuf(d.Indirect.Buf, d.Indirect.Off, 12); err != nil {
			return fmt.Errorf("indirect grid: %w", err)
		}
	}
	return nil
}

// checkBuf checks that b is a live buffer of this open holding need bytes
// at off.
func (g *metalGPU) checkBuf(b gbuf, off, need int) error {
	mb, ok := b.(*mtlBuf)
	switch {
	case !ok || mb == nil:
		return fmt.Errorf("not a Metal buffer (%T)", b)
	case mb.g != g:
		return errors.New("a buffer of another open of the device")
	case mb.freed.Load():
		return errors.New("used after Free")
	case off < 0 || off+need > mb.n:
		return fmt.Errorf("offset %d (+%d) outside its %d bytes", off, need, mb.n)
	}
	return nil
}

// Commit encodes the open batch into one command buffer with one compute
// encoder, on the device thread, and commits it without waiting.
func (g *metalGPU) Commit() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errClosed
	}
	if g.lost != nil {
		g.mu.Unlock()
		return g.lost
	}
	if len(g.open.launches) == 0 {
		g.mu.Unlock()
		return nil
	}
	b := g.open
	g.open = mtlBatch{}
	g.mu.Unlock()

	var err error
	herr := g.do(func() { err = g.encode(&b) })
	b.reset()
	g.mu.Lock()
	if len(g.open.launches) == 0 && cap(g.open.launches) == 0 {
		g.open = b // reuse the arenas
	}
	g.mu.Unlock()
	if herr != nil {
		return herr
	}
	return err
}

// encode encodes b and commits it (device thread). A launch that cannot be
// encoded drops the whole batch uncommitted. The queue's commandBuffer
// would block only with 64 command buffers in flight (Metal's default);
// the backend throttles long before (Throttle).
func (g *metalGPU) encode(b *mtlBatch) (err error) {
	pool := newARPool()
	defer pool.Send(selDrain)
	g.res.flush() // Metal fixes a command buffer's residency at commit
	cmd := g.queue.Send(selCommandBuffer)
	if cmd == 0 {
		return errors.New("metal: the queue gave no command buffer")
	}
	cmd.Send(selRetain) // autoreleased; kept until Wait
	enc := cmd.Send(selComputeCommandEncoder)
	if enc == 0 {
		release(cmd)
		return errors.New("metal: the command buffer gave no compute encoder")
	}
	var cur objc.ID
	for i := range b.launches {
		l := &b.launches[i]
		if err := g.encodeOne(enc, b, l, &cur); err != nil {
			enc.Send(selEndEncoding)
			release(cmd) // never committed: discarded
			g.releaseFreed()
			return fmt.Errorf("metal: %s (launch %d of %d; the batch was dropped): %w", l.kernel, i+1, len(b.launches), err)
		}
	}
	enc.Send(selEndEncoding)
	g.seq++
	r := cmdRecord{id: cmd, seq: g.seq, first: b.launches[0].kernel, last: b.launches[len(b.launches)-1].kernel, n: len(b.launches)}
	setLabel(cmd, fmt.Sprintf("clef #%d: %d dispatches, %s … %s", r.seq, r.n, r.first, r.last))
	cmd.Send(selCommit)
	g.pending = append(g.pending, r)
	g.reap()
	g.releaseFreed()
	return nil
}

// Drop discards the open batch unencoded.
func (g *metalGPU) Drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open.reset()
}

// Throttle waits until at most n committed command buffers are unfinished,
// polling the oldest on the device thread (20 µs doubling to 1 ms between
// looks, as Wait) and releasing those that finished. It stops at once when
// ctx is done, and returns a failure reap found (kept for the next Wait):
// the buffers behind a failed one may never complete.
func (g *metalGPU) Throttle(ctx context.Context, n int) error {
	var err error
	if herr := g.do(func() { err = g.throttle(ctx, n) }); herr != nil {
		return herr
	}
	return err
}

func (g *metalGPU) throttle(ctx context.Context, n int) error {
	sleep := 20 * time.Microsecond
	for {
		g.reap()
		if g.failure != nil {
			return g.failure
		}
		if len(g.pending) <= n {
			return nil
		}
		if ctx != nil && ctx.Err() != nil {
			return fmt.Errorf("metal: stopped waiting for the GPU: %w", ctx.Err())
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, time.Millisecond)
	}
}

// reap releases the command buffers at the front of pending that have
// finished, so that a long pass does not keep every one (and every buffer
// it retains) alive until its Wait. A failure found here is kept for the
// next Wait. Device thread, inside a pool.
func (g *metalGPU) reap() {
	done := 0
	var times []BufferTime
	for _, r := range g.pending {
		st := sendStatus(r.id)
		if st < mtlCommandBufferStatusCompleted {
			break
		}
		if t := gpuTime(r.id); t > 0 {
			times = append(times, BufferTime{Seq: r.seq, Seconds: t})
		}
		if st != mtlCommandBufferStatusCompleted && g.failure == nil {
			g.failure = g.bufferError(r, st)
		}
		release(r.id)
		done++
	}
	if done == 0 {
		return
	}
	// Host memory of views freed while these ran moves to the next record
	// (with none left, nothing can read it any more).
	if done < len(g.pending) {
		for _, r := range g.pending[:done] {
			g.pending[done].keep = append(g.pending[done].keep, r.keep...)
		}
	}
	g.pending = append(g.pending[:0], g.pending[done:]...)
	g.mu.Lock()
	g.times = append(g.times, times...)
	g.mu.Unlock()
}

// gpuTime returns a finished command buffer's GPU time in seconds.
func gpuTime(cmd objc.ID) float64 {
	t0, t1 := objc.Send[float64](cmd, selGPUStartTime), objc.Send[float64](cmd, selGPUEndTime)
	if t1 > t0 {
		return t1 - t0
	}
	return 0
}

// encodeOne encodes one launch with the typed sends (no reflection).
func (g *metalGPU) encodeOne(enc objc.ID, b *mtlBatch, l *mtlLaunch, cur *objc.ID) error {
	p := l.pipe
	if p == nil {
		var err error
		if p, err = g.pipeline(l.kernel, b.consts[l.consts[0]:l.consts[1]]); err != nil {
			return err
		}
		if l.threads > p.info.MaxThreads {
			return fmt.Errorf("%d threads per threadgroup, its pipeline allows %d", l.threads, p.info.MaxThreads)
		}
	}
	if l.emptyGridSkip {
		return nil
	}
	if p.id != *cur {
		sendSetPipeline(enc, p.id)
		*cur = p.id
	}
	if l.args[1] > l.args[0] {
		sendSetBytes(enc, unsafe.Pointer(&b.args[l.args[0]]), l.args[1]-l.args[0], 0)
	}
	for _, bb := range b.bufs[l.bufs[0]:l.bufs[1]] {
		if bb.buf.freed.Load() {
			return fmt.Errorf("buffer %d was freed before its launch was committed", bb.idx)
		}
		sendSetBuffer(enc, bb.buf.id, bb.off, bb.idx)
	}
	g.scratch[1] = l.group
	if l.indirect != nil {
		if l.indirect.freed.Load() {
			return errors.New("the indirect grid's buffer was freed before its launch was committed")
		}
		sendDispatchIndirect(enc, l.indirect.id, l.indirectOff, &g.scratch[1])
		return nil
	}
	g.scratch[0] = l.grid
	sendDispatch(enc, &g.scratch[0], &g.scratch[1])
	return nil
}

// ---- Waiting ----

// Wait blocks until every committed command buffer completed. It polls
// each buffer's status on the device thread, sleeping 20 µs doubling to
// 1 ms between looks, rather than using a completion-handler block: a
// handler runs on a Metal thread that Go does not own, entering Go through
// purego's callback machinery (reflection per call, a fake-cgo thread with
// CGO_ENABLED=0), which nobody here could run on a Mac; a poll costs at
// most a millisecond of latency per Wait. When ctx is done it still waits
// (the GPU may be writing buffers the pool hands out again), then returns
// ctx.Err() wrapped; a command-buffer failure comes first, as a
// *BufferError.
func (g *metalGPU) Wait(ctx context.Context) error {
	var err error
	if herr := g.do(func() { err = g.waitAll() }); herr != nil {
		return herr
	}
	if err != nil {
		return err
	}
	if ctx != nil && ctx.Err() != nil {
		return fmt.Errorf("metal: waited for the committed work after the request ended: %w", ctx.Err())
	}
	return nil
}

// waitAll waits for every pending command buffer (device thread) and
// returns the first failure.
func (g *metalGPU) waitAll() error {
	pool := newARPool()
	defer pool.Send(selDrain)
	first := g.failure // found by reap
	g.failure = nil
	// After a failure, the buffers behind it get afterFailureWait in all
	// (one deadline), not each.
	var deadline time.Time
	if first != nil {
		deadline = time.Now().Add(afterFailureWait)
	}
	var times []BufferTime
	var stuck []cmdRecord
	for _, r := range g.pending {
		limit := time.Duration(0)
		if first != nil {
			limit = max(time.Until(deadline), time.Nanosecond)
		}
		st, ok := pollStatus(r.id, limit)
		if !ok {
			stuck = append(stuck, r)
			continue
		}
		if t := gpuTime(r.id); t > 0 {
			times = append(times, BufferTime{Seq: r.seq, Seconds: t})
		}
		if st != mtlCommandBufferStatusCompleted && first == nil {
			first = g.bufferError(r, st)
			deadline = time.Now().Add(afterFailureWait)
		}
		release(r.id)
	}
	g.pending = g.pending[:0]
	g.mu.Lock()
	g.times = append(g.times, times...)
	if len(stuck) > 0 {
		first.Msg += fmt.Sprintf("; the %d command buffers committed after it did not complete within %s: the GPU "+
			"stopped serving this queue, close the backend and open it again", len(stuck), afterFailureWait)
		g.lost = first
	}
	g.mu.Unlock()
	// A stuck buffer may still run one day: it stays retained, with the
	// host memory it may read.
	g.stuck = append(g.stuck, stuck...)
	g.releaseFreed()
	if first != nil {
		return first
	}
	return nil
}

// pollStatus waits for cmd to complete or fail; with limit > 0 it gives up
// after limit (ok false).
func pollStatus(cmd objc.ID, limit time.Duration) (status int, ok bool) {
	start := time.Now()
	sleep := 20 * time.Microsecond
	for {
		st := sendStatus(cmd)
		if st >= mtlCommandBufferStatusCompleted {
			return st, true
		}
		if limit > 0 && time.Since(start) > limit {
			return st, false
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, time.Millisecond)
	}
}

// bufferError describes a failed command buffer (device thread, inside a
// pool).
func (g *metalGPU) bufferError(r cmdRecord, status int) *BufferError {
	e := &BufferError{Seq: r.seq, First: r.first, Last: r.last, Dispatches: r.n, Status: status}
	nserr := r.id.Send(selError)
	e.Msg = nsError(nserr)
	if nserr != 0 {
		code := objc.Send[int64](nserr, selCode)
		if what, ok := mtlCommandBufferErrors[code]; ok {
			e.Msg += fmt.Sprintf(" (MTLCommandBufferError %d: %s)", code, what)
		} else {
			e.Msg += fmt.Sprintf(" (MTLCommandBufferError %d)", code)
		}
		if code == 2 || strings.Contains(e.Msg, "Interactivity") {
			e.Msg += "; macOS stops command buffers that hold the GPU too long on a Mac with a display"
		}
	}
	return e
}

// GPUTimes returns the GPU time (GPUEndTime − GPUStartTime) of each
// command buffer completed since the previous call.
func (g *metalGPU) GPUTimes() []BufferTime {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.times
	g.times = nil
	return t
}

// ---- Closing ----

// Close waits for the committed work, then releases every buffer and view
// of this open, its pipelines, residency set and queue, and ends its
// thread. The device and the library stay for the next open. The open
// batch, never committed, is dropped.
func (g *metalGPU) Close() error {
	g.hopMu.Lock()
	defer g.hopMu.Unlock()
	if g.done {
		return nil
	}
	g.mu.Lock()
	g.closed = true
	live := g.live
	g.live = map[*mtlBuf]struct{}{}
	g.open = mtlBatch{}
	g.mu.Unlock()
	var err error
	g.hop(func() {
		err = g.waitAll()
		list := make([]*mtlBuf, 0, len(live))
		for mb := range live {
			mb.freed.Store(true)
			list = append(list, mb)
		}
		g.releaseBufs(list)
		g.teardown()
	})
	close(g.calls)
	g.done = true
	return err
}

// teardown releases the pipelines, the residency set and the queue (device
// thread).
func (g *metalGPU) teardown() {
	pool := newARPool()
	defer pool.Send(selDrain)
	g.mu.Lock()
	pipes := g.pipes
	g.pipes = map[string][]*mtlPipeline{}
	g.mu.Unlock()
	for _, ps := range pipes {
		for _, p := range ps {
			release(p.id)
		}
	}
	if g.res != nil {
		// A lost queue runs nothing more: no token command buffer then.
		g.res.close(g.sys.id, g.queue, len(g.stuck) == 0)
		g.res = nil
	}
	if len(g.stuck) == 0 {
		release(g.queue)
	}
	g.queue = 0
}
