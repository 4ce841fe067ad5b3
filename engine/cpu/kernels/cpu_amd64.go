//go:build !purego

package kernels

import "golang.org/x/sys/cpu"

// fast selects the AVX2+FMA+F16C kernels (q8_0_amd64.s, kdot_amd64.s,
// dotf32_amd64.s).
var fast = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// fastF32 reports whether dotF32x4 has a fast version.
const fastF32 = true

// accelerated names the kernel set in use.
var accelerated = map[bool]string{true: "avx2", false: "generic"}[fast]

//go:noescape
func dotQ8_0x4AVX2(w *byte, stride int, x *byte, nb int, r *[4]float32)

//go:noescape
func kDot4AVX2(tile *byte, rowStride int, x *byte, nb int, r *[4]float32)

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
	if bf16 {
		dotBF16x4AVX2(w, stride, x, n8, r)
	} else {
		dotF16x4AVX2(w, stride, x, n8, r)
	}
}

//go:noescape
func q4kDot4AVX2(w *byte, stride int, recs *byte, nb int, x *byte, r *[4]float32)

// fastQ4K reports whether q4kDot4Fast and q6kDot4Fast exist.
const fastQ4K = true

func q4kDot4Fast(w *byte, stride int, recs *byte, nb int, x *byte, r *[4]float32) {
	q4kDot4AVX2(w, stride, recs, nb, x, r)
}

//go:noescape
func q6kDot4AVX2(w *byte, stride int, recs *byte, nb int, x *byte, r *[4]float32)

func q6kDot4Fast(w *byte, stride int, recs *byte, nb int, x *byte, r *[4]float32) {
	q6kDot4AVX2(w, stride, recs, nb, x, r)
}

func dotQ8_0x4Fast(w *byte, stride int, x *byte, nb int, r *[4]float32) {
	dotQ8_0x4AVX2(w, stride, x, nb, r)
}

func kDot4Fast(tile *byte, rowStride int, x *byte, nb int, r *[4]float32) {
	kDot4AVX2(tile, rowStride, x, nb, r)
}

func dotF32x4Fast(w *float32, k int, x *float32, n8 int, r *[4]float32) {
	dotF32x4AVX2(w, k, x, n8, r)
}
