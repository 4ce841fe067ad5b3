package metal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Backend implements backend.Backend on a gpu: every op checks its shapes on
// the host, then appends kernel launches (shaders/*.metal) to the open batch
// (commit.go); nothing comes back to the host before Read. Routing, the
// per-expert token lists and the masks stay on the device. Memory is the
// pool's (pool.go), counted against the working set.
type Backend struct {
	dev  gpu
	name string
	info DeviceInfo

	mu     sync.Mutex // the batch, the pool, the stats, the caches
	open   batch
	pool   pool
	stats  Stats
	trace  bool
	closed bool
	// failed is a commit failure no op could return yet (one made to free
	// memory): the next launch or Read returns it.
	failed error
	// opSeconds is the estimated work at which an op splits its launch
	// (cost.go; lowered by tests to split small shapes).
	opSeconds float64
	// seq numbers the command buffers committed (as the device does);
	// inflight holds the estimated work of those whose GPU time was not
	// reported yet, and slow the measured slowdown against the estimates
	// (calibrate; 0 or 1: none).
	seq      int
	inflight []bufferEstimate
	slow     float64
	// pipes are the pipelines prepared at open (pipelines.go); tensorFams
	// the tensor families whose pipelines all built (tensor.go), fixed at
	// open.
	pipes      []PipelineReport
	tensorFams map[string]bool

	// normCache holds float32 copies of non-f32 norm weights.
	normCache map[*tensor]*tensor
	// tables caches the host tables RoPE uploads (rope.go).
	tables tableCache
	// intr is the interrupt of the decision running now (Interrupt).
	intr atomic.Pointer[interrupt]
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.RowChunker = (*Backend)(nil)

// tensor is the Handle of every backend.Tensor this backend returns.
type tensor struct {
	buf      gbuf
	off      int
	rows     int
	cols     int
	typ      quant.Type
	rowBytes int
	owned    bool // from the pool or an upload: released on Free
	freed    bool
	src      *weights.Tensor // bound checkpoint tensor (weights only)

	// MLX affine weights: scales and biases, per row sRowBytes bytes.
	sBuf, bBuf gbuf
	sOff, bOff int
	sRowBytes  int
	groupSize  int
	scaleBF16  bool
	nExpert    int // Route ids: the number of experts routed over

	// Stacked experts [experts, rows, cols] (a weight bound from a 3-D
	// weights.Tensor, for MoE only): expert e's matrix starts e*stride bytes
	// (its MLX scales and biases e*sStride bytes) after off in one buffer,
	// or, when the experts are stored one by one, parts[e] is its own view
	// (its MLX scales and biases still at e*sStride in the stack's views).
	experts         int
	stride, sStride int
	parts           []*tensor
}

// newBackend opens the backend on an opened device: it prepares every
// pipeline the ops can use (pipelines.go), so that a compile failure shows
// at open, with the compiler's log, and no request pays for compiling.
func newBackend(dev gpu, name string) (*Backend, error) {
	info := dev.Info()
	b := &Backend{dev: dev, name: name, info: info, opSeconds: opSeconds, normCache: map[*tensor]*tensor{}}
	b.pool = newPool(dev, int64(info.WorkingSet))
	if err := b.prepare(); err != nil {
		dev.Close()
		return nil, err
	}
	return b, nil
}

// Name returns the registry name.
func (b *Backend) Name() string { return b.name }

// Threads returns 1: the GPU is one device.
func (b *Backend) Threads() int { return 1 }

// Close waits for the work committed, then releases every buffer and view
// of this open and the device; the backend cannot be used afterwards, and
// the device can be opened again (the daemon unloads an idle model and
// loads it again later).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.open.launches, b.open.seconds = nil, 0
	werr := b.dev.Wait(context.Background())
	b.open.after = nil
	b.pool.freeAll()
	b.normCache = map[*tensor]*tensor{}
	b.tables = tableCache{}
	b.stats = Stats{}
	if err := b.dev.Close(); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("metal: closing: %w", werr)
	}
	return nil
}

// Device describes the device the backend runs on.
func (b *Backend) Device() string { return b.dev.Name() }

// Info describes the device: name, families and limits.
func (b *Backend) Info() DeviceInfo { return b.info }

// CheckFit reports, before any weight is bound, whether need bytes of
// weights fit the GPU's working set (recommendedMaxWorkingSetSize), with an
// error that says how much is needed and which smaller quantization would
// fit. Weight enforces the same limit as tensors are bound.
func (b *Backend) CheckFit(need int64) error {
	return CheckFit(need, int64(b.info.WorkingSet), b.dev.Name())
}

// trimHook commits the open batch before the pool frees cached buffers its
// launches may use (which also frees the buffers that waited for it).
// Called with b.mu held.
func (b *Backend) trimHook() {
	if len(b.open.launches) == 0 {
		b.freeAfter()
		return
	}
	// The buffers must not be freed under a pending launch: commit drops
	// the batch on an encoding failure, which the next launch or Read
	// reports. An interrupted decision is not a failure to report: trim
	// often runs from a release deferred past the cancel, and the next
	// decision must not fail with it.
	if err := b.commit(); err != nil && b.failed == nil && !isInterrupt(err) {
		b.failed = err
	}
}

// isInterrupt reports whether err says that the decision's context ended.
func isInterrupt(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// alloc returns a pool buffer of n bytes (at least 4) for the GPU to write.
func (b *Backend) alloc(n int, what string) (gbuf, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("metal: backend used after Close")
	}
	return b.pool.get(max(n, 4), what, b.trimHook)
}

// upload returns a fresh buffer holding data (never a pooled one: the GPU
// may still read a released buffer's old contents). weight counts it as a
// weight (a copy kept while the model is loaded).
func (b *Backend) upload(data []byte, what string, weight bool) (gbuf, error) {
	if len(data) == 0 {
		data = make([]byte, 4)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("metal: backend used after Close")
	}
	if err := b.pool.reserve(int64(len(data)), what, weight, b.trimHook); err != nil {
		return nil, err
	}
	g, err := b.dev.Upload(data)
	if err != nil {
		return nil, fmt.Errorf("metal: %s: %w", what, err)
	}
	kind := kindUpload
	if weight {
		kind = kindWeight
	}
	b.pool.add(g, int64(g.Len()), kind)
	return g, nil
}

// wrap makes a no-copy view of weight bytes, counted by the view's length.
func (b *Backend) wrap(data []byte, what string) (gbuf, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, 0, errors.New("metal: backend used after Close")
	}
	// A view costs at most its bytes plus a page at each end.
	if err := b.pool.reserve(int64(len(data)), what, true, b.trimHook); err != nil {
		return nil, 0, err
	}
	g, off, err := b.dev.Wrap(data)
	if err != nil {
		return nil, 0, err
	}
	b.pool.add(g, int64(g.Len()), kindWeight)
	if b.pool.budget > 0 && b.pool.total() > b.pool.budget {
		b.pool.freeNow(g)
		return nil, 0, &MemoryError{Need: int64(g.Len()), What: what, Budget: b.pool.budget, Weights: b.pool.weights,
			Live: b.pool.live, Cached: b.pool.cached, Device: b.dev.Name(), weightsOnly: true}
	}
	return g, off, nil
}

// release gives back a buffer the ops are done with: a pool buffer goes
// back to the pool; any other is freed once the open batch (which may use
// it) is committed.
func (b *Backend) release(g gbuf) {
	if g == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if !b.pool.put(g, b.trimHook) {
		if _, ok := b.pool.owned[g]; ok {
			b.open.after = append(b.open.after, g)
		}
	}
}

func (b *Backend) handle(t *backend.Tensor, what string) (*tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("metal: %s: nil tensor", what)
	}
	h, ok := t.Handle.(*tensor)
	if !ok {
		return nil, fmt.Errorf("metal: %s: not a metal tensor (handle %T)", what, t.Handle)
	}
	if h.freed {
		return nil, fmt.Errorf("metal: %s: tensor used after Free", what)
	}
	if h.experts > 0 {
		return nil, fmt.Errorf("metal: %s: stacked experts %v are for MoE only", what, h.src.Shape)
	}
	return h, nil
}

// act returns an f32 activation handle.
func (b *Backend) act(t *backend.Tensor, what string) (*tensor, error) {
	h, err := b.handle(t, what)
	if err != nil {
		return nil, err
	}
	if h.typ != quant.F32 || h.src != nil {
		return nil, fmt.Errorf("metal: %s: not a float32 activation (%v)", what, h.typ)
	}
	return h, nil
}

func (b *Backend) newAct(rows, cols int) (*tensor, error) {
	if rows < 0 || cols < 0 || (cols > 0 && rows > math.MaxInt/4/cols) {
		return nil, fmt.Errorf("metal: activation [%d %d] is too large", rows, cols)
	}
	buf, err := b.alloc(rows*cols*4, fmt.Sprintf("a [%d %d] float32 activation", rows, cols))
	if err != nil {
		return nil, err
	}
	return &tensor{buf: buf, rows: rows, cols: cols, typ: quant.F32, rowBytes: 4 * cols, owned: true}, nil
}

func wrapT(h *tensor) *backend.Tensor {
	return &backend.Tensor{Type: h.typ, Shape: []int{h.rows, h.cols}, Handle: h}
}

// kernelSuffix names a storage type in kernel names (mul_mm_<suffix>).
func kernelSuffix(t quant.Type) (string, error) {
	switch t {
	case quant.F32:
		return "f32", nil
	case quant.F16:
		return "f16", nil
	case quant.BF16:
		return "bf16", nil
	case quant.Q4_0:
		return "q4_0", nil
	case quant.Q4_1:
		return "q4_1", nil
	case quant.Q5_0:
		return "q5_0", nil
	case quant.Q5_1:
		return "q5_1", nil
	case quant.Q8_0:
		return "q8_0", nil
	case quant.Q2_K:
		return "q2_K", nil
	case quant.Q3_K:
		return "q3_K", nil
	case quant.Q4_K:
		return "q4_K", nil
	case quant.Q5_K:
		return "q5_K", nil
	case quant.Q6_K:
		return "q6_K", nil
	case quant.MLXAffine4:
		return "mlx4", nil
	case quant.MLXAffine8:
		return "mlx8", nil
	}
	return "", fmt.Errorf("metal: no kernels for storage type %v", t)
}

// SupportedTypes lists the weight storage types the kernels read.
func SupportedTypes() []quant.Type {
	return []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0,
		quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.MLXAffine4, quant.MLXAffine8}
}

// Weight binds a checkpoint tensor without copying its bytes (where the
// device can wrap them): a matrix [rows, cols], a vector [n] (as one row),
// or stacked experts [E, rows, cols] (see bindStack).
func (b *Backend) Weight(t *weights.Tensor) (*backend.Tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("metal: Weight: nil tensor")
	}
	var h *tensor
	var err error
	switch len(t.Shape) {
	case 1:
		h, err = b.bindMatrix(t, 1, t.Shape[0], t.Data, t.Scales, t.Biases)
	case 2:
		h, err = b.bindMatrix(t, t.Shape[0], t.Shape[1], t.Data, t.Scales, t.Biases)
	case 3:
		h, err = b.bindStack(t)
	default:
		return nil, fmt.Errorf("metal: weight %s: shape %v is not 1-D, 2-D or 3-D", t.Name, t.Shape)
	}
	if err != nil {
		return nil, err
	}
	return &backend.Tensor{Type: t.Type, Shape: append([]int(nil), t.Shape...), Handle: h}, nil
}

// layout checks that t's type and a [rows, cols] matrix of it suit the
// kernels and returns an unbound handle with its row layout.
func layout(t *weights.Tensor, rows, cols int) (*tensor, error) {
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("metal: weight %s: bad shape %v", t.Name, t.Shape)
	}
	if _, err := kernelSuffix(t.Type); err != nil {
		return nil, fmt.Errorf("metal: weight %s: %w", t.Name, err)
	}
	h := &tensor{rows: rows, cols: cols, typ: t.Type, src: t}
	switch t.Type {
	case quant.MLXAffine4, quant.MLXAffine8:
		bits := 4
		if t.Type == quant.MLXAffine8 {
			bits = 8
		}
		gs := t.GroupSize
		if gs <= 0 || gs%32 != 0 || cols%gs != 0 {
			return nil, fmt.Errorf("metal: weight %s: MLX group size %d must be a positive multiple of 32 dividing %d columns", t.Name, gs, cols)
		}
		h.rowBytes = cols * bits / 8
		h.groupSize = gs
		if t.Scales == nil || t.Biases == nil {
			return nil, fmt.Errorf("metal: weight %s: MLX affine weight without scales and biases", t.Name)
		}
		if t.Scales.Type != t.Biases.Type || (t.Scales.Type != quant.F16 && t.Scales.Type != quant.BF16) {
			return nil, fmt.Errorf("metal: weight %s: MLX scales/biases must both be f16 or bf16, got %v/%v", t.Name, t.Scales.Type, t.Biases.Type)
		}
		h.scaleBF16 = t.Scales.Type == quant.BF16
		h.sRowBytes = 2 * (cols / gs)
	default:
		f, err := quant.FormatOf(t.Type)
		if err != nil {
			return nil, fmt.Errorf("metal: weight %s: %w", t.Name, err)
		}
		if cols%f.BlockElems != 0 {
			return nil, fmt.Errorf("metal: weight %s: %d columns are not a multiple of the %v block (%d)", t.Name, cols, t.Type, f.BlockElems)
		}
		h.rowBytes = cols / f.BlockElems * f.BlockBytes
	}
	return h, nil
}

// bindMatrix binds one [rows, cols] matrix of t: data, and for MLX formats
// the scales and biases.
func (b *Backend) bindMatrix(t *weights.Tensor, rows, cols int, data []byte, scales, biases *weights.Tensor) (*tensor, error) {
	h, err := layout(t, rows, cols)
	if err != nil {
		return nil, err
	}
	var sData, bData []byte
	if h.sRowBytes > 0 {
		sData, bData = scales.Data, biases.Data
		if len(sData) != rows*h.sRowBytes || len(bData) != rows*h.sRowBytes {
			return nil, fmt.Errorf("metal: weight %s: scales/biases hold %d/%d bytes, want %d", t.Name, len(sData), len(bData), rows*h.sRowBytes)
		}
	}
	if len(data) != rows*h.rowBytes {
		return nil, fmt.Errorf("metal: weight %s: %d bytes, want %d for %v %v", t.Name, len(data), rows*h.rowBytes, t.Type, t.Shape)
	}
	return h, b.bind(h, t.Name, data, sData, bData)
}

// bind points h at data (and MLX sData, bData): wrapped without a copy,
// or copied where the kernels' alignment requires it. On an error nothing
// stays bound.
func (b *Backend) bind(h *tensor, name string, data, sData, bData []byte) error {
	if err := b.bindData(h, name, data); err != nil {
		return err
	}
	if h.sRowBytes == 0 {
		h.sBuf, h.sOff, h.bBuf, h.bOff = h.buf, h.off, h.buf, h.off
		return nil
	}
	if err := b.bindScales(h, name, sData, bData); err != nil {
		b.unbind(h)
		return err
	}
	return nil
}

// bindData points h at its weight bytes.
func (b *Backend) bindData(h *tensor, name string, data []byte) error {
	var err error
	if a := loadAlign(h.typ); uintptr(unsafe.Pointer(unsafe.SliceData(data)))%uintptr(a) != 0 {
		// The kernels load these blocks as 16- or 32-bit words
		// (shaders/quants.h): a tensor whose mapped bytes are not so aligned
		// is copied into a fresh buffer, which is.
		h.buf, err = b.upload(data, "weight "+name, true)
		h.off = 0
	} else {
		h.buf, h.off, err = b.wrap(data, "weight "+name)
	}
	if err != nil {
		return fmt.Errorf("metal: weight %s: %w", name, err)
	}
	return nil
}

// bindScales points h at its MLX scales and biases (one view each).
func (b *Backend) bindScales(h *tensor, name string, sData, bData []byte) error {
	var err error
	if h.sBuf, h.sOff, err = b.wrap(sData, "weight "+name+" scales"); err != nil {
		h.sBuf = nil
		return fmt.Errorf("metal: weight %s scales: %w", name, err)
	}
	if h.bBuf, h.bOff, err = b.wrap(bData, "weight "+name+" biases"); err != nil {
		h.bBuf = nil
		return fmt.Errorf("metal: weight %s biases: %w", name, err)
	}
	return nil
}

// unbind frees the views and copies bound to h (a weight whose binding
// failed half way).
func (b *Backend) unbind(h *tensor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, g := range []gbuf{h.buf, h.sBuf, h.bBuf} {
		if g != nil {
			b.pool.freeNow(g)
		}
	}
	h.buf, h.sBuf, h.bBuf = nil, nil, nil
	for _, p := range h.parts {
		if p != nil && p.buf != nil {
			b.pool.freeNow(p.buf)
			p.buf = nil
		}
	}
}

// bindStack binds stacked experts [E, rows, cols]. A contiguous stack (Data
// holds the E matrices back to back, as a GGUF *_exps tensor or an MLX
// switch_mlp tensor does) is one view with a fixed expert stride, so that
// MoE reaches every expert in one launch; a parted one (Parts, one slice
// per expert) is one view per expert, launched expert by expert. A
// contiguous stack larger than the device's largest buffer is bound as if
// parted. MLX scales and biases are always one view each, shared by the
// experts at e*sStride (never a view or a copy per expert).
func (b *Backend) bindStack(t *weights.Tensor) (*tensor, error) {
	E, rows, cols := t.Shape[0], t.Shape[1], t.Shape[2]
	if E <= 0 {
		return nil, fmt.Errorf("metal: weight %s: bad shape %v", t.Name, t.Shape)
	}
	h, err := layout(t, rows, cols)
	if err != nil {
		return nil, err
	}
	h.experts, h.stride, h.sStride = E, rows*h.rowBytes, rows*h.sRowBytes
	if t.Parts != nil && len(t.Parts) != E {
		return nil, fmt.Errorf("metal: weight %s: %d parts for %d experts", t.Name, len(t.Parts), E)
	}
	if t.Parts == nil && len(t.Data) != E*h.stride {
		return nil, fmt.Errorf("metal: weight %s: %d bytes, want %d for %v %v", t.Name, len(t.Data), E*h.stride, t.Type, t.Shape)
	}
	for e := 0; e < E && t.Parts != nil; e++ {
		if len(t.Parts[e]) != h.stride {
			return nil, fmt.Errorf("metal: weight %s: expert %d has %d bytes, want %d", t.Name, e, len(t.Parts[e]), h.stride)
		}
	}
	if h.sRowBytes > 0 {
		sData, bData := t.Scales.Data, t.Biases.Data
		if len(sData) != E*h.sStride || len(bData) != E*h.sStride {
			return nil, fmt.Errorf("metal: weight %s: scales/biases hold %d/%d bytes, want %d (stacked scales in one tensor)", t.Name, len(sData), len(bData), E*h.sStride)
		}
		if err := b.bindScales(h, t.Name, sData, bData); err != nil {
			b.unbind(h)
			return nil, err
		}
	}
	if t.Parts == nil {
		err := b.bindData(h, t.Name, t.Data)
		if err == nil {
			if h.sRowBytes == 0 {
				h.sBuf, h.sOff, h.bBuf, h.bOff = h.buf, h.off, h.buf, h.off
			}
			return h, nil
		}
		if !errors.Is(err, errTooLarge) {
			b.unbind(h)
			return nil, err
		}
	}
	h.parts = make([]*tensor, E)
	for e := range h.parts {
		p := &tensor{rows: rows, cols: cols, typ: h.typ, src: t, rowBytes: h.rowBytes, sRowBytes: h.sRowBytes,
			groupSize: h.groupSize, scaleBF16: h.scaleBF16}
		h.parts[e] = p
		if err := b.bindData(p, t.Name, t.Part(e)); err != nil {
			b.unbind(h)
			return nil, fmt.Errorf("%w (expert %d)", err, e)
		}
		if h.sRowBytes > 0 {
			p.sBuf, p.sOff, p.bBuf, p.bOff = h.sBuf, h.sOff+e*h.sStride, h.bBuf, h.bOff+e*h.sStride
		} else {
			p.sBuf, p.sOff, p.bBuf, p.bOff = p.buf, p.off, p.buf, p.off
		}
	}
	return h, nil
}

// loadAlign is the alignment, in bytes, that the kernels' wide loads need of
// a weight's first byte (shaders/quants.h): every block of the tensor then
// has it too.
func loadAlign(t quant.Type) int {
	switch t {
	case quant.Q4_K, quant.MLXAffine4, quant.MLXAffine8:
		return 4
	case quant.Q8_0, quant.Q6_K:
		return 2
	}
	return 1
}

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func i32Bytes(v []int) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(x)))
	}
	return out
}

// Upload copies host data into a new [rows, cols] tensor.
func (b *Backend) Upload(data []float32, rows, cols int) (*backend.Tensor, error) {
	if rows < 0 || cols < 0 || rows*cols != len(data) {
		return nil, fmt.Errorf("metal: Upload: %d values for shape [%d %d]", len(data), rows, cols)
	}
	buf, err := b.upload(f32Bytes(data), fmt.Sprintf("an upload of [%d %d] float32", rows, cols), false)
	if err != nil {
		return nil, err
	}
	return wrapT(&tensor{buf: buf, rows: rows, cols: cols, typ: quant.F32, rowBytes: 4 * cols, owned: true}), nil
}

// Read returns t as float32 (I32 tensors converted, weights decoded on the
// host): it commits the open batch and waits for every command buffer (the
// only place the backend waits for the GPU). When ctx is done it returns
// an error wrapping ctx.Err() once the committed work has finished.
func (b *Backend) Read(ctx context.Context, t *backend.Tensor) ([]float32, error) {
	h, err := b.handle(t, "Read")
	if err != nil {
		return nil, err
	}
	if h.src != nil {
		return weights.Float32(h.src)
	}
	n := h.rows * h.cols
	raw := make([]byte, 4*n)
	if err := b.readRaw(ctx, h, raw); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		u := binary.LittleEndian.Uint32(raw[4*i:])
		if h.typ == quant.I32 {
			out[i] = float32(int32(u))
		} else {
			out[i] = math.Float32frombits(u)
		}
	}
	return out, nil
}

// Free releases tensors made by this backend's ops and Upload.
func (b *Backend) Free(ts ...*backend.Tensor) {
	for _, t := range ts {
		if t == nil {
			continue
		}
		h, ok := t.Handle.(*tensor)
		if !ok || h.freed || !h.owned {
			continue
		}
		h.freed = true
		b.release(h.buf)
	}
}

// readRaw copies h's bytes into raw once the work that writes them is done.
func (b *Backend) readRaw(ctx context.Context, h *tensor, raw []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("metal: Read after Close")
	}
	if err := b.sync(ctx); err != nil {
		return err
	}
	if len(raw) == 0 {
		return nil
	}
	if err := b.dev.Read(h.buf, h.off, raw); err != nil {
		return fmt.Errorf("metal: Read: %w", err)
	}
	return nil
}

func groups(n, per int) int { return (n + per - 1) / per }

// run launches kernel with estimated cost c.
func (b *Backend) run(c cost, kernel string, grid, group [3]int, args []byte, bufs ...arg) error {
	return b.launch(&dispatch{Kernel: kernel, Grid: grid, Group: group, Args: args, Bufs: bufs}, c)
}

func in(i int, h *tensor) arg  { return arg{Index: i, Buf: h.buf, Off: h.off} }
func out(i int, h *tensor) arg { return arg{Index: i, Buf: h.buf, Off: h.off, Out: true} }

// hostInts uploads an int32 table for one op (a fresh buffer: the host must
// never write memory that recorded work may still read); release it when
// the op has launched.
func (b *Backend) hostInts(v []int) (gbuf, error) {
	return b.upload(i32Bytes(v), fmt.Sprintf("a table of %d int32", len(v)), false)
}
func b2i(v bool) int32 {
	if v {
		return 1
	}
	return 0
}
