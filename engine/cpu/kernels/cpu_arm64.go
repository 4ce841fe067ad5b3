//go:build !purego

package kernels

import "golang.org/x/sys/cpu"

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

// fastQ4K reports whether q4kDot4Fast and q6kDot4Fast exist.
const fastQ4K = false

func q4kDot4Fast(w *byte, stride int, recs *byte, nb int, x *byte, r *[4]float32) {
	panic("unreachable: fastQ4K is false")
}

func q6kDot4Fast(w *byte, stride int, recs *byte, nb int, x *byte, r *[4]float32) {
	panic("unreachable: fastQ4K is false")
}

func dotF32x4Fast(w *float32, k int, x *float32, n8 int, r *[4]float32) {
	panic("unreachable: fastF32 is false")
}
