package kernels

import (
	"fmt"
	"math"
	"sync"

	"github.com/clefrt/clef/quant"
)

// gemmFloat is the GEMM of the float formats (f32, f16, bf16 weights with
// activations in the same format): activations are widened to float32 once
// per call (widen); weight rows go two at a time against four activation
// rows to kernels that widen them in registers (dotFloat2x4), the last
// activation rows to dotHalfx4 (f16/bf16, four weight rows against one) or
// to rows widened four at a time and dotted in float32 (dotF32x4).
func gemmFloat(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	f, _ := quant.FormatOf(typ)
	// The widened activations are scratch reused across calls: the worker
	// pool calls GEMM for a few weight rows at a time.
	buf := floatScratch.Get().(*[]float32)
	defer floatScratch.Put(buf)
	if cap(*buf) < m*k {
		*buf = make([]float32, m*k)
	}
	xf := (*buf)[:m*k]
	for i := 0; i < m; i++ {
		widen(f, xf[i*k:(i+1)*k], xq[i*xRow:(i+1)*xRow])
	}
	gemmFloatF32(typ, w, wRow, n, k, xf, m, out, ldOut)
}

// GEMMFloat is GEMM for f32, f16 and bf16 weights on float32 activations x
// [m, k] (not rounded to the weight format): out[i*ldOut+j] = Σ_k
// w[j,k]·x[i,k]. The weights are widened in registers where there is a
// fast kernel. Each output value depends only on its weight row, its
// activation row, m and whether its row lies in a full 4-row tile counted
// from w's first row, so callers splitting the rows at multiples of 4 get
// the same bits as one call.
func GEMMFloat(typ quant.Type, w []byte, n, k int, x []float32, m int, out []float32, ldOut int) error {
	if typ != quant.F32 && typ != quant.F16 && typ != quant.BF16 {
		return fmt.Errorf("kernels: GEMMFloat: %v is not a float weight type", typ)
	}
	if n < 0 || m < 0 || k < 0 {
		return fmt.Errorf("kernels: GEMMFloat %v: negative size n=%d m=%d k=%d", typ, n, m, k)
	}
	wRow, err := quant.RowBytes(typ, k)
	if err != nil {
		return err
	}
	if n > 0 && len(w)/n < wRow {
		return fmt.Errorf("kernels: GEMMFloat %v: %d weight rows of %d values need %d bytes, have %d", typ, n, k, n*wRow, len(w))
	}
	if m > 0 && len(x)/m < k {
		return fmt.Errorf("kernels: GEMMFloat %v: %d activation rows of %d values need %d floats, have %d", typ, m, k, m*k, len(x))
	}
	if m > 0 && (ldOut < n || (len(out)-n)/ldOut < m-1 || len(out) < n) {
		return fmt.Errorf("kernels: GEMMFloat %v: output of %d rows of %d (stride %d) does not fit %d floats", typ, m, n, ldOut, len(out))
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(out[i*ldOut : i*ldOut+n])
		}
		return nil
	}
	gemmFloatF32(typ, w, wRow, n, k, x[:m*k], m, out, ldOut)
	return nil
}

// gemmFloatF32 is gemmFloat on float32 activations xf [m, k].
func gemmFloatF32(typ quant.Type, w []byte, wRow, n, k int, xf []float32, m int, out []float32, ldOut int) {
	f, _ := quant.FormatOf(typ)
	var tile []float32
	var r [4]float32
	var r8 [8]float32
	var xpad []float32
	half := typ == quant.F16 || typ == quant.BF16
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		i := 0
		if rows == 4 && hasFloat2x4() {
			// Two weight rows × four activation rows per kernel call.
			wt := w[j0*wRow : (j0+4)*wRow]
			for ; i+4 <= m; i += 4 {
				for r0 := 0; r0 < 4; r0 += 2 {
					dotFloat2x4(typ, wt[r0*wRow:], wRow, k, xf[i*k:(i+4)*k], &r8)
					for a := 0; a < 4; a++ {
						out[(i+a)*ldOut+j0+r0] = r8[a]
						out[(i+a)*ldOut+j0+r0+1] = r8[4+a]
					}
				}
			}
		}
		if i < m && rows == 4 && (typ == quant.F32 || !fastHalf) && hasFloat2x4() {
			// With few activation rows the weights' memory traffic bounds
			// the work: the last rows go through the same kernel, padded
			// with zero rows (f32, and f16/bf16 without a one-row kernel).
			if xpad == nil {
				xpad = make([]float32, 4*k)
			}
			clear(xpad)
			copy(xpad, xf[i*k:m*k])
			wt := w[j0*wRow : (j0+4)*wRow]
			for r0 := 0; r0 < 4; r0 += 2 {
				dotFloat2x4(typ, wt[r0*wRow:], wRow, k, xpad, &r8)
				for a := 0; a < m-i; a++ {
					out[(i+a)*ldOut+j0+r0] = r8[a]
					out[(i+a)*ldOut+j0+r0+1] = r8[4+a]
				}
			}
			i = m
		}
		if i == m {
			continue
		}
		if half && rows == 4 {
			// Fast kernels widen the weights as they go.
			wt := w[j0*wRow : (j0+4)*wRow]
			if dotHalfx4(typ == quant.BF16, wt, wRow, k, xf[i*k:(i+1)*k], &r) {
				copy(out[i*ldOut+j0:i*ldOut+j0+4], r[:])
				for i++; i < m; i++ {
					dotHalfx4(typ == quant.BF16, wt, wRow, k, xf[i*k:(i+1)*k], &r)
					copy(out[i*ldOut+j0:i*ldOut+j0+4], r[:])
				}
				continue
			}
		}
		if tile == nil {
			tile = make([]float32, 4*k)
		}
		clear(tile)
		for row := 0; row < rows; row++ {
			f.Dequantize(tile[row*k:(row+1)*k], w[(j0+row)*wRow:(j0+row+1)*wRow])
		}
		for ; i < m; i++ {
			dotF32x4(tile, k, xf[i*k:(i+1)*k], &r)
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

var floatScratch = sync.Pool{New: func() any { return new([]float32) }}

// floatAt reads the f32/f16/bf16 value at b.
func floatAt(typ quant.Type, b []byte) float32 {
	switch typ {
	case quant.F16:
		return quant.Float16ToFloat32(le.Uint16(b))
	case quant.BF16:
		return quant.BF16ToFloat32(le.Uint16(b))
	}
	return math.Float32frombits(le.Uint32(b))
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
