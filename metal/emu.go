//go:build mslemu

package metal

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// The emulated GPU runs the kernels on the CPU through the MSL emulation
// harness (internal/mslemu): the same kernel source as on a Mac, compiled
// as C++. It exists so that the backend's host logic (shape checks, launch
// geometry, buffer binding, the MoE plan, batching, the pool and its
// accounting, Close and reopen) is tested on machines without Metal, and it
// behaves like the device where the backend could get that wrong:
//   - the device is process-wide (its kernels compiled once per process, as
//     an MTLDevice and its library are), while each open has its own
//     buffers, pipelines and batch, all released by Close;
//   - Dispatch only records; Commit runs the batch; Read fails unless
//     everything was committed and waited for;
//   - a buffer used after Free, or freed twice, fails loudly;
//   - views are page-rounded (16 KiB) and count that much;
//   - a dispatch of a pipeline not prepared at open is counted (lazy).

// emuDevice is the process-wide emulated device: the shader harnesses by
// kernel name, built once.
var emuDevice struct {
	once    sync.Once
	kernels map[string]*mslemu.Harness
	err     error
}

// emuKernels builds (once per process) and returns the harnesses.
func emuKernels() (map[string]*mslemu.Harness, error) {
	emuDevice.once.Do(func() {
		work, err := os.MkdirTemp("", "clef-metal-emu")
		if err != nil {
			emuDevice.err = err
			return
		}
		src := filepath.Join(work, "src")
		if err := os.Mkdir(src, 0o755); err != nil {
			emuDevice.err = err
			return
		}
		if err := shaders.WriteFiles(src); err != nil {
			emuDevice.err = err
			return
		}
		kernels := map[string]*mslemu.Harness{}
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, 2)
		for _, f := range shaders.Files() {
			wg.Add(1)
			go func(f string) {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				h, err := mslemu.Build(work, filepath.Join(src, f))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if emuDevice.err == nil {
						emuDevice.err = err
					}
					return
				}
				for _, k := range h.Kernels {
					kernels[k.Name] = h
				}
			}(f)
		}
		wg.Wait()
		// The harness binaries live in the user cache unless it is off;
		// then they stay in work for the life of the process.
		inWork := false
		for _, h := range kernels {
			if rel, err := filepath.Rel(work, h.Bin); err == nil && filepath.IsLocal(rel) {
				inWork = true
			}
		}
		if !inWork {
			os.RemoveAll(work)
		}
		emuDevice.kernels = kernels
	})
	return emuDevice.kernels, emuDevice.err
}

// emuPage is the page size of views (Apple silicon's 16 KiB).
const emuPage = 16 << 10

// emuBuf is device memory of the emulated GPU: a buffer (lead 0) or a
// no-copy view, whose data starts lead bytes into the view's first page.
type emuBuf struct {
	data  []byte
	lead  int
	n     int
	freed bool
}

func (b *emuBuf) Len() int { return b.n }

// at returns the bytes of b from view offset off.
func (b *emuBuf) at(off int) ([]byte, error) {
	if b.freed {
		return nil, fmt.Errorf("buffer used after Free")
	}
	if off < b.lead || off > b.lead+len(b.data) {
		return nil, fmt.Errorf("offset %d outside the buffer's bytes [%d, %d)", off, b.lead, b.lead+len(b.data))
	}
	return b.data[off-b.lead:], nil
}

// emuGPU is one open of the emulated device.
type emuGPU struct {
	mu      sync.Mutex
	kernels map[string]*mslemu.Harness

	// workingSet and maxBuffer are what Info reports (settable by tests
	// before the backend opens).
	workingSet, maxBuffer uint64

	live     map[*emuBuf]bool
	prepared map[string]bool
	batch    []dispatch
	unwaited int
	failure  *BufferError
	seq      int
	closed   bool

	// throttles counts Throttle calls (every command buffer has completed
	// by then: Commit runs it).
	throttles int
	// lazy counts dispatches of pipelines not prepared before;
	// misuse lists what a GPU would not forgive (double frees).
	lazy   int
	misuse []string
}

// EmulatorAvailable reports whether NewEmulated can run: this binary holds
// the emulator (the mslemu build tag) and clang++-19 is on PATH.
func EmulatorAvailable() (bool, string) {
	if !mslemu.Available() {
		return false, fmt.Sprintf("the MSL emulation harness needs %s (apt-get install clang-19)", mslemu.Clang)
	}
	return true, ""
}

// newEmuGPU opens the emulated device (compiling every shader the first
// time in the process).
func newEmuGPU() (*emuGPU, error) {
	if !mslemu.Available() {
		return nil, fmt.Errorf("metal: the emulated GPU needs %s on PATH", mslemu.Clang)
	}
	ks, err := emuKernels()
	if err != nil {
		return nil, err
	}
	return newEmuGPUWith(ks), nil
}

// newEmuGPUWith opens an emulated device whose library is ks (kernel name
// to harness).
func newEmuGPUWith(ks map[string]*mslemu.Harness) *emuGPU {
	return &emuGPU{kernels: ks, maxBuffer: 1 << 36, live: map[*emuBuf]bool{}, prepared: map[string]bool{}}
}

// NewEmulated returns the backend on the emulated GPU. The first call in a
// process compiles every shader with clang++-19 (cached between runs), so
// it needs clang-19 and takes a while the first time.
func NewEmulated() (*Backend, error) {
	g, err := newEmuGPU()
	if err != nil {
		return nil, err
	}
	return newBackend(g, "metal-emu")
}

func (g *emuGPU) Name() string { return "emulated GPU (MSL as C++ on CPU fibers)" }

func (g *emuGPU) Info() DeviceInfo {
	return DeviceInfo{Name: g.Name(), Families: []string{"Apple7 (emulated)"}, MaxBuffer: g.maxBuffer, WorkingSet: g.workingSet}
}

// newBuf makes and counts a buffer.
func (g *emuGPU) newBuf(b *emuBuf) (gbuf, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("metal: emulated device used after Close")
	}
	g.live[b] = true
	return b, nil
}

func (g *emuGPU) NewBuffer(n int) (gbuf, error) {
	if n <= 0 || uint64(n) > g.maxBuffer {
		return nil, fmt.Errorf("metal: a buffer of %d bytes (largest %d)", n, g.maxBuffer)
	}
	return g.newBuf(&emuBuf{data: make([]byte, n), n: n})
}

func (g *emuGPU) Upload(data []byte) (gbuf, error) {
	if len(data) == 0 || uint64(len(data)) > g.maxBuffer {
		return nil, fmt.Errorf("metal: an upload of %d bytes (largest %d)", len(data), g.maxBuffer)
	}
	return g.newBuf(&emuBuf{data: append([]byte(nil), data...), n: len(data)})
}

// Wrap makes a new view over data, page-rounded as a Metal no-copy view.
func (g *emuGPU) Wrap(data []byte) (gbuf, int, error) {
	if len(data) == 0 {
		return nil, 0, fmt.Errorf("metal: a view of no bytes")
	}
	lead := int(uintptr(unsafe.Pointer(unsafe.SliceData(data))) % emuPage)
	n := (lead + len(data) + emuPage - 1) / emuPage * emuPage
	if uint64(n) > g.maxBuffer {
		return nil, 0, fmt.Errorf("metal: a view of %d bytes is %w (%d)", n, errTooLarge, g.maxBuffer)
	}
	b, err := g.newBuf(&emuBuf{data: data, lead: lead, n: n})
	return b, lead, err
}

func (g *emuGPU) Free(b gbuf) {
	g.mu.Lock()
	defer g.mu.Unlock()
	eb, ok := b.(*emuBuf)
	if !ok || !g.live[eb] {
		g.misuse = append(g.misuse, fmt.Sprintf("Free of a buffer that is not live (%T, %d bytes)", b, b.Len()))
		return
	}
	delete(g.live, eb)
	eb.freed = true
}

// liveBuffers counts the buffers and views of this open not freed.
func (g *emuGPU) liveBuffers() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

func (g *emuGPU) Prepare(kernel string, consts []fconst) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.kernels[kernel] == nil {
		return fmt.Errorf("metal: no kernel %q in the library", kernel)
	}
	g.prepared[pipeKey(kernel, consts)] = true
	return nil
}

func (g *emuGPU) PipelineInfo(kernel string, consts []fconst) (PipelineInfo, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.prepared[pipeKey(kernel, consts)] {
		return PipelineInfo{}, fmt.Errorf("metal: pipeline %s not prepared", pipeKey(kernel, consts))
	}
	return PipelineInfo{MaxThreads: 1024, ExecWidth: 32}, nil
}

// check validates a buffer binding of d.
func (g *emuGPU) check(d *dispatch, a *arg) error {
	eb, ok := a.Buf.(*emuBuf)
	if !ok {
		return fmt.Errorf("metal: %s: buffer %d is not an emulator buffer (%T)", d.Kernel, a.Index, a.Buf)
	}
	if !g.live[eb] {
		return fmt.Errorf("metal: %s: buffer %d used after Free (or of another open)", d.Kernel, a.Index)
	}
	if _, err := eb.at(a.Off); err != nil {
		return fmt.Errorf("metal: %s: buffer %d: %w", d.Kernel, a.Index, err)
	}
	return nil
}

// Dispatch records d in the open batch.
func (g *emuGPU) Dispatch(d *dispatch) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("metal: emulated device used after Close")
	}
	if g.kernels[d.Kernel] == nil {
		return fmt.Errorf("metal: no kernel %q", d.Kernel)
	}
	if k := pipeKey(d.Kernel, d.Consts); !g.prepared[k] {
		g.lazy++
		g.prepared[k] = true
	}
	for i := range d.Bufs {
		if err := g.check(d, &d.Bufs[i]); err != nil {
			return err
		}
	}
	if d.Indirect != nil {
		if err := g.check(d, d.Indirect); err != nil {
			return err
		}
	}
	g.batch = append(g.batch, copyDispatch(d))
	return nil
}

// Commit runs the open batch in order, as one command buffer. A failing
// dispatch fails the buffer (the rest of it does not run), reported by
// Wait.
func (g *emuGPU) Commit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("metal: emulated device used after Close")
	}
	if len(g.batch) == 0 {
		return nil
	}
	batch := g.batch
	g.batch = nil
	g.seq++
	g.unwaited++
	for i := range batch {
		if err := g.run(&batch[i]); err != nil {
			if g.failure == nil {
				g.failure = &BufferError{Seq: g.seq, First: batch[0].Kernel, Last: batch[len(batch)-1].Kernel,
					Dispatches: len(batch), Status: 5, Msg: err.Error()}
			}
			break
		}
	}
	return nil
}

// Drop discards the open batch.
func (g *emuGPU) Drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batch = nil
}

// Throttle has nothing to wait for (Commit ran every command buffer to its
// end); it counts the call and reports a failed buffer, as a GPU would.
func (g *emuGPU) Throttle(ctx context.Context, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.throttles++
	if g.failure != nil {
		return g.failure
	}
	return nil
}

// Wait reports the first failed command buffer since the last Wait.
func (g *emuGPU) Wait(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unwaited = 0
	if f := g.failure; f != nil {
		g.failure = nil
		return f
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("waiting for the GPU: %w", err)
	}
	return nil
}

// Read copies from b; the work before must have been committed and waited
// for.
func (g *emuGPU) Read(b gbuf, off int, dst []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.batch) > 0 || g.unwaited > 0 {
		return fmt.Errorf("metal: Read with %d launches not committed and %d command buffers not waited for", len(g.batch), g.unwaited)
	}
	eb, ok := b.(*emuBuf)
	if !ok || !g.live[eb] {
		return fmt.Errorf("metal: Read of a buffer that is not live")
	}
	src, err := eb.at(off)
	if err != nil || len(dst) > len(src) {
		return fmt.Errorf("metal: read of %d bytes at %d outside the buffer", len(dst), off)
	}
	copy(dst, src)
	return nil
}

// GPUTimes reports nothing: the emulator measures no GPU time.
func (g *emuGPU) GPUTimes() []BufferTime { return nil }

// Close releases every buffer and view of this open; the device (its
// compiled kernels) stays for the next open.
func (g *emuGPU) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for b := range g.live {
		b.freed = true
	}
	g.live = map[*emuBuf]bool{}
	g.batch, g.closed = nil, true
	return nil
}

// run executes d now. A buffer bound twice at the same offset is passed
// once and aliased, as Metal would see one MTLBuffer; bound at different
// offsets, each binding is its own region in the harness, and afterwards
// writeBack applies to the buffer the bytes the kernel changed through
// each, so the buffer behaves as one memory.
func (g *emuGPU) run(d *dispatch) error {
	h := g.kernels[d.Kernel]
	grid := d.Grid
	if d.Indirect != nil {
		eb := d.Indirect.Buf.(*emuBuf)
		src, err := eb.at(d.Indirect.Off)
		if err != nil || len(src) < 12 {
			return fmt.Errorf("%s: indirect grid outside its buffer", d.Kernel)
		}
		for i := range grid {
			grid[i] = int(binary.LittleEndian.Uint32(src[4*i:]))
		}
		if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
			return nil
		}
	}
	job := &mslemu.Job{Kernel: d.Kernel, Grid: grid, Group: d.Group, Alias: map[int]int{}}
	for _, c := range d.Consts {
		v := []byte{byte(c.Value), byte(c.Value >> 8), byte(c.Value >> 16), byte(c.Value >> 24)}
		if c.Bool {
			v = []byte{0}
			if c.Value != 0 {
				v[0] = 1
			}
		}
		job.Consts = append(job.Consts, mslemu.Const{Index: c.Index, Value: v})
	}
	job.Buffers = append(job.Buffers, mslemu.Buffer{Index: 0, Data: d.Args})
	type key struct {
		b   *emuBuf
		off int
	}
	first := map[key]int{}  // (buffer, offset) -> its position in regions
	var regions []emuRegion // job.Buffers[i+1]'s memory
	for _, a := range d.Bufs {
		eb := a.Buf.(*emuBuf)
		if !g.live[eb] {
			return fmt.Errorf("%s: buffer %d freed before its command buffer ran", d.Kernel, a.Index)
		}
		mem, err := eb.at(a.Off)
		if err != nil {
			return fmt.Errorf("%s: buffer %d: %w", d.Kernel, a.Index, err)
		}
		k := key{eb, a.Off}
		r, seen := first[k]
		if !seen {
			r = len(regions)
			first[k] = r
			job.Buffers = append(job.Buffers, mslemu.Buffer{Index: a.Index, Data: mem})
			regions = append(regions, emuRegion{buf: eb, start: a.Off - eb.lead, mem: mem, index: a.Index})
		} else {
			job.Alias[a.Index] = regions[r].index
		}
		regions[r].out = regions[r].out || a.Out
	}
	res, err := h.Run(job)
	if err != nil {
		return err
	}
	if len(res) != len(job.Buffers) {
		return fmt.Errorf("%s: the harness returned %d buffers for %d bound", d.Kernel, len(res), len(job.Buffers))
	}
	for i := range regions {
		regions[i].after = res[i+1]
	}
	return writeBack(d.Kernel, regions)
}

// emuRegion is one buffer region passed to the harness: the bytes of buf
// from data index start to its end, bound at kernel index index (and any
// index aliased to it), out if the launch marks it as written.
type emuRegion struct {
	buf   *emuBuf
	start int
	mem   []byte // buf.data[start:], as sent
	after []byte // the region as the harness returned it
	index int
	out   bool
}

// writeBack applies to the buffers the bytes the kernel changed in regions.
// Only changed bytes are written, so that a region that overlaps another
// of the same buffer (a buffer bound at two offsets: each region runs to
// the buffer's end) does not put back, over the other's stores, the bytes
// it was sent: the buffer behaves as the one memory a GPU has. Two regions
// that store different values to one byte are a data race (on a GPU the
// result would depend on timing) and fail the launch; so does a store
// through a binding the launch does not mark as written.
func writeBack(kernel string, regions []emuRegion) error {
	var changed []*emuRegion
	for i := range regions {
		r := &regions[i]
		if len(r.after) != len(r.mem) {
			return fmt.Errorf("%s: buffer %d came back with %d bytes, sent %d", kernel, r.index, len(r.after), len(r.mem))
		}
		if bytes.Equal(r.after, r.mem) {
			continue
		}
		if !r.out {
			p := firstDiff(r.mem, r.after)
			return fmt.Errorf("%s: the kernel stored through buffer %d (at byte %d of the binding), which the launch has not marked as written",
				kernel, r.index, p)
		}
		changed = append(changed, r)
	}
	// Most launches change one region per buffer: it is copied whole (its
	// unchanged bytes equal the buffer's). Several changed regions of one
	// buffer are merged byte by byte against a copy of what was sent.
	for i, r := range changed {
		if r == nil {
			continue
		}
		group := []*emuRegion{r}
		for j := i + 1; j < len(changed); j++ {
			if changed[j] != nil && changed[j].buf == r.buf {
				group = append(group, changed[j])
				changed[j] = nil
			}
		}
		if len(group) == 1 {
			copy(r.mem, r.after)
			continue
		}
		if err := mergeRegions(kernel, group); err != nil {
			return err
		}
	}
	return nil
}

// mergeRegions writes into their buffer the bytes each of group (regions of
// one buffer, in binding order) changed, and reports two that changed one
// byte to different values.
func mergeRegions(kernel string, group []*emuRegion) error {
	if len(group) > 255 {
		return fmt.Errorf("%s: one buffer bound at %d offsets (at most 255 emulated)", kernel, len(group))
	}
	b := group[0].buf
	lo := group[0].start
	for _, r := range group {
		lo = min(lo, r.start)
	}
	// Every region runs to the end of the buffer's bytes.
	sent := bytes.Clone(b.data[lo:])
	owner := make([]uint8, len(sent)) // 1 + the position in group of the region that stored the byte
	for gi, r := range group {
		base := r.start - lo
		for p, v := range r.after {
			q := base + p
			if v == sent[q] {
				continue
			}
			switch o := owner[q]; {
			case o == 0:
				owner[q] = uint8(gi + 1)
				b.data[lo+q] = v
			case b.data[lo+q] != v:
				other := group[o-1]
				return fmt.Errorf("%s: buffers %d and %d, one buffer bound at two offsets, stored different values to its byte %d (a data race)",
					kernel, other.index, r.index, lo+q+b.lead)
			}
		}
	}
	return nil
}

// firstDiff returns the first index where a and b (of one length) differ.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// EmulatedForTest returns the backend on the emulated GPU for a test, closed
// when the test ends. It skips the test when clang-19 is missing or under
// -short (compiling and emulating every kernel is slow). Only with the
// mslemu build tag, which only tests use.
func EmulatedForTest(t testing.TB) *Backend {
	t.Helper()
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates every kernel")
	}
	b, err := NewEmulated()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
