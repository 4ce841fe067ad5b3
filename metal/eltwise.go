package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/shaders"
)

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
	return wrapT(o), b.perElement("add_f32", xh.rows*xh.cols, xh.cols, in(1, xh), in(2, yh), out(3, o))
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
	if err := b.perElement("copy_f32", xh.rows*xh.cols, xh.cols, in(1, xh), out(2, o)); err != nil {
		return nil, err
	}
	if len(rows) == 0 || xh.cols == 0 {
		return wrapT(o), nil
	}
	rb, err := b.hostInts(rows)
	if err != nil {
		return nil, err
	}
	defer b.release(rb)
	a := shaders.KargsAddRows{Rows: int32(xh.rows), Cols: int32(xh.cols), NSrc: int32(len(rows))}
	err = b.run(streamCost(len(rows)*xh.cols, 12, 1), "add_rows_f32", [3]int{groups(len(rows)*xh.cols, 256), 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&a),
		in(1, yh), arg{Index: 2, Buf: rb}, arg{Index: 3, Buf: o.buf, Off: o.off, Out: true})
	return wrapT(o), err
}

// Im2Col unfolds x [N*H*W, C] (channels-last) for a convolution of
// geometry g into out [N*OH*OW, C*KH*KW] (im2col_f32: one thread per output
// value, 0 for taps in the padding).
func (b *Backend) Im2Col(x *backend.Tensor, g backend.Conv2D) (*backend.Tensor, error) {
	xh, err := b.act(x, "Im2Col x")
	if err != nil {
		return nil, err
	}
	if err := g.Check(xh.rows, xh.cols); err != nil {
		return nil, fmt.Errorf("metal: Im2Col: %w", err)
	}
	oh, ow := g.Out()
	rows, cols := g.N*oh*ow, g.C*g.KH*g.KW
	o, err := b.newAct(rows, cols)
	if err != nil {
		return nil, err
	}
	a := shaders.KargsIm2Col{N: int32(g.N), H: int32(g.H), W: int32(g.W), C: int32(g.C), KH: int32(g.KH), KW: int32(g.KW),
		SH: int32(g.SH), SW: int32(g.SW), PH: int32(g.PH), PW: int32(g.PW), OH: int32(oh), OW: int32(ow)}
	err = b.run(streamCost(rows*cols, 8, 0), "im2col_f32", [3]int{groups(rows*cols, 256), 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&a), in(1, xh), out(2, o))
	return wrapT(o), err
}

// GELU applies GELU elementwise: gelu_f32 (exact, erf) or gelu_tanh_f32.
func (b *Backend) GELU(x *backend.Tensor, kind backend.GELUKind) (*backend.Tensor, error) {
	xh, err := b.act(x, "GELU x")
	if err != nil {
		return nil, err
	}
	var kernel string
	switch kind {
	case backend.GELUErf:
		kernel = "gelu_f32"
	case backend.GELUTanh:
		kernel = "gelu_tanh_f32"
	default:
		return nil, fmt.Errorf("metal: GELU: unknown kind %v", kind)
	}
	o, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	return wrapT(o), b.perElement(kernel, xh.rows*xh.cols, xh.cols, in(1, xh), out(2, o))
}

// AddBias returns x [rows, n] with bias [n] added to every row.
func (b *Backend) AddBias(x, bias *backend.Tensor) (*backend.Tensor, error) {
	xh, err := b.act(x, "AddBias x")
	if err != nil {
		return nil, err
	}
	b32, err := b.vector(bias, xh.cols, "AddBias bias")
	if err != nil {
		return nil, err
	}
	o, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	return wrapT(o), b.perElement("add_bias_f32", xh.rows*xh.cols, xh.cols, in(1, xh), in(2, b32), out(3, o))
}

// Reshape returns x with another shape of as many values: a view of its
// buffer (no copy; freeing it releases nothing, and it is valid while x
// lives).
func (b *Backend) Reshape(x *backend.Tensor, rows, cols int) (*backend.Tensor, error) {
	xh, err := b.act(x, "Reshape x")
	if err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 || rows*cols != xh.rows*xh.cols {
		return nil, fmt.Errorf("metal: Reshape: [%d %d] into [%d %d]", xh.rows, xh.cols, rows, cols)
	}
	return wrapT(&tensor{buf: xh.buf, off: xh.off, rows: rows, cols: cols, typ: xh.typ, rowBytes: 4 * cols}), nil
}

// Transpose returns xᵀ.
func (b *Backend) Transpose(x *backend.Tensor) (*backend.Tensor, error) {
	xh, err := b.act(x, "Transpose x")
	if err != nil {
		return nil, err
	}
	y, err := b.newAct(xh.cols, xh.rows)
	if err != nil {
		return nil, err
	}
	return wrapT(y), b.perElement("transpose_f32", xh.rows*xh.cols, xh.cols, in(1, xh), out(2, y))
}

// perElement launches an eltwise.metal kernel over n elements, one thread
// each, with kargs_eltwise{n, cols} (nothing to do when n is 0).
func (b *Backend) perElement(kernel string, n, cols int, bufs ...arg) error {
	if n == 0 {
		return nil
	}
	a := shaders.KargsEltwise{N: int32(n), Cols: int32(cols)}
	return b.run(streamCost(n, 4*len(bufs), 4), kernel, [3]int{groups(n, 256), 1, 1}, [3]int{256, 1, 1}, shaders.Bytes(&a), bufs...)
}

// sameShape returns the handles of two f32 activations of one shape.
func (b *Backend) sameShape(x, y *backend.Tensor, op string) (*tensor, *tensor, error) {
	xh, err := b.act(x, op+" a")
	if err != nil {
		return nil, nil, err
	}
	yh, err := b.act(y, op+" b")
	if err != nil {
		return nil, nil, err
	}
	if xh.rows != yh.rows || xh.cols != yh.cols {
		return nil, nil, fmt.Errorf("metal: %s: shapes [%d %d] and [%d %d] differ", op, xh.rows, xh.cols, yh.rows, yh.cols)
	}
	return xh, yh, nil
}

// PairFeatures returns [a, b, a·b, |a−b|] row by row.
func (b *Backend) PairFeatures(x, y *backend.Tensor) (*backend.Tensor, error) {
	xh, yh, err := b.sameShape(x, y, "PairFeatures")
	if err != nil {
		return nil, err
	}
	o, err := b.newAct(xh.rows, 4*xh.cols)
	if err != nil {
		return nil, err
	}
	return wrapT(o), b.perElement("pair_features_f32", xh.rows*xh.cols, xh.cols, in(1, xh), in(2, yh), out(3, o))
}

// SpanMeans returns the mean of each span of rows of x.
func (b *Backend) SpanMeans(x *backend.Tensor, spans [][2]int) (*backend.Tensor, error) {
	xh, err := b.act(x, "SpanMeans x")
	if err != nil {
		return nil, err
	}
	if err := backend.CheckSpans(spans, xh.rows); err != nil {
		return nil, fmt.Errorf("metal: SpanMeans: %w", err)
	}
	y, err := b.newAct(len(spans), xh.cols)
	if err != nil {
		return nil, err
	}
	if len(spans)*xh.cols == 0 {
		return wrapT(y), nil
	}
	flat := make([]int, 0, 2*len(spans))
	for _, s := range spans {
		flat = append(flat, s[0], s[1])
	}
	sb, err := b.hostInts(flat)
	if err != nil {
		return nil, err
	}
	defer b.release(sb)
	return wrapT(y), b.perElement("span_means_f32", len(spans)*xh.cols, xh.cols, in(1, xh), arg{Index: 2, Buf: sb}, out(3, y))
}
