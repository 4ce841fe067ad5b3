//go:build !amd64 || purego

package kernels

// hasQ8_0x2x4 reports false: there is no fast two-by-four q8_0 kernel here.
func hasQ8_0x2x4() bool { return false }

func dotQ8_0x2x4Fast(w []byte, stride int, x []byte, xstride int, xd []float32, nb int, r *[8]float32) {
	panic("unreachable: hasQ8_0x2x4 is false")
}

// f16Strided widens n fp16 values stride bytes apart in src to dst.
func f16Strided(dst []float32, src []byte, stride, n int) {
	f16StridedGeneric(dst, src, stride, n)
}
