//go:build !purego

package kernels

import (
	"github.com/clefrt/clef/quant"
	"golang.org/x/sys/cpu"
)

// fast selects the NEON kernels built on the ARMv8.2 dot product SDOT
// (q8_0_arm64.s, kdot_arm64.s); every Apple Silicon core has it.
var fast = cpu.ARM64.HasASIMDDP

// fastF32 reports whether dotF32x4 has a fast version.
const fastF32 = false

// accelerated names the kernel set in use.
var accelerated = map[bool]string{true: "neon-sdot", false: "generic"}[fast]

//go:noescape
func dotQ8_0x4SDOT(w *byte, stride int, x *byte, nb int, r *[16]float32)

//go:noescape
func kDot4SDOT(tile *byte, rowStride int, x *byte, nb int, r *[16]float32)

// sum4 reduces the four partial sums per row the NEON kernels return.
func sum4(p *[16]float32, r *[4]float32) {
	for i := range r {
		r[i] = (p[4*i] + p[4*i+1]) + (p[4*i+2] + p[4*i+3])
	}
}

func dotQ8_0x4Fast(w *byte, stride int, x *byte, nb int, r *[4]float32) {
	var p [16]float32
	dotQ8_0x4SDOT(w, stride, x, nb, &p)
	sum4(&p, r)
}

// fastKDot reports whether kDot4Fast exists.
const fastKDot = true

func kDot4Fast(tile *byte, rowStride int, x *byte, nb int, r *[4]float32) {
	var p [16]float32
	kDot4SDOT(tile, rowStride, x, nb, &p)
	sum4(&p, r)
}

// fastHalf reports whether dotHalfx4Fast exists.
const fastHalf = false

func dotHalfx4Fast(bf16 bool, w *byte, stride int, x *float32, n8 int, r *[4]float32) {
	panic("unreachable: fastHalf is false")
}

//go:noescape
func dotF32x2x4NEON(w *byte, stride int, x *float32, xstride int, n8 int, r *[32]float32)

//go:noescape
func dotBF16x2x4NEON(w *byte, stride int, x *float32, xstride int, n8 int, r *[32]float32)

//go:noescape
func dotF16x2x4NEON(w *byte, stride int, x *float32, xstride int, n8 int, r *[32]float32)

// fastFloat2x4 reports whether dotFloat2x4Fast exists.
const fastFloat2x4 = true

// dotFloat2x4Fast dots the first 8·n8 values of two f32/f16/bf16 rows
// (stride bytes apart) with four float32 activation rows (xstride bytes
// apart) into r[4·row+act].
func dotFloat2x4Fast(typ quant.Type, w *byte, stride int, x *float32, xstride, n8 int, r *[8]float32) {
	var p [32]float32
	switch typ {
	case quant.BF16:
		dotBF16x2x4NEON(w, stride, x, xstride, n8, &p)
	case quant.F16:
		dotF16x2x4NEON(w, stride, x, xstride, n8, &p)
	default:
		dotF32x2x4NEON(w, stride, x, xstride, n8, &p)
	}
	for i := range r {
		r[i] = (p[4*i] + p[4*i+1]) + (p[4*i+2] + p[4*i+3])
	}
}

// fastWiden reports whether widenFast exists.
const fastWiden = false

func widenFast(typ quant.Type, dst *float32, src *byte, n8 int) {
	panic("unreachable: fastWiden is false")
}

func dotF32x4Fast(w *float32, k int, x *float32, n8 int, r *[4]float32) {
	panic("unreachable: fastF32 is false")
}
