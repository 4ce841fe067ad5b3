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

// moeMatmul runs y[entry] = W_e x[row(entry)] for every routed entry of the
// stacked experts w. For a contiguous stack it is one launch: moe_tiles
// lists the non-empty (expert, token tile) pairs and writes the grid on the
// device, and mul_mm_id_* runs exactly those tiles, reaching expert e at
// e*stride bytes into the one view. For a parted stack it is one launch per
// expert, bound to that expert's own view, whose grid moe_grid wrote on the
// device from the expert's token count, so an expert with no tokens
// launches nothing. Neither waits for the host.
func (b *Backend) moeMatmul(xh, w, y *tensor, counts, lists gbuf, L, topk int, perSlot bool) error {
	suffix, err := kernelSuffix(w.typ)
	if err != nil {
		return err
	}
	E := w.experts
	a := shaders.KargsMatmul{M: int32(w.rows), N: int32(L), K: int32(w.cols), XStride: int32(xh.cols), YStride: int32(y.cols),
		GroupSize: int32(w.groupSize), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRowBytes), ScaleBF16: b2i(w.scaleBF16),
		NExpert: 1, TopK: int32(topk), XPerSlot: b2i(perSlot)}
	if w.parts == nil {
		nTiles := L*topk/32 + E + 1 // Σ ceil(count/32) <= L*topk/32 + E
		tiles, err := b.alloc(8*nTiles, "the MoE tile table")
		if err != nil {
			return err
		}
		defer b.release(tiles)
		grid, err := b.alloc(12, "the MoE grid")
		if err != nil {
			return err
		}
		defer b.release(grid)
		ta := shaders.KargsMoe{NExpert: int32(E), Cols: int32(groups(w.rows, 64))}
		if err := b.run(streamCost(E, 4, 0).add(streamCost(nTiles, 8, 0)), "moe_tiles", [3]int{1, 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&ta), arg{Index: 1, Buf: counts},
			arg{Index: 2, Buf: tiles, Out: true}, arg{Index: 3, Buf: grid, Out: true}); err != nil {
			return err
		}
		a.NExpert, a.Tiles = int32(E), 1
		a.ExpertBytes, a.SExpertBytes = uint64(w.stride), uint64(w.sStride)
		return b.launch(&dispatch{Kernel: "mul_mm_id_" + suffix, Group: [3]int{128, 1, 1}, Args: shaders.Bytes(&a),
			Indirect: &arg{Buf: grid},
			Bufs: []arg{in(1, w), {Index: 2, Buf: w.sBuf, Off: w.sOff}, {Index: 3, Buf: w.bBuf, Off: w.bOff},
				in(4, xh), out(5, y), {Index: 6, Buf: counts}, {Index: 7, Buf: lists}, {Index: 8, Buf: tiles}}},
			moeCost(w, L, topk, E))
	}
	grids, err := b.alloc(12*E, "the MoE grids")
	if err != nil {
		return err
	}
	defer b.release(grids)
	ga := shaders.KargsMoe{NExpert: int32(E), Cols: int32(groups(w.rows, 64))}
	if err := b.run(streamCost(E, 16, 0), "moe_grid", [3]int{groups(E, 32), 1, 1}, [3]int{32, 1, 1}, shaders.Bytes(&ga),
		arg{Index: 1, Buf: counts}, arg{Index: 2, Buf: grids, Out: true}); err != nil {
		return err
	}
	args := shaders.Bytes(&a)
	// An upper bound: a row routes to an expert at most once, so one
	// expert sees at most L rows.
	per := moeCost(w, L, 1, 1)
	for e, p := range w.parts {
		// The kernel reads expert tgpig.z = 0: bind this expert's count and
		// list at its offset (buffer 8, the tile table, is not read).
		err := b.launch(&dispatch{Kernel: "mul_mm_id_" + suffix, Group: [3]int{128, 1, 1}, Args: args,
			Indirect: &arg{Buf: grids, Off: 12 * e},
			Bufs: []arg{in(1, p), {Index: 2, Buf: p.sBuf, Off: p.sOff}, {Index: 3, Buf: p.bBuf, Off: p.bOff}, in(4, xh), out(5, y),
				{Index: 6, Buf: counts, Off: 4 * e}, {Index: 7, Buf: lists, Off: 4 * e * L}, {Index: 8, Buf: counts}}}, per)
		if err != nil {
			return err
		}
	}
	return nil
}

// moeCost bounds the cost of one gathered projection of L rows routed to
// topk of the experts of w: every entry's product, and the weights of the
// experts that can be active (at most L*topk of them), read once.
func moeCost(w *tensor, L, topk, experts int) cost {
	entries := L * topk
	active := min(experts, entries)
	c := matmulCost(w.rows, entries, w.cols, w.rowBytes, w.sRowBytes)
	c.bytes += float64(active-1) * float64(w.rows) * float64(w.rowBytes+2*w.sRowBytes)
	return c
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

// moe runs the routed experts for the rows of xh (all of one launch
// chunk) into res.
func (b *Backend) moe(xh, ih, wh, gates, ups, downs, res *tensor) error {
	L, k, E, ffn, hidden := xh.rows, ih.cols, gates.experts, gates.rows, xh.cols
	if L == 0 {
		return nil
	}
	counts, err := b.alloc(4*E, "the MoE expert counts")
	if err != nil {
		return err
	}
	defer b.release(counts)
	lists, err := b.alloc(4*E*L, "the MoE token lists")
	if err != nil {
		return err
	}
	defer b.release(lists)
	ma := shaders.KargsMoe{Tokens: int32(L), NExpert: int32(E), TopK: int32(k)}
	if err := b.run(streamCost(L*k, 12, 0), "moe_map", [3]int{E, 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&ma), in(1, ih),
		arg{Index: 2, Buf: counts, Out: true}, arg{Index: 3, Buf: lists, Out: true}); err != nil {
		return err
	}
	gate, err := b.newAct(L*k, ffn)
	if err != nil {
		return err
	}
	defer b.release(gate.buf)
	up, err := b.newAct(L*k, ffn)
	if err != nil {
		return err
	}
	defer b.release(up.buf)
	if err := b.moeMatmul(xh, gates, gate, counts, lists, L, k, false); err != nil {
		return err
	}
	if err := b.moeMatmul(xh, ups, up, counts, lists, L, k, false); err != nil {
		return err
	}
	n := L * k * ffn
	if err := b.perElement("silu_mul_f32", n, ffn, in(1, gate), in(2, up), out(3, gate)); err != nil {
		return err
	}
	down, err := b.newAct(L*k, hidden)
	if err != nil {
		return err
	}
	defer b.release(down.buf)
	if err := b.moeMatmul(gate, downs, down, counts, lists, L, k, true); err != nil {
		return err
	}
	ca := shaders.KargsMoe{Tokens: int32(L), TopK: int32(k), Cols: int32(hidden)}
	return b.run(streamCost(L*hidden, 4*(2*k+1), 2*k), "moe_combine_f32", [3]int{groups(L*hidden, 256), 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&ca),
		in(1, down), in(2, wh), in(3, down), out(4, res))
}
