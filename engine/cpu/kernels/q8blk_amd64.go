//go:build !purego

package kernels

//go:noescape
func dotQ8_0x2x4AVX2(w *byte, stride int, x *byte, xstride int, xd *float32, nb int, r *[8]float32)

// hasQ8_0x2x4 reports whether dotQ8_0x2x4 has a fast kernel.
func hasQ8_0x2x4() bool { return fast }

func dotQ8_0x2x4Fast(w []byte, stride int, x []byte, xstride int, xd []float32, nb int, r *[8]float32) {
	dotQ8_0x2x4AVX2(&w[0], stride, &x[0], xstride, &xd[0], nb, r)
}
