package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

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
	defer b.release(idb)
	a := shaders.KargsGetRows{NIDs: int32(len(ids)), Cols: int32(w.cols), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRowBytes),
		GroupSize: int32(w.groupSize), ScaleBF16: b2i(w.scaleBF16), NRows: int32(w.rows)}
	sBuf, sOff, bBuf, bOff := w.sBuf, w.sOff, w.bBuf, w.bOff
	if sBuf == nil { // an activation as the table (a row gather)
		sBuf, sOff, bBuf, bOff = w.buf, w.off, w.buf, w.off
	}
	c := cost{bytes: float64(len(ids)) * float64(w.rowBytes+2*w.sRowBytes+4*w.cols)}
	err = b.run(c, "get_rows_"+suffix, [3]int{len(ids), 1, 1}, [3]int{64, 1, 1}, shaders.Bytes(&a),
		in(1, w), arg{Index: 2, Buf: sBuf, Off: sOff}, arg{Index: 3, Buf: bBuf, Off: bOff},
		arg{Index: 4, Buf: idb}, out(5, y))
	return wrapT(y), err
}

// GatherBlend returns out [len(ids)/k, n] whose row i is the weighted sum
// of the k table rows ids[i*k:(i+1)*k] (gather_blend_*: one threadgroup per
// output row; the table a bound F32/F16/BF16 weight or an activation).
func (b *Backend) GatherBlend(table *backend.Tensor, ids []int, weights []float32, k int) (*backend.Tensor, error) {
	w, err := b.handle(table, "GatherBlend table")
	if err != nil {
		return nil, err
	}
	if w.typ != quant.F32 && w.typ != quant.F16 && w.typ != quant.BF16 {
		return nil, fmt.Errorf("metal: GatherBlend: table is %v (want F32, F16 or BF16)", w.typ)
	}
	if err := backend.CheckBlend(ids, weights, k, w.rows); err != nil {
		return nil, fmt.Errorf("metal: GatherBlend: %w", err)
	}
	suffix, err := kernelSuffix(w.typ)
	if err != nil {
		return nil, err
	}
	m := len(ids) / k
	y, err := b.newAct(m, w.cols)
	if err != nil {
		return nil, err
	}
	if m == 0 || w.cols == 0 {
		return wrapT(y), nil
	}
	idb, err := b.hostInts(ids)
	if err != nil {
		return nil, err
	}
	defer b.release(idb)
	wb, err := b.upload(f32Bytes(weights), "GatherBlend weights", false)
	if err != nil {
		return nil, err
	}
	defer b.release(wb)
	a := shaders.KargsGatherBlend{NOut: int32(m), Cols: int32(w.cols), K: int32(k), NRows: int32(w.rows), RowBytes: uint64(w.rowBytes)}
	c := cost{bytes: float64(len(ids))*float64(w.rowBytes) + 4*float64(m*w.cols), flops: 2 * float64(len(ids)*w.cols)}
	err = b.run(c, "gather_blend_"+suffix, [3]int{m, 1, 1}, [3]int{64, 1, 1}, shaders.Bytes(&a),
		in(1, w), arg{Index: 2, Buf: idb}, arg{Index: 3, Buf: wb}, out(4, y))
	return wrapT(y), err
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
	// The M5 path (tensor.go) when this open takes it.
	if ok, err := b.tensorMatMul(xh, wh, y); ok || err != nil {
		return err
	}
	suffix, err := kernelSuffix(wh.typ)
	if err != nil {
		return err
	}
	M, N, K := wh.rows, xh.rows, wh.cols
	if N == 0 || M == 0 {
		return nil
	}
	sBuf, sOff, bBuf, bOff := wh.sBuf, wh.sOff, wh.bBuf, wh.bOff
	if sBuf == nil { // an activation as the right-hand side
		sBuf, sOff, bBuf, bOff = wh.buf, wh.off, wh.buf, wh.off
	}
	// Rows of x in chunks of whole 32-row overflow groups of mul_mm's
	// 64-row tiles (a chunk then gives the bits of the whole launch:
	// matmul.metal), each under opSeconds (the q projection of 64k tokens
	// is ~0.4 s on the conservative chip).
	step := N
	opLimit := b.opLimit()
	for step > 32 && matmulCost(M, step, K, wh.rowBytes, wh.sRowBytes).seconds() > opLimit {
		step = (step/2 + 31) / 32 * 32
	}
	for n0 := 0; n0 < N; n0 += step {
		n := min(step, N-n0)
		// mul_mm_* read x rows whose length is a multiple of 4 as float4:
		// they must start 16-byte aligned (activations are whole buffers or
		// row views, so they do).
		if xoff := xh.off + 4*n0*xh.cols; n > mvMaxTokens && xh.cols%4 == 0 && xoff%16 != 0 {
			return fmt.Errorf("metal: MatMul: x at byte offset %d is not 16-byte aligned", xoff)
		}
		a := shaders.KargsMatmul{M: int32(M), N: int32(n), K: int32(K), XStride: int32(xh.cols), YStride: int32(y.cols),
			GroupSize: int32(wh.groupSize), RowBytes: uint64(wh.rowBytes), SRowBytes: uint64(wh.sRowBytes), ScaleBF16: b2i(wh.scaleBF16)}
		bufs := []arg{in(1, wh), {Index: 2, Buf: sBuf, Off: sOff}, {Index: 3, Buf: bBuf, Off: bOff},
			{Index: 4, Buf: xh.buf, Off: xh.off + 4*n0*xh.cols}, {Index: 5, Buf: y.buf, Off: y.off + 4*n0*y.cols, Out: true}}
		c := matmulCost(M, n, K, wh.rowBytes, wh.sRowBytes)
		if n <= mvMaxTokens {
			err = b.run(c, "mul_mv_"+suffix, [3]int{groups(M, 4), n, 1}, [3]int{64, 1, 1}, shaders.Bytes(&a), bufs...)
		} else {
			// 64x64 tiles; FC_mm_direct: every tile lies inside y, so it is
			// stored without staging.
			direct := fconst{Index: 0, Bool: true, Value: int(b2i(M%64 == 0 && n%64 == 0))}
			err = b.launch(&dispatch{Kernel: "mul_mm_" + suffix, Consts: []fconst{direct},
				Grid: [3]int{groups(n, 64), groups(M, 64), 1}, Group: [3]int{128, 1, 1}, Args: shaders.Bytes(&a), Bufs: bufs}, c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// GroupMatMul is the block-diagonal product of groups: x [M, G·K], w
// [G·N, K] (f32 activations), out [M, G·N].
func (b *Backend) GroupMatMul(x, w *backend.Tensor, groups int) (*backend.Tensor, error) {
	xh, err := b.act(x, "GroupMatMul x")
	if err != nil {
		return nil, err
	}
	wh, err := b.act(w, "GroupMatMul w")
	if err != nil {
		return nil, err
	}
	if groups <= 0 || xh.cols != groups*wh.cols || wh.rows%groups != 0 {
		return nil, fmt.Errorf("metal: GroupMatMul: x [%d %d] and w [%d %d] do not make %d groups", xh.rows, xh.cols, wh.rows, wh.cols, groups)
	}
	n := wh.rows / groups
	y, err := b.newAct(xh.rows, groups*n)
	if err != nil {
		return nil, err
	}
	total := xh.rows * groups * n
	if total == 0 {
		return wrapT(y), nil
	}
	a := shaders.KargsMatmul{M: int32(n), N: int32(xh.rows), K: int32(wh.cols), XStride: int32(xh.cols), YStride: int32(groups * n),
		NExpert: int32(groups)}
	c := cost{bytes: 4 * float64(xh.rows*xh.cols+wh.rows*wh.cols+total), flops: 2 * float64(total) * float64(wh.cols)}
	err = b.run(c, "group_matmul_f32", [3]int{(total + 3) / 4, 1, 1}, [3]int{128, 1, 1}, shaders.Bytes(&a), in(1, xh), in(2, wh), out(3, y))
	return wrapT(y), err
}

// tensorStep is the number of rows of x per launch of the tensor path's
// matmuls: whole tiles of mul_mm_t_*'s 128 tokens (so of mul_mm_t8_*'s 64
// too), each chunk under the op limit (as matmul does).
func (b *Backend) tensorStep(M, N, K int, wh *tensor) int {
	step := N
	opLimit := b.opLimit()
	for step > tensorTileTokens && matmulCost(M, step, K, wh.rowBytes, wh.sRowBytes).seconds() > opLimit {
		step = (step/2 + tensorTileTokens - 1) / tensorTileTokens * tensorTileTokens
	}
	return step
}

// tensorMatMulInt8 computes y = x whᵀ on the int8 tensor path
// (tensorInt8Types, K a multiple of 256): x quantized once to q8_K rows in a
// pooled scratch buffer (quantQ8K, moe.go), then kernel (mul_mm_t8_*: 64 x 64
// tiles) over the rows of x in tensorStep's chunks. Binding
// (shaders/tensor_q8.metal): 0 kargs_matmul (x_stride in bytes between
// q8_K rows), 1 W, 2 the q8_K rows, 3 y.
func (b *Backend) tensorMatMulInt8(kernel string, xh, wh, y *tensor) error {
	M, N, K := wh.rows, xh.rows, wh.cols
	xq, err := b.quantQ8K(xh.buf, xh.off, N, K, xh.cols, "the q8_K x of a matmul")
	if err != nil {
		return err
	}
	defer b.release(xq.buf)
	qRow := xq.stride
	step := b.tensorStep(M, N, K, wh)
	for n0 := 0; n0 < N; n0 += step {
		n := min(step, N-n0)
		a := shaders.KargsMatmul{M: int32(M), N: int32(n), K: int32(K), XStride: int32(qRow), YStride: int32(y.cols),
			RowBytes: uint64(wh.rowBytes)}
		bufs := []arg{in(1, wh), {Index: 2, Buf: xq.buf, Off: n0 * qRow}, {Index: 3, Buf: y.buf, Off: y.off + 4*n0*y.cols, Out: true}}
		c := matmulCost(M, n, K, wh.rowBytes, 0)
		c.bytes += float64(n) * float64(qRow-4*K) // x is read as q8_K rows
		err := b.launch(&dispatch{Kernel: kernel, Grid: [3]int{groups(n, tensorInt8TileTokens), groups(M, tensorTileRows), 1},
			Group: [3]int{128, 1, 1}, Args: shaders.Bytes(&a), Bufs: bufs}, c)
		if err != nil {
			return err
		}
	}
	return nil
}
