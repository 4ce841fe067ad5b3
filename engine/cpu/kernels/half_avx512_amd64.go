//go:build !purego

package kernels

import "github.com/clefrt/clef/quant"

// The AVX-512 float-weight kernels (half_avx512_amd64.s), run when
// hasISA(isaAVX512): the AVX2 kernels of half_amd64.s and dotf32_amd64.s
// on ZMM registers, with the same arguments (8·n8 values) and products,
// summed in another order, plus a 4×4 tile (dotFloat4x4Fast) that gives
// the 2×4 kernel's bits. Their generic twins are the ones of the AVX2
// kernels: floatAt-based loops in dotFloat2x4's and dotHalfx4's tails,
// dotF32x4Generic, and quant's Dequantize for the widening.

//go:noescape
func dotBF16x2x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotF16x2x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotF32x2x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotBF16x4AVX512(w *byte, stride int, x *float32, n8 int, r *[4]float32)

//go:noescape
func dotF16x4AVX512(w *byte, stride int, x *float32, n8 int, r *[4]float32)

//go:noescape
func dotF32x4AVX512(w *float32, k int, x *float32, n8 int, r *[4]float32)

//go:noescape
func widenBF16AVX512(dst *float32, src *byte, n8 int)

//go:noescape
func widenF16AVX512(dst *float32, src *byte, n8 int)

//go:noescape
func widenF32AVX512(dst *float32, src *byte, n8 int)

//go:noescape
func dotBF16x4x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[16]float32)

//go:noescape
func dotF16x4x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[16]float32)

//go:noescape
func dotF32x4x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[16]float32)

func init() { dotFloat4x4Fast = dotFloat4x4AVX512 }

// dotFloat4x4AVX512 is dotFloat4x4Fast at level avx512 (false below).
func dotFloat4x4AVX512(typ quant.Type, w *byte, stride int, x *float32, xstride, n8 int, r *[16]float32) bool {
	if !hasISA(isaAVX512) {
		return false
	}
	switch typ {
	case quant.BF16:
		dotBF16x4x4AVX512(w, stride, x, xstride, n8, r)
	case quant.F16:
		dotF16x4x4AVX512(w, stride, x, xstride, n8, r)
	default:
		dotF32x4x4AVX512(w, stride, x, xstride, n8, r)
	}
	return true
}
