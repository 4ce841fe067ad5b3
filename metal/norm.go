package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// normWeight returns an f32 copy of a norm weight (uploaded once).
func (b *Backend) normWeight(wh *tensor) (*tensor, error) {
	if wh.typ == quant.F32 {
		return wh, nil
	}
	b.mu.Lock()
	c := b.normCache[wh]
	b.mu.Unlock()
	if c != nil {
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
	buf, err := b.upload(f32Bytes(v), "a float32 copy of "+wh.src.Name, true)
	if err != nil {
		return nil, err
	}
	c = &tensor{buf: buf, rows: 1, cols: len(v), typ: quant.F32, rowBytes: 4 * len(v)}
	b.mu.Lock()
	b.normCache[wh] = c
	b.mu.Unlock()
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
	a := shaders.KargsNorm{Rows: int32(rows), Cols: int32(g), XStride: int32(g), YStride: int32(g), Eps: eps}
	err = b.run(streamCost(rows*g, 8, 4), "rms_norm_f32", [3]int{rows, 1, 1}, [3]int{threads, 1, 1}, shaders.Bytes(&a), in(1, xh), in(2, w32), out(3, y))
	return wrapT(y), err
}

// vector returns a [n] weight (a 1-D checkpoint tensor of any float type, or
// a [1, n] activation) as float32 on the device (converted once and cached
// like the norm weights).
func (b *Backend) vector(t *backend.Tensor, n int, what string) (*tensor, error) {
	h, err := b.handle(t, what)
	if err != nil {
		return nil, err
	}
	if h.rows != 1 || h.cols != n {
		return nil, fmt.Errorf("metal: %s: [%d %d] is not one row of %d", what, h.rows, h.cols, n)
	}
	return b.normWeight(h)
}

// LayerNorm normalises every row of x to zero mean and unit variance, then
// scales by weight and adds bias (bias may be nil).
func (b *Backend) LayerNorm(x, weight, bias *backend.Tensor, eps float32) (*backend.Tensor, error) {
	xh, err := b.act(x, "LayerNorm x")
	if err != nil {
		return nil, err
	}
	w32, err := b.vector(weight, xh.cols, "LayerNorm weight")
	if err != nil {
		return nil, err
	}
	b32 := w32 // not read without a bias
	if bias != nil {
		if b32, err = b.vector(bias, xh.cols, "LayerNorm bias"); err != nil {
			return nil, err
		}
	}
	y, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	if xh.rows == 0 || xh.cols == 0 {
		return wrapT(y), nil
	}
	threads := 256
	if xh.cols <= 128 {
		threads = 32
	}
	a := shaders.KargsNorm{Rows: int32(xh.rows), Cols: int32(xh.cols), XStride: int32(xh.cols), YStride: int32(xh.cols), Eps: eps,
		HasBias: b2i(bias != nil)}
	err = b.run(streamCost(xh.rows*xh.cols, 8, 6), "layer_norm_f32", [3]int{xh.rows, 1, 1}, [3]int{threads, 1, 1}, shaders.Bytes(&a), in(1, xh), in(2, w32), in(3, b32), out(4, y))
	return wrapT(y), err
}

// normThreads is the threadgroup size of the one-row-per-threadgroup
// kernels for rows of cols values.
func normThreads(cols int) int {
	if cols <= 128 {
		return 32
	}
	return 256
}

// Softmax returns the softmax of every row of scale·x (over ranges[i] for
// row i when ranges is set, 0 elsewhere).
func (b *Backend) Softmax(x *backend.Tensor, scale float32, ranges [][2]int) (*backend.Tensor, error) {
	xh, err := b.act(x, "Softmax x")
	if err != nil {
		return nil, err
	}
	if err := backend.CheckRanges(ranges, xh.rows, xh.cols); err != nil {
		return nil, fmt.Errorf("metal: Softmax: %w", err)
	}
	y, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	if xh.rows == 0 || xh.cols == 0 {
		return wrapT(y), nil
	}
	flat := make([]int, 2*xh.rows)
	for i := range xh.rows {
		flat[2*i+1] = xh.cols
		if ranges != nil {
			flat[2*i], flat[2*i+1] = ranges[i][0], ranges[i][1]
		}
	}
	rb, err := b.hostInts(flat)
	if err != nil {
		return nil, err
	}
	defer b.release(rb)
	a := shaders.KargsEltwise{N: int32(xh.rows * xh.cols), Alpha: scale, Cols: int32(xh.cols)}
	err = b.run(streamCost(xh.rows*xh.cols, 8, 6), "softmax_f32", [3]int{xh.rows, 1, 1}, [3]int{normThreads(xh.cols), 1, 1}, shaders.Bytes(&a),
		in(1, xh), arg{Index: 2, Buf: rb}, out(3, y))
	return wrapT(y), err
}

// RowDots returns the dot product of each row of x with the same row of y.
func (b *Backend) RowDots(x, y *backend.Tensor) (*backend.Tensor, error) {
	xh, yh, err := b.sameShape(x, y, "RowDots")
	if err != nil {
		return nil, err
	}
	o, err := b.newAct(xh.rows, 1)
	if err != nil {
		return nil, err
	}
	if xh.rows == 0 {
		return wrapT(o), nil
	}
	a := shaders.KargsNorm{Rows: int32(xh.rows), Cols: int32(xh.cols), XStride: int32(xh.cols), YStride: 1}
	err = b.run(streamCost(xh.rows*xh.cols, 8, 2), "row_dots_f32", [3]int{xh.rows, 1, 1}, [3]int{normThreads(xh.cols), 1, 1}, shaders.Bytes(&a),
		in(1, xh), in(2, yh), out(3, o))
	return wrapT(o), err
}
