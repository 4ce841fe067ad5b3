package kernels

import (
	"fmt"
	"math"
	"sync"

	"github.com/clefrt/clef/quant"
)

// gemmFloat is the GEMM of the float formats (f32, f16, bf16 weights with
// activations in the same format): activations are widened to float32 once
// per call (widen); weight rows go two (four where the level has a 4×4
// kernel) at a time against four activation rows to kernels that widen
// them in registers (dotFloat2x4, dotFloat4x4), the last
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

// floatBlockBytes bounds the activation rows that one pass of the 2×4 (or
// 4×4) kernels runs against every weight tile: they stay in L2 (256 KiB
// fits the per-core L2 of the x86-64 and arm64 cores we meet) while the
// weights stream by once per block, instead of all m rows streaming from
// L3 or memory once per 4 weight rows.
const floatBlockBytes = 256 << 10

// gemmFloatF32 is gemmFloat on float32 activations xf [m, k]: full 4-row
// weight tiles against the activation rows in full 4-row groups go to the
// 4×4 kernel where the level has one, else to the 2×4 kernels (two weight
// rows × four activation rows a call; the same bits), the activation rows
// in blocks of mb that every weight tile passes over in turn; the other
// rows are done tile by tile in the last block's pass (floatRest.run),
// while the tile is in cache. Which kernel computes an output depends only
// on m and whether its weight row lies in a full tile, never on the
// blocking.
func gemmFloatF32(typ quant.Type, w []byte, wRow, n, k int, xf []float32, m int, out []float32, ldOut int) {
	var r8 [8]float32
	var r16 [16]float32
	var rest floatRest
	m4 := 0
	if hasFloat2x4() {
		m4 = m / 4 * 4
	}
	mb := max(4, floatBlockBytes/(4*k)/4*4)
	for i0 := 0; ; i0 += mb {
		i1 := min(m4, i0+mb)
		for j0 := 0; j0 < n; j0 += 4 {
			rows := min(4, n-j0)
			wt := w[j0*wRow : (j0+rows)*wRow]
			for i := i0; i < i1 && rows == 4; i += 4 {
				if dotFloat4x4(typ, wt, wRow, k, xf[i*k:(i+4)*k], &r16) {
					for a := 0; a < 4; a++ {
						o := out[(i+a)*ldOut+j0 : (i+a)*ldOut+j0+4]
						o[0], o[1], o[2], o[3] = r16[a], r16[4+a], r16[8+a], r16[12+a]
					}
					continue
				}
				for r0 := 0; r0 < 4; r0 += 2 {
					dotFloat2x4(typ, wt[r0*wRow:], wRow, k, xf[i*k:(i+4)*k], &r8)
					for a := 0; a < 4; a++ {
						out[(i+a)*ldOut+j0+r0] = r8[a]
						out[(i+a)*ldOut+j0+r0+1] = r8[4+a]
					}
				}
			}
			if i1 == m4 {
				i := 0
				if rows == 4 {
					i = m4
				}
				rest.run(typ, wt, wRow, rows, k, xf, i, m, out[j0:], ldOut)
			}
		}
		if i1 == m4 {
			return
		}
	}
}

// dotFloat4x4Fast, where an architecture's kernels set it, dots the first
// 8·n8 values of four f32/f16/bf16 weight rows (stride bytes apart) with
// four float32 activation rows (xstride bytes apart) into r[4·row+act]
// and reports true, giving the same bits as two dotFloat2x4Fast calls; it
// reports false (and writes nothing) where the kernel level in use has no
// such kernel.
var dotFloat4x4Fast func(typ quant.Type, w *byte, stride int, x *float32, xstride, n8 int, r *[16]float32) bool

// dotFloat4x4 is dotFloat2x4 for four weight rows, r[4·row+act], with the
// same bits; false where there is no 4×4 kernel (then nothing is written).
func dotFloat4x4(typ quant.Type, w []byte, stride, k int, x []float32, r *[16]float32) bool {
	if dotFloat4x4Fast == nil || !hasFloat2x4() {
		return false
	}
	esz := 2
	if typ == quant.F32 {
		esz = 4
	}
	_ = w[3*stride+esz*k-1]
	_ = x[4*k-1]
	n8 := k / 8
	if !dotFloat4x4Fast(typ, &w[0], stride, &x[0], 4*k, n8, r) {
		return false
	}
	// The last k mod 8 values, as dotFloat2x4 adds them.
	for row := 0; row < 4; row++ {
		for i := 8 * n8; i < k; i++ {
			v := floatAt(typ, w[row*stride+esz*i:])
			for a := 0; a < 4; a++ {
				r[4*row+a] += v * x[a*k+i]
			}
		}
	}
	return true
}

// floatRest holds gemmFloatF32's scratch for the rows outside the 2×4 /
// 4×4 blocks.
type floatRest struct {
	tile, xpad []float32
}

// run computes activation rows [i, m) against the weight rows wt (rows of
// them, 4 or the last few) into out[row*ldOut+j]: through the 2×4 kernel
// padded with zero activation rows (f32, and f16/bf16 without a one-row
// kernel: with few activation rows the weights' memory traffic bounds the
// work), the 4×1 kernels widening f16/bf16 weights as they go, or else
// rows widened to a float32 tile for dotF32x4.
func (s *floatRest) run(typ quant.Type, wt []byte, wRow, rows, k int, xf []float32, i, m int, out []float32, ldOut int) {
	if i == m {
		return
	}
	if rows == 4 && (typ == quant.F32 || !fastHalf) && hasFloat2x4() {
		if s.xpad == nil {
			s.xpad = make([]float32, 4*k)
		}
		var r8 [8]float32
		for ; i < m; i += 4 {
			clear(s.xpad)
			copy(s.xpad, xf[i*k:min(m, i+4)*k])
			for r0 := 0; r0 < 4; r0 += 2 {
				dotFloat2x4(typ, wt[r0*wRow:], wRow, k, s.xpad, &r8)
				for a := 0; a < min(4, m-i); a++ {
					out[(i+a)*ldOut+r0] = r8[a]
					out[(i+a)*ldOut+r0+1] = r8[4+a]
				}
			}
		}
		return
	}
	var r [4]float32
	if rows == 4 && typ != quant.F32 {
		if dotHalfx4(typ == quant.BF16, wt, wRow, k, xf[i*k:(i+1)*k], &r) {
			copy(out[i*ldOut:i*ldOut+4], r[:])
			for i++; i < m; i++ {
				dotHalfx4(typ == quant.BF16, wt, wRow, k, xf[i*k:(i+1)*k], &r)
				copy(out[i*ldOut:i*ldOut+4], r[:])
			}
			return
		}
	}
	if s.tile == nil {
		s.tile = make([]float32, 4*k)
	}
	clear(s.tile)
	f, _ := quant.FormatOf(typ)
	for row := 0; row < rows; row++ {
		f.Dequantize(s.tile[row*k:(row+1)*k], wt[row*wRow:(row+1)*wRow])
	}
	for ; i < m; i++ {
		dotF32x4(s.tile, k, xf[i*k:(i+1)*k], &r)
		copy(out[i*ldOut:i*ldOut+rows], r[:rows])
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
