//go:build !purego

package kernels

import (
	"github.com/clefrt/clef/quant"
	"golang.org/x/sys/cpu"
)

const (
	// isaGeneric runs the pure-Go twins.
	isaGeneric isaLevel = iota
	// isaNEON needs the ARMv8.2 dot product SDOT (q8_0_arm64.s,
	// kdot_arm64.s; float_arm64.s needs only NEON but runs at this level
	// too); every Apple Silicon core has it.
	isaNEON
	// isaI8MM adds the int8 matrix multiply SMMLA (i8mm_arm64.s): Apple
	// M2 and later, Graviton 3, Neoverse N2/V1.
	isaI8MM
)

var isaNames = [...]string{isaGeneric: "generic", isaNEON: "neon", isaI8MM: "i8mm"}

// detectISA returns the highest level this CPU (and OS) runs. x/sys/cpu
// reads the HWCAP/HWCAP2 bits on Linux (asimddp; i8mm is HWCAP2 bit 13)
// and the sysctls hw.optional.arm.FEAT_DotProd / FEAT_I8MM on darwin,
// without cgo.
func detectISA() isaLevel {
	a := &cpu.ARM64
	switch {
	case !a.HasASIMDDP:
		return isaGeneric
	case !a.HasI8MM:
		return isaNEON
	}
	return isaI8MM
}

var isaNeeds = [...]string{isaGeneric: "nothing", isaNEON: "the dot product (SDOT)", isaI8MM: "the dot product (SDOT) and I8MM (SMMLA)"}

// isaFast is the lowest level with fast kernels (isa.go's fast).
const isaFast = isaNEON

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

// fastF32 reports whether dotF32x4 has a fast version.
const fastF32 = false

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
