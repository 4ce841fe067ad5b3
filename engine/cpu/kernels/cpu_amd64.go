//go:build !purego

package kernels

import (
	"github.com/clefrt/clef/quant"
	"golang.org/x/sys/cpu"
)

const (
	// isaGeneric runs the pure-Go twins.
	isaGeneric isaLevel = iota
	// isaAVX2 needs AVX2, FMA and F16C (q8_0_amd64.s, packed_amd64.s,
	// legacy_amd64.s, half_amd64.s, dotf32_amd64.s).
	isaAVX2
	// isaAVX512 adds AVX-512 F, BW, VL and VNNI (q8_0_avx512_amd64.s,
	// packed_avx512_amd64.s, half_avx512_amd64.s).
	isaAVX512
)

var isaNames = [...]string{isaGeneric: "generic", isaAVX2: "avx2", isaAVX512: "avx512"}

// detectISA returns the highest level this CPU (and OS) runs.
func detectISA() isaLevel {
	x := &cpu.X86
	switch {
	case !(x.HasAVX2 && x.HasFMA && x.HasF16C):
		return isaGeneric
	case !(x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI):
		return isaAVX2
	}
	return isaAVX512
}

var isaNeeds = [...]string{isaGeneric: "nothing", isaAVX2: "AVX2, FMA and F16C", isaAVX512: "AVX2, FMA, F16C and AVX-512 F, BW, VL, VNNI"}

// isaFast is the lowest level with fast kernels (isa.go's fast).
const isaFast = isaAVX2

// fastF32 reports whether dotF32x4 has a fast version.
const fastF32 = true

//go:noescape
func dotQ8_0x4AVX2(w *byte, stride int, x *byte, nb int, r *[4]float32)

//go:noescape
func dotF32x4AVX2(w *float32, k int, x *float32, n8 int, r *[4]float32)

//go:noescape
func dotBF16x4AVX2(w *byte, stride int, x *float32, n8 int, r *[4]float32)

//go:noescape
func dotF16x4AVX2(w *byte, stride int, x *float32, n8 int, r *[4]float32)

// fastHalf reports whether dotHalfx4Fast exists.
const fastHalf = true

// dotHalfx4Fast dots the first 8·n8 values of four f16 or bf16 rows
// (stride bytes apart) with float32 activations.
func dotHalfx4Fast(bf16 bool, w *byte, stride int, x *float32, n8 int, r *[4]float32) {
	if hasISA(isaAVX512) {
		if bf16 {
			dotBF16x4AVX512(w, stride, x, n8, r)
		} else {
			dotF16x4AVX512(w, stride, x, n8, r)
		}
		return
	}
	if bf16 {
		dotBF16x4AVX2(w, stride, x, n8, r)
	} else {
		dotF16x4AVX2(w, stride, x, n8, r)
	}
}

//go:noescape
func dotBF16x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotF16x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotF32x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

// fastFloat2x4 reports whether dotFloat2x4Fast exists.
const fastFloat2x4 = true

// dotFloat2x4Fast dots the first 8·n8 values of two f32/f16/bf16 rows
// (stride bytes apart) with four float32 activation rows (xstride bytes
// apart) into r[4·row+act].
func dotFloat2x4Fast(typ quant.Type, w *byte, stride int, x *float32, xstride, n8 int, r *[8]float32) {
	if hasISA(isaAVX512) {
		switch typ {
		case quant.BF16:
			dotBF16x2x4AVX512(w, stride, x, xstride, n8, r)
		case quant.F16:
			dotF16x2x4AVX512(w, stride, x, xstride, n8, r)
		default:
			dotF32x2x4AVX512(w, stride, x, xstride, n8, r)
		}
		return
	}
	switch typ {
	case quant.BF16:
		dotBF16x2x4AVX2(w, stride, x, xstride, n8, r)
	case quant.F16:
		dotF16x2x4AVX2(w, stride, x, xstride, n8, r)
	default:
		dotF32x2x4AVX2(w, stride, x, xstride, n8, r)
	}
}

//go:noescape
func widenBF16AVX2(dst *float32, src *byte, n8 int)

//go:noescape
func widenF16AVX2(dst *float32, src *byte, n8 int)

//go:noescape
func widenF32AVX2(dst *float32, src *byte, n8 int)

// fastWiden reports whether widenFast exists.
const fastWiden = true

// widenFast widens the first 8·n8 f32/f16/bf16 values of src to float32.
func widenFast(typ quant.Type, dst *float32, src *byte, n8 int) {
	if hasISA(isaAVX512) {
		switch typ {
		case quant.BF16:
			widenBF16AVX512(dst, src, n8)
		case quant.F16:
			widenF16AVX512(dst, src, n8)
		default:
			widenF32AVX512(dst, src, n8)
		}
		return
	}
	switch typ {
	case quant.BF16:
		widenBF16AVX2(dst, src, n8)
	case quant.F16:
		widenF16AVX2(dst, src, n8)
	default:
		widenF32AVX2(dst, src, n8)
	}
}

func dotQ8_0x4Fast(w *byte, stride int, x *byte, nb int, r *[4]float32) {
	if hasISA(isaAVX512) {
		dotQ8_0x4AVX512(w, stride, x, nb, r)
		return
	}
	dotQ8_0x4AVX2(w, stride, x, nb, r)
}

// fastKDot reports whether kDot4Fast exists: on amd64 the K formats go
// to the packed-weight kernels (packed_amd64.s) instead.
const fastKDot = false

func kDot4Fast(tile *byte, rowStride int, x *byte, nb int, r *[4]float32) {
	panic("unreachable: fastKDot is false")
}

func dotF32x4Fast(w *float32, k int, x *float32, n8 int, r *[4]float32) {
	if hasISA(isaAVX512) {
		dotF32x4AVX512(w, k, x, n8, r)
		return
	}
	dotF32x4AVX2(w, k, x, n8, r)
}
