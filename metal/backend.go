package metal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Backend implements backend.Backend on a gpu: every op checks its shapes on
// the host, then records kernel launches (shaders/*.metal); nothing comes back
// to the host before Read. Routing, the per-expert token lists and the masks
// stay on the device, so a whole forward is one command buffer on a Mac.
type Backend struct {
	dev  gpu
	name string
	// normCache holds float32 copies of non-f32 norm weights.
	normCache map[*tensor]*tensor
	// intr is the interrupt of the decision running now (Interrupt).
	intr intrState
}

var _ backend.Backend = (*Backend)(nil)

// tensor is the Handle of every backend.Tensor this backend returns.
type tensor struct {
	buf      gbuf
	off      int
	rows     int
	cols     int
	typ      quant.Type
	rowBytes int
	owned    bool // from Alloc/Upload: Release on Free
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
	// or, when the experts are stored one by one, parts[e] is its own view.
	experts         int
	stride, sStride int
	parts           []*tensor
}

func newBackend(dev gpu, name string) *Backend {
	return &Backend{dev: dev, name: name, normCache: map[*tensor]*tensor{}}
}

// Name returns the registry name.
func (b *Backend) Name() string { return b.name }

// Threads returns 1: the GPU is one device.
func (b *Backend) Threads() int { return 1 }

// Close releases the device.
func (b *Backend) Close() error { return b.dev.Close() }

// Device describes the device the backend runs on.
func (b *Backend) Device() string { return b.dev.Name() }

// budgeter is implemented by devices with a working-set limit.
type budgeter interface{ Budget() (int64, string) }

// CheckFit reports, before any weight is bound, whether need bytes of
// weights fit the GPU's working set (recommendedMaxWorkingSetSize), with an
// error that says how much is needed and which smaller quantization would
// fit. Weight enforces the same limit as tensors are bound.
func (b *Backend) CheckFit(need int64) error {
	if bg, ok := b.dev.(budgeter); ok {
		budget, name := bg.Budget()
		return CheckFit(need, budget, name)
	}
	return nil
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
	n := rows * cols * 4
	if n <= 0 {
		n = 4
	}
	buf, err := b.dev.Alloc(n)
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
// or copied where the kernels' alignment requires it.
func (b *Backend) bind(h *tensor, name string, data, sData, bData []byte) error {
	var err error
	if a := loadAlign(h.typ); uintptr(unsafe.Pointer(unsafe.SliceData(data)))%uintptr(a) != 0 {
		// The kernels load these blocks as 16- or 32-bit words
		// (shaders/quants.h): a tensor whose mapped bytes are not so aligned
		// is copied into a fresh buffer, which is.
		h.buf, err = b.dev.Upload(data)
		h.off = 0
	} else {
		h.buf, h.off, err = b.dev.Wrap(data)
	}
	if err != nil {
		return fmt.Errorf("metal: weight %s: %w", name, err)
	}
	if h.sRowBytes > 0 {
		if h.sBuf, h.sOff, err = b.dev.Wrap(sData); err != nil {
			return fmt.Errorf("metal: weight %s scales: %w", name, err)
		}
		if h.bBuf, h.bOff, err = b.dev.Wrap(bData); err != nil {
			return fmt.Errorf("metal: weight %s biases: %w", name, err)
		}
	} else {
		h.sBuf, h.sOff, h.bBuf, h.bOff = h.buf, h.off, h.buf, h.off
	}
	return nil
}

// bindStack binds stacked experts [E, rows, cols]. A contiguous stack (Data
// holds the E matrices back to back, as a GGUF *_exps tensor does) is one
// view with a fixed expert stride, so that MoE reaches every expert in one
// launch; a parted one (Parts, one slice per expert) is one view per expert,
// launched expert by expert. A contiguous stack larger than the device's
// largest buffer is bound as if parted.
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
	if t.Parts == nil {
		if len(t.Data) != E*h.stride {
			return nil, fmt.Errorf("metal: weight %s: %d bytes, want %d for %v %v", t.Name, len(t.Data), E*h.stride, t.Type, t.Shape)
		}
		var sData, bData []byte
		if h.sRowBytes > 0 {
			sData, bData = t.Scales.Data, t.Biases.Data
			if len(sData) != E*h.sStride || len(bData) != E*h.sStride {
				return nil, fmt.Errorf("metal: weight %s: scales/biases hold %d/%d bytes, want %d", t.Name, len(sData), len(bData), E*h.sStride)
			}
		}
		err := b.bind(h, t.Name, t.Data, sData, bData)
		if err == nil || !errors.Is(err, errTooLarge) {
			return h, err
		}
	} else if len(t.Parts) != E {
		return nil, fmt.Errorf("metal: weight %s: %d parts for %d experts", t.Name, len(t.Parts), E)
	}
	h.parts = make([]*tensor, E)
	for e := range h.parts {
		var sc, bi *weights.Tensor
		if h.sRowBytes > 0 {
			sc, bi = &weights.Tensor{Data: t.Scales.Part(e)}, &weights.Tensor{Data: t.Biases.Part(e)}
		}
		if h.parts[e], err = b.bindMatrix(t, rows, cols, t.Part(e), sc, bi); err != nil {
			return nil, fmt.Errorf("%w (expert %d)", err, e)
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
	src := f32Bytes(data)
	if len(src) == 0 {
		src = make([]byte, 4)
	}
	buf, err := b.dev.Upload(src)
	if err != nil {
		return nil, err
	}
	return wrapT(&tensor{buf: buf, rows: rows, cols: cols, typ: quant.F32, rowBytes: 4 * cols, owned: true}), nil
}

// Read returns t as float32 (I32 tensors converted, weights decoded on the
// host), after running the recorded work.
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
	if n > 0 {
		if err := b.dev.Read(ctx, h.buf, h.off, raw); err != nil {
			return nil, err
		}
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
		b.dev.Release(h.buf)
		if c := b.normCache[h]; c != nil {
			b.dev.Release(c.buf)
			delete(b.normCache, h)
		}
	}
}

func groups(n, per int) int { return (n + per - 1) / per }

func (b *Backend) run(kernel string, grid, group [3]int, args []byte, bufs ...arg) error {
	return b.dispatch(&dispatch{Kernel: kernel, Grid: grid, Group: group, Args: args, Bufs: bufs})
}

func in(i int, h *tensor) arg  { return arg{Index: i, Buf: h.buf, Off: h.off} }
func out(i int, h *tensor) arg { return arg{Index: i, Buf: h.buf, Off: h.off, Out: true} }

// hostInts uploads an int32 table for one op (a fresh buffer: the host must
// never write memory that recorded work may still read).
func (b *Backend) hostInts(v []int) (gbuf, error) {
	data := i32Bytes(v)
	if len(data) == 0 {
		data = make([]byte, 4)
	}
	return b.dev.Upload(data)
}
func b2i(v bool) int32 {
	if v {
		return 1
	}
	return 0
}
