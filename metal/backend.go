package metal

import (
	"context"
	"encoding/binary"
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
	// stacks caches the one view over an expert set whose experts lie back
	// to back in memory (nil: they do not).
	stacks map[stackKey]*stack
}

// stackKey names an expert set by its first and last tensors and length.
type stackKey struct {
	first, last *tensor
	n           int
}

// stack is one view over E expert matrices that lie back to back with a
// fixed stride (a GGUF *_exps tensor), so that one gathered launch reaches
// every expert: expert e starts e*stride bytes after the view's offset.
type stack struct {
	buf, sBuf, bBuf gbuf
	off, sOff, bOff int
	stride, sStride int
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
}

func newBackend(dev gpu, name string) *Backend {
	return &Backend{dev: dev, name: name, normCache: map[*tensor]*tensor{}, stacks: map[stackKey]*stack{}}
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
// device can wrap them).
func (b *Backend) Weight(t *weights.Tensor) (*backend.Tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("metal: Weight: nil tensor")
	}
	var rows, cols int
	switch len(t.Shape) {
	case 1:
		rows, cols = 1, t.Shape[0]
	case 2:
		rows, cols = t.Shape[0], t.Shape[1]
	default:
		return nil, fmt.Errorf("metal: weight %s: shape %v is not 1-D or 2-D", t.Name, t.Shape)
	}
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
		if len(t.Scales.Data) != rows*h.sRowBytes || len(t.Biases.Data) != rows*h.sRowBytes {
			return nil, fmt.Errorf("metal: weight %s: scales/biases hold %d/%d bytes, want %d", t.Name, len(t.Scales.Data), len(t.Biases.Data), rows*h.sRowBytes)
		}
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
	if len(t.Data) != rows*h.rowBytes {
		return nil, fmt.Errorf("metal: weight %s: %d bytes, want %d for %v %v", t.Name, len(t.Data), rows*h.rowBytes, t.Type, t.Shape)
	}
	var err error
	if a := loadAlign(t.Type); uintptr(unsafe.Pointer(unsafe.SliceData(t.Data)))%uintptr(a) != 0 {
		// The kernels load these blocks as 16- or 32-bit words
		// (shaders/quants.h): a tensor whose mapped bytes are not so aligned
		// is copied into a fresh buffer, which is.
		h.buf, err = b.dev.Upload(t.Data)
		h.off = 0
	} else {
		h.buf, h.off, err = b.dev.Wrap(t.Data)
	}
	if err != nil {
		return nil, fmt.Errorf("metal: weight %s: %w", t.Name, err)
	}
	if h.sRowBytes > 0 {
		if h.sBuf, h.sOff, err = b.dev.Wrap(t.Scales.Data); err != nil {
			return nil, fmt.Errorf("metal: weight %s scales: %w", t.Name, err)
		}
		if h.bBuf, h.bOff, err = b.dev.Wrap(t.Biases.Data); err != nil {
			return nil, fmt.Errorf("metal: weight %s biases: %w", t.Name, err)
		}
	} else {
		h.sBuf, h.sOff, h.bBuf, h.bOff = h.buf, h.off, h.buf, h.off
	}
	return &backend.Tensor{Type: t.Type, Shape: append([]int(nil), t.Shape...), Handle: h}, nil
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
	return b.dev.Dispatch(&dispatch{Kernel: kernel, Grid: grid, Group: group, Args: args, Bufs: bufs})
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

// Embed gathers rows of table for ids.
func (b *Backend) Embed(table *backend.Tensor, ids []int) (*backend.Tensor, error) {
	w, err := b.handle(table, "Embed table")
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if id < 0 || id >= w.rows {
			return nil, fmt.Errorf("metal: Embed: id %d at %d outside the table's %d rows", id, i, w.rows)
		}
	}
	suffix, err := kernelSuffix(w.typ)
	if err != nil {
		return nil, err
	}
	y, err := b.newAct(len(ids), w.cols)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return wrapT(y), nil
	}
	idb, err := b.hostInts(ids)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(idb)
	a := KargsGetRows{NIDs: int32(len(ids)), Cols: int32(w.cols), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRowBytes),
		GroupSize: int32(w.groupSize), ScaleBF16: b2i(w.scaleBF16), NRows: int32(w.rows)}
	err = b.run("get_rows_"+suffix, [3]int{len(ids), 1, 1}, [3]int{64, 1, 1}, Bytes(&a),
		in(1, w), arg{Index: 2, Buf: w.sBuf, Off: w.sOff}, arg{Index: 3, Buf: w.bBuf, Off: w.bOff},
		arg{Index: 4, Buf: idb}, out(5, y))
	return wrapT(y), err
}

func b2i(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

// mvMaxTokens is the largest token count that uses the mat-vec kernels.
const mvMaxTokens = 8

// MatMul computes x Wᵀ: x [M, K] f32, w [N, K] (a weight of any supported
// type, or an f32 activation), out [M, N].
func (b *Backend) MatMul(x, w *backend.Tensor) (*backend.Tensor, error) {
	xh, err := b.act(x, "MatMul x")
	if err != nil {
		return nil, err
	}
	wh, err := b.handle(w, "MatMul w")
	if err != nil {
		return nil, err
	}
	if wh.cols != xh.cols {
		return nil, fmt.Errorf("metal: MatMul: x is [%d %d] but w is [%d %d]", xh.rows, xh.cols, wh.rows, wh.cols)
	}
	y, err := b.newAct(xh.rows, wh.rows)
	if err != nil {
		return nil, err
	}
	return wrapT(y), b.matmul(xh, wh, y)
}

func (b *Backend) matmul(xh, wh, y *tensor) error {
	suffix, err := kernelSuffix(wh.typ)
	if err != nil {
		return err
	}
	M, N, K := wh.rows, xh.rows, wh.cols
	if N == 0 || M == 0 {
		return nil
	}
	a := KargsMatmul{M: int32(M), N: int32(N), K: int32(K), XStride: int32(xh.cols), YStride: int32(y.cols),
		GroupSize: int32(wh.groupSize), RowBytes: uint64(wh.rowBytes), SRowBytes: uint64(wh.sRowBytes), ScaleBF16: b2i(wh.scaleBF16)}
	sBuf, sOff, bBuf, bOff := wh.sBuf, wh.sOff, wh.bBuf, wh.bOff
	if sBuf == nil { // an activation as the right-hand side
		sBuf, sOff, bBuf, bOff = wh.buf, wh.off, wh.buf, wh.off
	}
	bufs := []arg{in(1, wh), {Index: 2, Buf: sBuf, Off: sOff}, {Index: 3, Buf: bBuf, Off: bOff}, in(4, xh), out(5, y)}
	if N <= mvMaxTokens {
		return b.run("mul_mv_"+suffix, [3]int{groups(M, 4), N, 1}, [3]int{64, 1, 1}, Bytes(&a), bufs...)
	}
	// FC_mm_direct: every tile lies inside y, so it is stored without staging.
	direct := fconst{Index: 0, Bool: true, Value: int(b2i(M%64 == 0 && N%32 == 0))}
	return b.dev.Dispatch(&dispatch{Kernel: "mul_mm_" + suffix, Consts: []fconst{direct},
		Grid: [3]int{groups(N, 32), groups(M, 64), 1}, Group: [3]int{128, 1, 1}, Args: Bytes(&a), Bufs: bufs})
}

// normWeight returns an f32 copy of a norm weight (uploaded once).
func (b *Backend) normWeight(wh *tensor) (*tensor, error) {
	if wh.typ == quant.F32 {
		return wh, nil
	}
	if c := b.normCache[wh]; c != nil {
		return c, nil
	}
	var v []float32
	var err error
	if wh.src != nil {
		v, err = weights.Float32(wh.src)
	} else {
		return nil, fmt.Errorf("metal: norm weight of type %v is not a checkpoint tensor", wh.typ)
	}
	if err != nil {
		return nil, err
	}
	buf, err := b.dev.Upload(f32Bytes(v))
	if err != nil {
		return nil, err
	}
	c := &tensor{buf: buf, rows: 1, cols: len(v), typ: quant.F32, rowBytes: 4 * len(v)}
	b.normCache[wh] = c
	return c, nil
}

// RMSNorm normalises every group of len(weight) values of x.
func (b *Backend) RMSNorm(x, weight *backend.Tensor, eps float32) (*backend.Tensor, error) {
	xh, err := b.act(x, "RMSNorm x")
	if err != nil {
		return nil, err
	}
	wh, err := b.handle(weight, "RMSNorm weight")
	if err != nil {
		return nil, err
	}
	g := wh.rows * wh.cols
	if wh.rows != 1 || g == 0 || xh.cols%g != 0 {
		return nil, fmt.Errorf("metal: RMSNorm: weight of %d values does not divide rows of %d", g, xh.cols)
	}
	w32, err := b.normWeight(wh)
	if err != nil {
		return nil, err
	}
	y, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	rows := xh.rows * (xh.cols / g)
	if rows == 0 {
		return wrapT(y), nil
	}
	threads := 256
	if g <= 128 {
		threads = 32
	}
	a := KargsNorm{Rows: int32(rows), Cols: int32(g), XStride: int32(g), YStride: int32(g), Eps: eps}
	err = b.run("rms_norm_f32", [3]int{rows, 1, 1}, [3]int{threads, 1, 1}, Bytes(&a), in(1, xh), in(2, w32), out(3, y))
	return wrapT(y), err
}

// InvFreq returns the RoPE inverse frequencies as the float32 reference
// rounds them: float32(1 / float32(theta^(2i/d))).
func InvFreq(theta float64, headDim int) []float32 {
	inv := make([]float32, headDim/2)
	for i := range inv {
		inv[i] = float32(1 / float64(float32(math.Pow(theta, float64(2*i)/float64(headDim)))))
	}
	return inv
}

// RoPE rotates every head of x by its row's positions into a new tensor.
func (b *Backend) RoPE(x *backend.Tensor, pos [][3]int, r backend.RoPE) (*backend.Tensor, error) {
	xh, err := b.act(x, "RoPE x")
	if err != nil {
		return nil, err
	}
	d := r.HeadDim
	if d <= 0 || d%2 != 0 || xh.cols%d != 0 {
		return nil, fmt.Errorf("metal: RoPE: head dim %d does not divide rows of %d evenly into even heads", d, xh.cols)
	}
	if len(pos) != xh.rows {
		return nil, fmt.Errorf("metal: RoPE: %d positions for %d rows", len(pos), xh.rows)
	}
	if !(r.Theta > 0) {
		return nil, fmt.Errorf("metal: RoPE: theta %v must be positive", r.Theta)
	}
	streams, err := r.Streams()
	if err != nil {
		return nil, fmt.Errorf("metal: RoPE: %w", err)
	}
	flat := make([]int, 0, 3*len(pos))
	for _, p := range pos {
		for _, v := range p {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("metal: RoPE: position %d out of range", v)
			}
		}
		flat = append(flat, p[0], p[1], p[2])
	}
	y, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	if xh.rows == 0 {
		return wrapT(y), nil
	}
	pb, err := b.hostInts(flat)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(pb)
	fb, err := b.dev.Upload(f32Bytes(InvFreq(r.Theta, d)))
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(fb)
	sb, err := b.hostInts(streams)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(sb)
	a := KargsRope{Tokens: int32(xh.rows), Heads: int32(xh.cols / d), HeadDim: int32(d), XStride: int32(xh.cols), YStride: int32(xh.cols)}
	err = b.run("rope_f32", [3]int{groups(d/2, 32), xh.cols / d, xh.rows}, [3]int{32, 1, 1}, Bytes(&a),
		in(1, xh), arg{Index: 2, Buf: pb}, arg{Index: 3, Buf: fb}, arg{Index: 4, Buf: sb}, out(5, y))
	return wrapT(y), err
}

// maxHeadDim is the largest head size flash_attn_f32 takes.
const maxHeadDim = 128

// Attention is causal grouped-query attention.
func (b *Backend) Attention(q, k, v *backend.Tensor, nHead, nKV int, scale float32) (*backend.Tensor, error) {
	qh, err := b.act(q, "Attention q")
	if err != nil {
		return nil, err
	}
	kh, err := b.act(k, "Attention k")
	if err != nil {
		return nil, err
	}
	vh, err := b.act(v, "Attention v")
	if err != nil {
		return nil, err
	}
	if nHead <= 0 || nKV <= 0 || nHead%nKV != 0 || qh.cols%nHead != 0 {
		return nil, fmt.Errorf("metal: Attention: %d query heads over %d kv heads do not fit q rows of %d", nHead, nKV, qh.cols)
	}
	d := qh.cols / nHead
	if kh.cols != nKV*d || vh.cols != nKV*d || kh.rows != qh.rows || vh.rows != qh.rows {
		return nil, fmt.Errorf("metal: Attention: q [%d %d], k [%d %d], v [%d %d] do not match %d/%d heads of %d",
			qh.rows, qh.cols, kh.rows, kh.cols, vh.rows, vh.cols, nHead, nKV, d)
	}
	if d > maxHeadDim {
		return nil, fmt.Errorf("metal: Attention: head dim %d > %d", d, maxHeadDim)
	}
	y, err := b.newAct(qh.rows, qh.cols)
	if err != nil {
		return nil, err
	}
	if qh.rows == 0 {
		return wrapT(y), nil
	}
	a := KargsAttn{L: int32(qh.rows), Lk: int32(kh.rows), NHead: int32(nHead), NKV: int32(nKV), HeadDim: int32(d), Causal: 1,
		QStride: int32(qh.cols), KStride: int32(kh.cols), VStride: int32(vh.cols), OStride: int32(qh.cols), Scale: scale}
	kernel, perGroup := "flash_attn_f32", 8
	switch d {
	case 32, 64, 128: // simdgroup-matrix version
		kernel, perGroup = fmt.Sprintf("flash_attn_mma_d%d", d), 32
	}
	err = b.run(kernel, [3]int{groups(qh.rows, perGroup), nHead, 1}, [3]int{128, 1, 1}, Bytes(&a),
		in(1, qh), in(2, kh), in(3, vh), out(4, y))
	return wrapT(y), err
}

// Add returns a + b.
func (b *Backend) Add(x, y *backend.Tensor) (*backend.Tensor, error) {
	xh, err := b.act(x, "Add a")
	if err != nil {
		return nil, err
	}
	yh, err := b.act(y, "Add b")
	if err != nil {
		return nil, err
	}
	if xh.rows != yh.rows || xh.cols != yh.cols {
		return nil, fmt.Errorf("metal: Add: shapes [%d %d] and [%d %d] differ", xh.rows, xh.cols, yh.rows, yh.cols)
	}
	o, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	n := xh.rows * xh.cols
	if n == 0 {
		return wrapT(o), nil
	}
	a := KargsEltwise{N: int32(n)}
	err = b.run("add_f32", [3]int{groups(n, 256), 1, 1}, [3]int{256, 1, 1}, Bytes(&a), in(1, xh), in(2, yh), out(3, o))
	return wrapT(o), err
}

// AddRows returns x with row i of y added to row rows[i].
func (b *Backend) AddRows(x *backend.Tensor, rows []int, y *backend.Tensor) (*backend.Tensor, error) {
	xh, err := b.act(x, "AddRows x")
	if err != nil {
		return nil, err
	}
	yh, err := b.act(y, "AddRows y")
	if err != nil {
		return nil, err
	}
	if yh.rows != len(rows) || yh.cols != xh.cols {
		return nil, fmt.Errorf("metal: AddRows: y [%d %d] for %d rows of x [%d %d]", yh.rows, yh.cols, len(rows), xh.rows, xh.cols)
	}
	seen := map[int]bool{}
	for _, r := range rows {
		if r < 0 || r >= xh.rows {
			return nil, fmt.Errorf("metal: AddRows: row %d outside x's %d rows", r, xh.rows)
		}
		if seen[r] {
			return nil, fmt.Errorf("metal: AddRows: row %d given twice", r)
		}
		seen[r] = true
	}
	o, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	n := xh.rows * xh.cols
	if n == 0 {
		return wrapT(o), nil
	}
	ca := KargsEltwise{N: int32(n)}
	if err := b.run("copy_f32", [3]int{groups(n, 256), 1, 1}, [3]int{256, 1, 1}, Bytes(&ca), in(1, xh), out(2, o)); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return wrapT(o), nil
	}
	rb, err := b.hostInts(rows)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(rb)
	a := KargsAddRows{Rows: int32(xh.rows), Cols: int32(xh.cols), NSrc: int32(len(rows))}
	err = b.run("add_rows_f32", [3]int{groups(len(rows)*xh.cols, 256), 1, 1}, [3]int{256, 1, 1}, Bytes(&a),
		in(1, yh), arg{Index: 2, Buf: rb}, arg{Index: 3, Buf: o.buf, Off: o.off, Out: true})
	return wrapT(o), err
}

// maxTopK is MOE_MAX_TOPK in moe.metal.
const maxTopK = 16

// Route computes the router softmax and top-k on the device.
func (b *Backend) Route(logits *backend.Tensor, k int, norm bool) (*backend.Tensor, *backend.Tensor, error) {
	lh, err := b.act(logits, "Route logits")
	if err != nil {
		return nil, nil, err
	}
	L, E := lh.rows, lh.cols
	if k <= 0 || k > E || k > maxTopK {
		return nil, nil, fmt.Errorf("metal: Route: top-%d of %d experts (at most %d)", k, E, maxTopK)
	}
	ids, err := b.newAct(L, k)
	if err != nil {
		return nil, nil, err
	}
	ids.typ, ids.nExpert = quant.I32, E
	ws, err := b.newAct(L, k)
	if err != nil {
		return nil, nil, err
	}
	if L == 0 {
		return wrapT(ids), wrapT(ws), nil
	}
	a := KargsMoe{Tokens: int32(L), NExpert: int32(E), TopK: int32(k), NormTopK: b2i(norm)}
	err = b.run("moe_topk_f32", [3]int{groups(L, 64), 1, 1}, [3]int{64, 1, 1}, Bytes(&a), in(1, lh), out(2, ids), out(3, ws))
	return wrapT(ids), wrapT(ws), err
}

// adjacent returns the one slice spanning parts when they lie back to back
// in order (part e starts exactly where part e-1 ends), else nil. The span
// is then exactly the union of the parts: no byte outside them is reached.
func adjacent(parts [][]byte) []byte {
	n := len(parts[0])
	if n == 0 {
		return nil
	}
	p0 := uintptr(unsafe.Pointer(unsafe.SliceData(parts[0])))
	for e, p := range parts {
		if len(p) != n || uintptr(unsafe.Pointer(unsafe.SliceData(p))) != p0+uintptr(e*n) {
			return nil
		}
	}
	return unsafe.Slice(unsafe.SliceData(parts[0]), n*len(parts))
}

// stackOf returns the view over experts ws when their bytes (and MLX scales
// and biases) lie back to back and keep the kernels' alignment, else nil:
// then each expert is launched on its own.
func (b *Backend) stackOf(ws []*tensor) *stack {
	k := stackKey{ws[0], ws[len(ws)-1], len(ws)}
	if st, ok := b.stacks[k]; ok {
		return st
	}
	st := b.buildStack(ws)
	b.stacks[k] = st
	return st
}

func (b *Backend) buildStack(ws []*tensor) *stack {
	data := make([][]byte, len(ws))
	var sc, bi [][]byte
	for e, w := range ws {
		if w.src == nil {
			return nil
		}
		data[e] = w.src.Data
		if w.sRowBytes > 0 {
			sc, bi = append(sc, w.src.Scales.Data), append(bi, w.src.Biases.Data)
		}
	}
	span := adjacent(data)
	if span == nil || uintptr(unsafe.Pointer(unsafe.SliceData(span)))%uintptr(loadAlign(ws[0].typ)) != 0 {
		return nil
	}
	st := &stack{stride: len(data[0])}
	var err error
	if st.buf, st.off, err = b.dev.WrapAlias(span); err != nil {
		return nil // too large for one buffer, say: launch per expert
	}
	st.sBuf, st.sOff, st.bBuf, st.bOff = st.buf, st.off, st.buf, st.off
	if sc != nil {
		ss, bs := adjacent(sc), adjacent(bi)
		if ss == nil || bs == nil {
			return nil
		}
		st.sStride = len(sc[0])
		if st.sBuf, st.sOff, err = b.dev.WrapAlias(ss); err != nil {
			return nil
		}
		if st.bBuf, st.bOff, err = b.dev.WrapAlias(bs); err != nil {
			return nil
		}
	}
	return st
}

// moeMatmul runs y[entry] = W_e x[row(entry)] for every routed entry. When
// the experts lie back to back (stackOf) it is one launch: moe_tiles lists
// the non-empty (expert, token tile) pairs and writes the grid on the device,
// and mul_mm_id_* runs exactly those tiles. Otherwise it is one launch per
// expert, bound to that expert's own weights, whose grid moe_grid wrote on
// the device from the expert's token count, so an expert with no tokens
// launches nothing. Neither waits for the host.
func (b *Backend) moeMatmul(xh *tensor, ws []*tensor, y *tensor, counts, lists gbuf, L, topk int, perSlot bool) error {
	w0 := ws[0]
	suffix, err := kernelSuffix(w0.typ)
	if err != nil {
		return err
	}
	E := len(ws)
	a := KargsMatmul{M: int32(w0.rows), N: int32(L), K: int32(w0.cols), XStride: int32(xh.cols), YStride: int32(y.cols),
		GroupSize: int32(w0.groupSize), RowBytes: uint64(w0.rowBytes), SRowBytes: uint64(w0.sRowBytes), ScaleBF16: b2i(w0.scaleBF16),
		NExpert: 1, TopK: int32(topk), XPerSlot: b2i(perSlot)}
	if st := b.stackOf(ws); st != nil {
		nTiles := L*topk/32 + E + 1 // Σ ceil(count/32) <= L*topk/32 + E
		tiles, err := b.dev.Alloc(8 * nTiles)
		if err != nil {
			return err
		}
		defer b.dev.Release(tiles)
		grid, err := b.dev.Alloc(12)
		if err != nil {
			return err
		}
		defer b.dev.Release(grid)
		ta := KargsMoe{NExpert: int32(E), Cols: int32(groups(w0.rows, 64))}
		if err := b.run("moe_tiles", [3]int{1, 1, 1}, [3]int{256, 1, 1}, Bytes(&ta), arg{Index: 1, Buf: counts},
			arg{Index: 2, Buf: tiles, Out: true}, arg{Index: 3, Buf: grid, Out: true}); err != nil {
			return err
		}
		a.NExpert, a.Tiles = int32(E), 1
		a.ExpertBytes, a.SExpertBytes = uint64(st.stride), uint64(st.sStride)
		return b.dev.Dispatch(&dispatch{Kernel: "mul_mm_id_" + suffix, Group: [3]int{128, 1, 1}, Args: Bytes(&a),
			Indirect: &arg{Buf: grid},
			Bufs: []arg{{Index: 1, Buf: st.buf, Off: st.off}, {Index: 2, Buf: st.sBuf, Off: st.sOff}, {Index: 3, Buf: st.bBuf, Off: st.bOff},
				in(4, xh), out(5, y), {Index: 6, Buf: counts}, {Index: 7, Buf: lists}, {Index: 8, Buf: tiles}}})
	}
	grids, err := b.dev.Alloc(12 * E)
	if err != nil {
		return err
	}
	defer b.dev.Release(grids)
	ga := KargsMoe{NExpert: int32(E), Cols: int32(groups(w0.rows, 64))}
	if err := b.run("moe_grid", [3]int{groups(E, 32), 1, 1}, [3]int{32, 1, 1}, Bytes(&ga),
		arg{Index: 1, Buf: counts}, arg{Index: 2, Buf: grids, Out: true}); err != nil {
		return err
	}
	args := Bytes(&a)
	for e, w := range ws {
		// The kernel reads expert tgpig.z = 0: bind this expert's count and
		// list at its offset (buffer 8, the tile table, is not read).
		err := b.dev.Dispatch(&dispatch{Kernel: "mul_mm_id_" + suffix, Group: [3]int{128, 1, 1}, Args: args,
			Indirect: &arg{Buf: grids, Off: 12 * e},
			Bufs: []arg{in(1, w), {Index: 2, Buf: w.sBuf, Off: w.sOff}, {Index: 3, Buf: w.bBuf, Off: w.bOff}, in(4, xh), out(5, y),
				{Index: 6, Buf: counts, Off: 4 * e}, {Index: 7, Buf: lists, Off: 4 * e * L}, {Index: 8, Buf: counts}}})
		if err != nil {
			return err
		}
	}
	return nil
}

// MoE applies the routed experts: per-expert token lists built on the
// device, gathered matmuls for gate, up and down, SiLU·up, weighted combine.
func (b *Backend) MoE(x, ids, weights *backend.Tensor, experts []backend.Expert) (*backend.Tensor, error) {
	xh, err := b.act(x, "MoE x")
	if err != nil {
		return nil, err
	}
	ih, err := b.handle(ids, "MoE ids")
	if err != nil {
		return nil, err
	}
	wh, err := b.act(weights, "MoE weights")
	if err != nil {
		return nil, err
	}
	if ih.typ != quant.I32 || ih.nExpert == 0 {
		return nil, fmt.Errorf("metal: MoE: ids must come from Route")
	}
	L, k := xh.rows, ih.cols
	if ih.rows != L || wh.rows != L || wh.cols != k {
		return nil, fmt.Errorf("metal: MoE: ids [%d %d] and weights [%d %d] for %d rows", ih.rows, ih.cols, wh.rows, wh.cols, L)
	}
	if len(experts) < ih.nExpert {
		return nil, fmt.Errorf("metal: MoE: ids route over %d experts but %d are given", ih.nExpert, len(experts))
	}
	E := len(experts)
	gates, ups, downs := make([]*tensor, E), make([]*tensor, E), make([]*tensor, E)
	for e, ex := range experts {
		if gates[e], err = b.handle(ex.Gate, fmt.Sprintf("MoE expert %d gate", e)); err != nil {
			return nil, err
		}
		if ups[e], err = b.handle(ex.Up, fmt.Sprintf("MoE expert %d up", e)); err != nil {
			return nil, err
		}
		if downs[e], err = b.handle(ex.Down, fmt.Sprintf("MoE expert %d down", e)); err != nil {
			return nil, err
		}
	}
	ffn, hidden := gates[0].rows, xh.cols
	// Every expert must match expert 0 (one launch geometry for all).
	for e := range experts {
		for _, c := range []struct {
			h, ref     *tensor
			rows, cols int
			what       string
		}{{gates[e], gates[0], ffn, hidden, "gate"}, {ups[e], ups[0], ffn, hidden, "up"}, {downs[e], downs[0], hidden, ffn, "down"}} {
			if c.h.rows != c.rows || c.h.cols != c.cols || c.h.typ != c.ref.typ || c.h.groupSize != c.ref.groupSize || c.h.scaleBF16 != c.ref.scaleBF16 {
				return nil, fmt.Errorf("metal: MoE: expert %d %s is %v [%d %d], want %v [%d %d] like expert 0", e, c.what, c.h.typ, c.h.rows, c.h.cols, c.ref.typ, c.rows, c.cols)
			}
		}
	}
	res, err := b.newAct(L, hidden)
	if err != nil {
		return nil, err
	}
	if L == 0 {
		return wrapT(res), nil
	}
	counts, err := b.dev.Alloc(4 * E)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(counts)
	lists, err := b.dev.Alloc(4 * E * L)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(lists)
	ma := KargsMoe{Tokens: int32(L), NExpert: int32(E), TopK: int32(k)}
	if err := b.run("moe_map", [3]int{E, 1, 1}, [3]int{256, 1, 1}, Bytes(&ma), in(1, ih),
		arg{Index: 2, Buf: counts, Out: true}, arg{Index: 3, Buf: lists, Out: true}); err != nil {
		return nil, err
	}
	gate, err := b.newAct(L*k, ffn)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(gate.buf)
	up, err := b.newAct(L*k, ffn)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(up.buf)
	if err := b.moeMatmul(xh, gates, gate, counts, lists, L, k, false); err != nil {
		return nil, err
	}
	if err := b.moeMatmul(xh, ups, up, counts, lists, L, k, false); err != nil {
		return nil, err
	}
	n := L * k * ffn
	ea := KargsEltwise{N: int32(n)}
	if err := b.run("silu_mul_f32", [3]int{groups(n, 256), 1, 1}, [3]int{256, 1, 1}, Bytes(&ea), in(1, gate), in(2, up), out(3, gate)); err != nil {
		return nil, err
	}
	down, err := b.newAct(L*k, hidden)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(down.buf)
	if err := b.moeMatmul(gate, downs, down, counts, lists, L, k, true); err != nil {
		return nil, err
	}
	ca := KargsMoe{Tokens: int32(L), TopK: int32(k), Cols: int32(hidden)}
	err = b.run("moe_combine_f32", [3]int{groups(L*hidden, 256), 1, 1}, [3]int{256, 1, 1}, Bytes(&ca),
		in(1, down), in(2, wh), in(3, down), out(4, res))
	return wrapT(res), err
}
