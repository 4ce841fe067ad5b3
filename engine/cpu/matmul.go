package cpu

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu/kernels"
	"github.com/clefrt/clef/quant"
)

// tileRows is how many weight rows are decoded to float32 at a time.
const tileRows = 16

// MatMul computes x Wᵀ: x [M, K] float32, w [N, K] (a bound weight of any
// supported type, or a float32 tensor), out [M, N]. Workers split the N
// weight rows; each decodes a tile of rows once and runs every x row
// against it.
func (b *Backend) MatMul(x, w *backend.Tensor) (*backend.Tensor, error) {
	xf, m, k, err := act(x, "MatMul x")
	if err != nil {
		return nil, err
	}
	src, n, err := b.rowSource(w, k, "MatMul")
	if err != nil {
		return nil, err
	}
	out := make([]float32, m*n)
	if h, ok := w.Handle.(*weight); ok && b.quantized(h) {
		if err := b.matmulQ(out, xf, m, k, n, h); err != nil {
			return nil, fmt.Errorf("cpu: MatMul %s: %w", h.t.Name, err)
		}
		return newAct(out, m, n), nil
	}
	if h, ok := w.Handle.(*weight); ok && floatKernel(h) {
		if err := b.matmulFloat(out, xf, m, k, n, h, true); err != nil {
			return nil, fmt.Errorf("cpu: MatMul %s: %w", h.t.Name, err)
		}
		return newAct(out, m, n), nil
	}
	if err := b.matmul(out, xf, m, k, n, src); err != nil {
		return nil, fmt.Errorf("cpu: MatMul: %w", err)
	}
	return newAct(out, m, n), nil
}

// floatKernel reports whether w is stored as f32, f16 or bf16, which the
// float GEMM of engine/cpu/kernels reads as stored (widening in registers).
func floatKernel(w *weight) bool {
	if w == nil || w.mlx != nil {
		return false
	}
	switch w.t.Type {
	case quant.F32, quant.F16, quant.BF16:
		return true
	}
	return false
}

// matmulFloat computes out [m, n] = x Wᵀ for a float weight w on float32
// activations, the weight rows split over the workers when par is set.
func (b *Backend) matmulFloat(out, x []float32, m, k, n int, w *weight, par bool) error {
	typ, rb := w.t.Type, w.dec.rowBytes
	if !par {
		return kernels.GEMMFloat(typ, w.t.Data, n, k, x, m, out, n)
	}
	return b.parallelRows(n, m*k, func(lo, hi int) error {
		return kernels.GEMMFloat(typ, w.t.Data[lo*rb:hi*rb], hi-lo, k, x, m, out[lo:], n)
	})
}

// rowSource returns a function decoding row r of w (which must have k
// columns) and w's row count.
func (b *Backend) rowSource(w *backend.Tensor, k int, op string) (func(dst []float32, r int), int, error) {
	if w == nil {
		return nil, 0, fmt.Errorf("cpu: %s: nil weight", op)
	}
	switch h := w.Handle.(type) {
	case *weight:
		if h.cols != k {
			return nil, 0, fmt.Errorf("cpu: %s: weight %s has %d columns, input has %d", op, h.t.Name, h.cols, k)
		}
		return h.decodeRow, h.rows, nil
	case []float32:
		wf, n, c, err := act(w, op+" w")
		if err != nil {
			return nil, 0, err
		}
		if c != k {
			return nil, 0, fmt.Errorf("cpu: %s: weight has %d columns, input has %d", op, c, k)
		}
		return func(dst []float32, r int) { copy(dst, wf[r*k:(r+1)*k]) }, n, nil
	case nil:
		return nil, 0, fmt.Errorf("cpu: %s: weight was freed", op)
	}
	return nil, 0, fmt.Errorf("cpu: %s: unsupported weight handle %T", op, w.Handle)
}

// matmul fills out [m, n] with x [m, k] times the rows given by src.
func (b *Backend) matmul(out, x []float32, m, k, n int, src func(dst []float32, r int)) error {
	tiles := (n + tileRows - 1) / tileRows
	// Enough tiles per worker that a tiny product is not split at all.
	minTiles := max(1, 1<<16/max(1, m*k*tileRows))
	return b.parallel(tiles, minTiles, func(lo, hi int) {
		matmulTiles(out, x, m, k, n, src, lo, hi)
	})
}

// matmulSerial is matmul on the calling goroutine.
func matmulSerial(out, x []float32, m, k, n int, src func(dst []float32, r int)) {
	matmulTiles(out, x, m, k, n, src, 0, (n+tileRows-1)/tileRows)
}

// matmulTiles computes the output columns of weight-row tiles [lo, hi).
func matmulTiles(out, x []float32, m, k, n int, src func(dst []float32, r int), lo, hi int) {
	buf := make([]float32, tileRows*k)
	for t := lo; t < hi; t++ {
		n0 := t * tileRows
		nt := min(tileRows, n-n0)
		for j := 0; j < nt; j++ {
			src(buf[j*k:(j+1)*k], n0+j)
		}
		gemmTile(out, x, buf, m, k, n, n0, nt)
	}
}

// gemmTile computes out[i, n0+j] = x[i] · w[j] for all i < m, j < nt, where
// w holds nt rows of k values: 2×4 register tiles, then the edges.
func gemmTile(out, x, w []float32, m, k, n, n0, nt int) {
	nt4 := nt &^ 3
	var r8 [8]float32
	var r4 [4]float32
	i := 0
	for ; i+2 <= m; i += 2 {
		for j := 0; j < nt4; j += 4 {
			dot2x4(x[i*k:], k, w[j*k:], k, k, &r8)
			copy(out[i*n+n0+j:i*n+n0+j+4], r8[:4])
			copy(out[(i+1)*n+n0+j:(i+1)*n+n0+j+4], r8[4:])
		}
	}
	for ; i < m; i++ {
		for j := 0; j < nt4; j += 4 {
			dot4s(x[i*k:(i+1)*k], w[j*k:], k, &r4)
			copy(out[i*n+n0+j:i*n+n0+j+4], r4[:])
		}
	}
	for j := nt4; j < nt; j++ {
		for i := 0; i < m; i++ {
			out[i*n+n0+j] = dot(x[i*k:(i+1)*k], w[j*k:(j+1)*k])
		}
	}
}

// dot returns Σ x[i]·y[i] with four partial sums.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}
