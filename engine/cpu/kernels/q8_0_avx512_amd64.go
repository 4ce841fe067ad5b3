//go:build !purego

package kernels

// The AVX-512 VNNI q8_0 kernels (q8_0_avx512_amd64.s), run when
// hasISA(isaAVX512); their generic twins are dotQ8_0x4Generic and
// dotQ8_0x2x4Generic, the AVX2 versions dotQ8_0x4AVX2 and dotQ8_0x2x4AVX2.

//go:noescape
func dotQ8_0x4AVX512(w *byte, stride int, x *byte, nb int, r *[4]float32)

//go:noescape
func dotQ8_0x2x4AVX512(w *byte, stride int, wd *float32, x *byte, xstride int, xd *float32, nb, np, nq int, out *float32, ldo int)

//go:noescape
func q8ActsAVX512(dst *byte, src *byte, xstride int, nb, rows int)
