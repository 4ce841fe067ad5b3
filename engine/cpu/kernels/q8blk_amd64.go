//go:build !purego

package kernels

//go:noescape
func dotQ8_0x2x4AVX2(w *byte, stride int, x *byte, xstride int, xd *float32, nb int, r *[8]float32)

// hasQ8_0x2x4 reports whether dotQ8_0x2x4 has a fast kernel.
func hasQ8_0x2x4() bool { return fast }

func dotQ8_0x2x4Fast(w []byte, stride int, x []byte, xstride int, xd []float32, nb int, r *[8]float32) {
	if hasISA(isaAVX512) {
		dotQ8_0x2x4AVX512(&w[0], stride, &x[0], xstride, &xd[0], nb, r)
		return
	}
	dotQ8_0x2x4AVX2(&w[0], stride, &x[0], xstride, &xd[0], nb, r)
}

//go:noescape
func f16StridedAVX2(dst *float32, src *byte, stride int, n int)

// f16Strided widens n fp16 values stride bytes apart in src to dst.
func f16Strided(dst []float32, src []byte, stride, n int) {
	if n == 0 {
		return
	}
	_ = dst[n-1]
	_ = src[(n-1)*stride+1]
	if !fast {
		f16StridedGeneric(dst, src, stride, n)
		return
	}
	f16StridedAVX2(&dst[0], &src[0], stride, n)
}
