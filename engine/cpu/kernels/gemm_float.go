package kernels

import "github.com/clefrt/clef/quant"

// gemmFloat is the GEMM of the float formats (f32, f16, bf16 weights with
// activations in the same format): activations are widened to float32 once
// per call and weight rows four at a time, then dotted in float32 (dotF32x4);
// f16/bf16 weights go straight to kernels that widen them in registers
// where there are such kernels (dotHalfx4).
func gemmFloat(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	f, _ := quant.FormatOf(typ)
	xf := make([]float32, m*k)
	for i := 0; i < m; i++ {
		f.Dequantize(xf[i*k:(i+1)*k], xq[i*xRow:(i+1)*xRow])
	}
	tile := make([]float32, 4*k)
	var r [4]float32
	half := typ == quant.F16 || typ == quant.BF16
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		if half && rows == 4 {
			// Fast kernels widen the weights as they go.
			wt := w[j0*wRow : (j0+4)*wRow]
			if dotHalfx4(typ == quant.BF16, wt, wRow, k, xf[:k], &r) {
				copy(out[j0:j0+4], r[:])
				for i := 1; i < m; i++ {
					dotHalfx4(typ == quant.BF16, wt, wRow, k, xf[i*k:(i+1)*k], &r)
					copy(out[i*ldOut+j0:i*ldOut+j0+4], r[:])
				}
				continue
			}
		}
		clear(tile)
		for row := 0; row < rows; row++ {
			f.Dequantize(tile[row*k:(row+1)*k], w[(j0+row)*wRow:(j0+row+1)*wRow])
		}
		for i := 0; i < m; i++ {
			dotF32x4(tile, k, xf[i*k:(i+1)*k], &r)
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

// dotF32x4Generic dots four float32 rows (k apart in w) with x.
func dotF32x4Generic(w []float32, k int, x []float32, r *[4]float32) {
	for row := range r {
		r[row] = dotF32(w[row*k:(row+1)*k], x[:k])
	}
}

// dotF32 is a float32 dot product with four partial sums.
func dotF32(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
