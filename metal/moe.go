package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

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
	a := shaders.KargsMoe{Tokens: int32(L), NExpert: int32(E), TopK: int32(k), NormTopK: b2i(norm)}
	err = b.run(streamCost(L*E, 4, 8), "moe_topk_f32", [3]int{groups(L, 64), 1, 1}, [3]int{64, 1, 1}, shaders.Bytes(&a), in(1, lh), out(2, ids), out(3, ws))
	return wrapT(ids), wrapT(ws), err
}

// moeCost bounds the cost of one gathered projection of L rows routed to
// topk of the experts of w with f32 rows in and out (the most any path
// moves): MoE sizes its row chunks with it.
func moeCost(w *tensor, L, topk, experts int) cost {
	return moeLaunchCost(w, L, topk, experts, 4*w.cols, 4*w.rows)
}

// moeLaunchCost is the cost of one gathered projection of L rows routed to
// topk of the experts of w: every entry's product, the weights of the
// experts that can be active (at most L*topk of them) read once, and per
// entry an input row of xRow bytes read and an output row of yRow bytes
// written (0 for a projection whose rows another one's launch moves: the
// fused gate-up reads x once and writes h once for both).
func moeLaunchCost(w *tensor, L, topk, experts, xRow, yRow int) cost {
	entries := L * topk
	active := min(experts, entries)
	return cost{
		bytes: float64(active)*float64(w.rows)*float64(w.rowBytes+2*w.sRowBytes) + float64(entries)*float64(xRow+yRow),
		flops: 2 * float64(w.rows) * float64(entries) * float64(w.cols),
	}
}

// stacked returns the handle of stacked experts (bound from a 3-D weight).
func (b *Backend) stacked(t *backend.Tensor, what string) (*tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("metal: %s: nil tensor", what)
	}
	h, ok := t.Handle.(*tensor)
	if !ok {
		return nil, fmt.Errorf("metal: %s: not a metal tensor (handle %T)", what, t.Handle)
	}
	if h.experts == 0 {
		return nil, fmt.Errorf("metal: %s: not stacked experts [E, out, in] (shape %v)", what, t.Shape)
	}
	return h, nil
}

// MoE applies the routed experts: per-expert token lists built on the
// device, gathered matmuls for gate, up and down, SiLU·up, weighted combine.
func (b *Backend) MoE(x, ids, weights *backend.Tensor, ex backend.Experts) (*backend.Tensor, error) {
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
	gates, err := b.stacked(ex.Gate, "MoE gate")
	if err != nil {
		return nil, err
	}
	ups, err := b.stacked(ex.Up, "MoE up")
	if err != nil {
		return nil, err
	}
	downs, err := b.stacked(ex.Down, "MoE down")
	if err != nil {
		return nil, err
	}
	E, ffn, hidden := gates.experts, gates.rows, xh.cols
	for _, c := range []struct {
		h          *tensor
		rows, cols int
		what       string
	}{{gates, ffn, hidden, "gate"}, {ups, ffn, hidden, "up"}, {downs, hidden, ffn, "down"}} {
		if c.h.experts != E || c.h.rows != c.rows || c.h.cols != c.cols {
			return nil, fmt.Errorf("metal: MoE: %s is [%d %d %d], want [%d %d %d]", c.what, c.h.experts, c.h.rows, c.h.cols, E, c.rows, c.cols)
		}
	}
	if gates.typ != ups.typ || gates.rowBytes != ups.rowBytes || gates.sRowBytes != ups.sRowBytes || gates.groupSize != ups.groupSize ||
		gates.scaleBF16 != ups.scaleBF16 || (gates.parts == nil && ups.parts == nil && (gates.stride != ups.stride || gates.sStride != ups.sStride)) {
		return nil, fmt.Errorf("metal: MoE: gate (%v) and up (%v) are stored differently; the fused gate-up kernel reads both with one layout", gates.typ, ups.typ)
	}
	if moeHalf(gates.typ) != moeHalf(downs.typ) {
		return nil, fmt.Errorf("metal: MoE: gate and up in %v but down in %v: f32 experts must be f32 throughout (h passes between them in float, else in half)", gates.typ, downs.typ)
	}
	if E < ih.nExpert {
		return nil, fmt.Errorf("metal: MoE: ids route over %d experts but %d are given", ih.nExpert, E)
	}
	res, err := b.newAct(L, hidden)
	if err != nil {
		return nil, err
	}
	// Rows in chunks whose gathered projections each stay under
	// opSeconds (at 64k tokens top-8 of 128 experts, each is ~0.6 s on the
	// conservative chip); chunks are views of x, ids, weights and res.
	step := L
	opLimit := b.opLimit()
	for step > 32 && moeCost(gates, step, k, E).seconds() > opLimit {
		step = (step/2 + 31) / 32 * 32
	}
	for r0 := 0; r0 < L; r0 += step {
		n := min(step, L-r0)
		err := b.moe(rowsOf(xh, r0, n), rowsOf(ih, r0, n), rowsOf(wh, r0, n), gates, ups, downs, rowsOf(res, r0, n))
		if err != nil {
			b.Free(wrapT(res))
			return nil, err
		}
	}
	return wrapT(res), nil
}

// rowsOf is a view of n rows of h from row r0 (sharing its buffer).
func rowsOf(h *tensor, r0, n int) *tensor {
	v := *h
	v.off, v.rows, v.owned = h.off+r0*h.rowBytes, n, false
	return &v
}

// The MoE tiles (moe.metal): 64 tokens per tile, 32 rows of gate and up
// per moe_gu_* threadgroup, 64 rows per moe_down_* threadgroup.
const (
	moeTileTokens = 64
	moeGuRows     = 32
	moeDownRows   = 64
)

// moeHalf reports whether the gathered matmuls of experts stored as typ run
// half tiles and pass h between them in half (every format but f32 and
// bf16, whose release must answer byte-identically to the reference).
func moeHalf(typ quant.Type) bool { return typ != quant.F32 && typ != quant.BF16 }

// moeBF16Rows reports whether moe_down_* of experts stored as typ writes the
// routed entries' output rows in bf16 for moe_combine_bf16 (the block
// formats), else in f32 for moe_combine_f32. bf16 keeps f32's range (an
// expert's output is not bounded by half's 65504) at a rounding of at most
// 2^-8 relative: an MoE NMSE of ~3e-6 against the block formats'
// conformance tolerance of 5e-4; f16 (tolerance 1e-6), bf16 and f32 keep
// f32 rows (TestMoEHalfRowsEmulated measures every format).
func moeBF16Rows(typ quant.Type) bool { return moeHalf(typ) && typ != quant.F16 }

// moeWork is one chunk's routed work: the per-expert token lists and the
// grids of its launches, built on the device once and read by the three
// projections.
type moeWork struct {
	L, k          int
	counts, lists gbuf
	// table: every projection is one contiguous stack; tiles and grids
	// are then the tile table and its two grids, else grids holds each
	// expert's two grids.
	table        bool
	tiles, grids gbuf
}

// expertBufs binds expert e of w at buffers i, i+1, i+2 (W, MLX scales, MLX
// biases): its own view for experts stored one by one, else its offset in
// the stack.
func expertBufs(w *tensor, e, i int) []arg {
	if w.parts != nil {
		p := w.parts[e]
		return []arg{in(i, p), {Index: i + 1, Buf: p.sBuf, Off: p.sOff}, {Index: i + 2, Buf: p.bBuf, Off: p.bOff}}
	}
	return []arg{{Index: i, Buf: w.buf, Off: w.off + e*w.stride}, {Index: i + 1, Buf: w.sBuf, Off: w.sOff + e*w.sStride},
		{Index: i + 2, Buf: w.bBuf, Off: w.bOff + e*w.sStride}}
}

// stackBufs binds a contiguous stack w at buffers i, i+1, i+2.
func stackBufs(w *tensor, i int) []arg {
	return []arg{in(i, w), {Index: i + 1, Buf: w.sBuf, Off: w.sOff}, {Index: i + 2, Buf: w.bBuf, Off: w.bOff}}
}

// moe runs the routed experts for the rows of xh (all of one launch chunk)
// into res: moe_map, the tile table (moe_tiles, or moe_grid for experts
// stored one by one), gate and up in one gathered launch whose epilogue
// writes h = SiLU(gate)·up, the gathered down projection, the weighted
// combine.
func (b *Backend) moe(xh, ih, wh, gates, ups, downs, res *tensor) error {
	L, k, E, ffn, hidden := xh.rows, ih.cols, gates.experts, gates.rows, xh.cols
	if L == 0 {
		return nil
	}
	if xh.cols%4 == 0 && xh.off%16 != 0 {
		// The kernels read x with 16-byte vector loads when its rows are a
		// multiple of 4 long: give them an aligned copy.
		c, err := b.newAct(L, hidden)
		if err != nil {
			return err
		}
		defer b.release(c.buf)
		if err := b.perElement("copy_f32", L*hidden, hidden, in(1, xh), out(2, c)); err != nil {
			return err
		}
		xh = c
	}
	w := moeWork{L: L, k: k, table: gates.parts == nil && ups.parts == nil && downs.parts == nil}
	var err error
	if w.counts, err = b.alloc(4*E, "the MoE expert counts"); err != nil {
		return err
	}
	defer b.release(w.counts)
	if w.lists, err = b.alloc(4*E*L, "the MoE token lists"); err != nil {
		return err
	}
	defer b.release(w.lists)
	ma := shaders.KargsMoe{Tokens: int32(L), NExpert: int32(E), TopK: int32(k)}
	if err := b.run(streamCost(L*k, 12, 0), "moe_map", [3]int{E, 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&ma), in(1, ih),
		arg{Index: 2, Buf: w.counts, Out: true}, arg{Index: 3, Buf: w.lists, Out: true}); err != nil {
		return err
	}
	ta := shaders.KargsMoeTiles{NExpert: int32(E), RowsGu: int32(groups(ffn, moeGuRows)), RowsDown: int32(groups(hidden, moeDownRows))}
	if w.table {
		nTiles := L*k/moeTileTokens + E + 1 // Σ ceil(count/64) <= L*k/64 + E
		if w.tiles, err = b.alloc(8*nTiles, "the MoE tile table"); err != nil {
			return err
		}
		defer b.release(w.tiles)
		if w.grids, err = b.alloc(24, "the MoE grids"); err != nil {
			return err
		}
		defer b.release(w.grids)
		if err := b.run(streamCost(E, 4, 0).add(streamCost(nTiles, 8, 0)), "moe_tiles", [3]int{1, 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&ta),
			arg{Index: 1, Buf: w.counts}, arg{Index: 2, Buf: w.tiles, Out: true}, arg{Index: 3, Buf: w.grids, Out: true}); err != nil {
			return err
		}
	} else {
		if w.grids, err = b.alloc(24*E, "the MoE grids"); err != nil {
			return err
		}
		defer b.release(w.grids)
		if err := b.run(streamCost(E, 28, 0), "moe_grid", [3]int{groups(E, 32), 1, 1}, [3]int{32, 1, 1}, shaders.Bytes(&ta),
			arg{Index: 1, Buf: w.counts}, arg{Index: 2, Buf: w.grids, Out: true}); err != nil {
			return err
		}
	}
	// The int8 tensor kernels (tensor_moe.metal moe_gu_t8_*): x quantized
	// to q8_K rows once for the layer's chunk, h in half quantized once over
	// every routed entry (quant_q8k_rows_h).
	gu8, down8, use8 := b.tensorMoE8Kernels(gates.typ, downs.typ, hidden, ffn)
	var xq *q8Rows
	if use8 {
		if xq, err = b.quantQ8K(xh.buf, xh.off, L, hidden, hidden, "the MoE's q8_K x"); err != nil {
			return err
		}
		defer b.release(xq.buf)
	}
	// Element sizes of h (gate-up to down, or to its quantizer on the int8
	// path: half for the half formats) and of the entries' outputs (down to
	// the combine: bf16 for the block formats).
	hBytes, yBytes := 4, 4
	if moeHalf(gates.typ) {
		hBytes = 2
	}
	if moeBF16Rows(downs.typ) {
		yBytes = 2
	}
	h, err := b.alloc(hBytes*L*k*ffn, "the MoE hidden activations")
	if err != nil {
		return err
	}
	defer b.release(h)
	if err := b.moeGateUp(&w, xh, xq, gu8, gates, ups, h, hBytes); err != nil {
		return err
	}
	var hq *q8Rows
	if use8 {
		if hq, err = b.quantQ8KHalf(h, L*k, ffn, "the MoE's q8_K h"); err != nil {
			return err
		}
		defer b.release(hq.buf)
	}
	ys, err := b.alloc(yBytes*L*k*hidden, "the MoE expert outputs")
	if err != nil {
		return err
	}
	defer b.release(ys)
	if err := b.moeDown(&w, h, hBytes, hq, down8, downs, ys, yBytes, hidden); err != nil {
		return err
	}
	// The combine reads each output element's k rows (yBytes each) and
	// route weights (f32), and writes it (f32).
	combine := "moe_combine_f32"
	if yBytes == 2 {
		combine = "moe_combine_bf16"
	}
	ca := shaders.KargsMoe{Tokens: int32(L), TopK: int32(k), Cols: int32(hidden)}
	return b.run(streamCost(L*hidden, (yBytes+4)*k+4, 2*k), combine, [3]int{groups(L*hidden, 256), 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&ca),
		arg{Index: 1, Buf: ys}, in(2, wh), arg{Index: 3, Buf: ys}, out(4, res))
}

// q8Rows are activation rows quantized to q8_K (quant_q8k_rows): stride
// bytes from row to row.
type q8Rows struct {
	buf    gbuf
	stride int
}

// q8kHalfKernel is quant_q8k_rows over rows of half (tensor_moe.metal).
const q8kHalfKernel = "quant_q8k_rows_h"

// quantQ8K quantizes rows of cols floats (a multiple of 256), xStride
// floats apart from byte off of x, into a new buffer of q8_K rows (quant's
// block_q8_K: 292 bytes per 256 values), one quant_q8k_rows launch.
func (b *Backend) quantQ8K(x gbuf, off, rows, cols, xStride int, what string) (*q8Rows, error) {
	return b.quantRows(q8kKernel, 4, x, off, rows, cols, xStride, what)
}

// quantQ8KHalf is quantQ8K over contiguous rows of cols halves from the
// start of x (quant_q8k_rows_h: the q8_K bytes of the values widened to
// float).
func (b *Backend) quantQ8KHalf(x gbuf, rows, cols int, what string) (*q8Rows, error) {
	return b.quantRows(q8kHalfKernel, 2, x, 0, rows, cols, cols, what)
}

// quantRows is one launch of the q8_K quantizer kernel over inputs of
// elemBytes each.
func (b *Backend) quantRows(kernel string, elemBytes int, x gbuf, off, rows, cols, xStride int, what string) (*q8Rows, error) {
	if cols%256 != 0 || rows <= 0 {
		return nil, fmt.Errorf("metal: %s: %d rows of %d values (q8_K takes whole blocks of 256)", what, rows, cols)
	}
	stride, err := quant.RowBytes(quant.Q8_K, cols)
	if err != nil {
		return nil, fmt.Errorf("metal: %s: %w", what, err)
	}
	y, err := b.alloc(rows*stride, what)
	if err != nil {
		return nil, err
	}
	a := shaders.KargsQ8K{Rows: int32(rows), Cols: int32(cols), XStride: int32(xStride), YStride: int32(stride)}
	// One simdgroup per block, four per threadgroup of 128; per value
	// elemBytes read and about one byte (292 per 256) written.
	err = b.run(streamCost(rows*cols, elemBytes+1, 4), kernel, [3]int{groups(rows*cols/256, 4), 1, 1}, [3]int{128, 1, 1}, shaders.Bytes(&a),
		arg{Index: 1, Buf: x, Off: off}, arg{Index: 2, Buf: y, Out: true})
	if err != nil {
		b.release(y)
		return nil, err
	}
	return &q8Rows{buf: y, stride: stride}, nil
}

// moeArgs are the gathered-matmul arguments of the experts w over x rows
// of xStride elements into y rows of yStride.
func moeArgs(w *tensor, wk *moeWork, xStride, yStride int, perSlot bool) shaders.KargsMatmul {
	return shaders.KargsMatmul{M: int32(w.rows), N: int32(wk.L), K: int32(w.cols), XStride: int32(xStride), YStride: int32(yStride),
		GroupSize: int32(w.groupSize), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRowBytes), ScaleBF16: b2i(w.scaleBF16),
		ExpertBytes: uint64(w.stride), SExpertBytes: uint64(w.sStride), NExpert: int32(w.experts), TopK: int32(wk.k),
		XPerSlot: b2i(perSlot), Tiles: b2i(wk.table)}
}

// moeGateUp writes h[entry] = SiLU(gate_e x[token]) * up_e x[token] for
// every routed entry: one moe_gu_* launch over the tile table for
// contiguous stacks, one per expert (on its grid from moe_grid, bound to
// its own views) for experts stored one by one. Neither waits for the host.
// On the tensor path (tensor.go) the launch is moe_gu_t_*, which reads the
// same bindings, table and grids, or with xq (the q8_K rows of x) the int8
// kernel gu8 (moe_gu_t8_*). h holds elements of hBytes.
func (b *Backend) moeGateUp(wk *moeWork, xh *tensor, xq *q8Rows, gu8 string, gates, ups *tensor, h gbuf, hBytes int) error {
	suffix, err := kernelSuffix(gates.typ)
	if err != nil {
		return err
	}
	xArg, xStride, xRow := in(4, xh), xh.cols, 4*xh.cols
	kernel := "moe_gu_" + suffix
	if xq != nil {
		kernel, xArg, xStride, xRow = gu8, arg{Index: 4, Buf: xq.buf}, xq.stride, xq.stride
	} else if gu, _, ok := b.tensorMoEKernels(gates.typ); ok {
		kernel = gu // the M5 path (tensor_moe.metal): same bindings, grids and tile table
	}
	// One launch reads x and writes h once for both projections.
	hRow := hBytes * gates.rows
	a := shaders.Bytes(ptr(moeArgs(gates, wk, xStride, gates.rows, false)))
	if wk.table {
		bufs := append(stackBufs(gates, 1), xArg, arg{Index: 5, Buf: h, Out: true}, arg{Index: 6, Buf: wk.counts},
			arg{Index: 7, Buf: wk.lists}, arg{Index: 8, Buf: wk.tiles})
		return b.launch(&dispatch{Kernel: kernel, Group: [3]int{128, 1, 1}, Args: a, Indirect: &arg{Buf: wk.grids},
			Bufs: append(bufs, stackBufs(ups, 9)...)},
			moeLaunchCost(gates, wk.L, wk.k, gates.experts, xRow, hRow).add(moeLaunchCost(ups, wk.L, wk.k, ups.experts, 0, 0)))
	}
	// An upper bound: a row routes to an expert at most once, so one
	// expert sees at most L rows.
	per := moeLaunchCost(gates, wk.L, 1, 1, xRow, hRow).add(moeLaunchCost(ups, wk.L, 1, 1, 0, 0))
	for e := range gates.experts {
		// The kernel reads expert tgpig.z = 0: bind this expert's weights,
		// count and list at their offsets (buffer 8, the tile table, is not
		// read).
		bufs := append(expertBufs(gates, e, 1), xArg, arg{Index: 5, Buf: h, Out: true}, arg{Index: 6, Buf: wk.counts, Off: 4 * e},
			arg{Index: 7, Buf: wk.lists, Off: 4 * e * wk.L}, arg{Index: 8, Buf: wk.counts})
		err := b.launch(&dispatch{Kernel: kernel, Group: [3]int{128, 1, 1}, Args: a, Indirect: &arg{Buf: wk.grids, Off: 24 * e},
			Bufs: append(bufs, expertBufs(ups, e, 9)...)}, per)
		if err != nil {
			return err
		}
	}
	return nil
}

// moeDown writes y[entry] = down_e h[entry] for every routed entry (rows of
// yCols elements of yBytes), launched as moeGateUp is (the second grid of
// the table or of each expert); h holds elements of hBytes, or with hq (the
// q8_K rows of h) on the int8 kernel down8 (moe_down_t8_*).
func (b *Backend) moeDown(wk *moeWork, h gbuf, hBytes int, hq *q8Rows, down8 string, downs *tensor, y gbuf, yBytes, yCols int) error {
	suffix, err := kernelSuffix(downs.typ)
	if err != nil {
		return err
	}
	hArg, hStride, hRow := arg{Index: 4, Buf: h}, downs.cols, hBytes*downs.cols
	kernel := "moe_down_" + suffix
	if hq != nil {
		kernel, hArg, hStride, hRow = down8, arg{Index: 4, Buf: hq.buf}, hq.stride, hq.stride
	} else if _, down, ok := b.tensorMoEKernels(downs.typ); ok {
		kernel = down
	}
	yArg, yRow := arg{Index: 5, Buf: y, Out: true}, yBytes*yCols
	a := shaders.Bytes(ptr(moeArgs(downs, wk, hStride, yCols, true)))
	if wk.table {
		return b.launch(&dispatch{Kernel: kernel, Group: [3]int{128, 1, 1}, Args: a, Indirect: &arg{Buf: wk.grids, Off: 12},
			Bufs: append(stackBufs(downs, 1), hArg, yArg, arg{Index: 6, Buf: wk.counts},
				arg{Index: 7, Buf: wk.lists}, arg{Index: 8, Buf: wk.tiles})},
			moeLaunchCost(downs, wk.L, wk.k, downs.experts, hRow, yRow))
	}
	per := moeLaunchCost(downs, wk.L, 1, 1, hRow, yRow)
	for e := range downs.experts {
		err := b.launch(&dispatch{Kernel: kernel, Group: [3]int{128, 1, 1}, Args: a, Indirect: &arg{Buf: wk.grids, Off: 24*e + 12},
			Bufs: append(expertBufs(downs, e, 1), hArg, yArg, arg{Index: 6, Buf: wk.counts, Off: 4 * e},
				arg{Index: 7, Buf: wk.lists, Off: 4 * e * wk.L}, arg{Index: 8, Buf: wk.counts})}, per)
		if err != nil {
			return err
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
