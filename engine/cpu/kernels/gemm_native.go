//go:build (amd64 || arm64) && !purego

package kernels

import "github.com/clefrt/clef/quant"

// The dispatch of the fast kernels: each runs its assembly version when the
// CPU has the instructions it needs (fast, set in cpu_<arch>.go), its
// generic twin otherwise.

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	if !fast || nb == 0 {
		dotQ8_0x4Generic(w, stride, x, nb, r)
		return
	}
	_ = w[3*stride+34*nb-1]
	_ = x[34*nb-1]
	dotQ8_0x4Fast(&w[0], stride, &x[0], nb, r)
}

func kDot4(tile []byte, nb int, x []byte, r *[4]float32) {
	if !fast || !fastKDot || nb == 0 {
		kDot4Generic(tile, nb, x, r)
		return
	}
	_ = tile[4*nb*kRec-1]
	_ = x[292*nb-1]
	kDot4Fast(&tile[0], nb*kRec, &x[0], nb, r)
}

func dotF32x4(w []float32, k int, x []float32, r *[4]float32) {
	n8 := k / 8
	if !fast || !fastF32 || n8 == 0 {
		dotF32x4Generic(w, k, x, r)
		return
	}
	_ = w[4*k-1]
	_ = x[k-1]
	dotF32x4Fast(&w[0], k, &x[0], n8, r)
	for row := range r {
		for i := 8 * n8; i < k; i++ {
			r[row] += w[row*k+i] * x[i]
		}
	}
}

// dotHalfx4 dots four f16/bf16 weight rows (stride bytes apart, k values)
// with float32 activations, reporting false when there is no fast kernel.
func dotHalfx4(bf16 bool, w []byte, stride, k int, x []float32, r *[4]float32) bool {
	n8 := k / 8
	if !fast || !fastHalf || n8 == 0 {
		return false
	}
	_ = w[3*stride+2*k-1]
	_ = x[k-1]
	dotHalfx4Fast(bf16, &w[0], stride, &x[0], n8, r)
	for row := range r {
		for i := 8 * n8; i < k; i++ {
			h := le.Uint16(w[row*stride+2*i:])
			v := quant.Float16ToFloat32(h)
			if bf16 {
				v = quant.BF16ToFloat32(h)
			}
			r[row] += v * x[i]
		}
	}
	return true
}

// hasFloat2x4 reports whether dotFloat2x4 has a fast kernel.
func hasFloat2x4() bool { return fast && fastFloat2x4 }

// dotFloat2x4 dots two f32/f16/bf16 weight rows (stride bytes apart, k
// values) with four float32 activation rows (k apart in x) into
// r[4·row+act]; callers check hasFloat2x4 first.
func dotFloat2x4(typ quant.Type, w []byte, stride, k int, x []float32, r *[8]float32) {
	esz := 2
	if typ == quant.F32 {
		esz = 4
	}
	_ = w[stride+esz*k-1]
	_ = x[4*k-1]
	n8 := k / 8
	if n8 > 0 {
		dotFloat2x4Fast(typ, &w[0], stride, &x[0], 4*k, n8, r)
	} else {
		clear(r[:])
	}
	for row := 0; row < 2; row++ {
		for i := 8 * n8; i < k; i++ {
			v := floatAt(typ, w[row*stride+esz*i:])
			for a := 0; a < 4; a++ {
				r[4*row+a] += v * x[a*k+i]
			}
		}
	}
}

// widen converts one row of k f32/f16/bf16 activations to float32.
func widen(f *quant.Format, dst []float32, src []byte) {
	n8 := len(dst) / 8
	if !fast || !fastWiden || n8 == 0 {
		f.Dequantize(dst, src)
		return
	}
	_ = src[len(dst)*f.BlockBytes-1]
	widenFast(f.Type, &dst[0], &src[0], n8)
	f.Dequantize(dst[8*n8:], src[8*n8*f.BlockBytes:])
}
