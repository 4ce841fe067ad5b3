package cpu

// dot4sGeneric sets r[j] = Σ_i x[i]·w[j*stride+i] for j < 4, i < len(x):
// four dot products of x with rows stride apart, each x value loaded once.
func dot4sGeneric(x, w []float32, stride int, r *[4]float32) {
	n := len(x)
	a, b, c, d := w[:n], w[stride:stride+n], w[2*stride:2*stride+n], w[3*stride:3*stride+n]
	var s0, s1, s2, s3 float32
	for i, xv := range x {
		s0 += xv * a[i]
		s1 += xv * b[i]
		s2 += xv * c[i]
		s3 += xv * d[i]
	}
	r[0], r[1], r[2], r[3] = s0, s1, s2, s3
}

// dot2x4Generic sets r[i*4+j] = Σ_t x[i*ldx+t]·w[j*stride+t] for i < 2,
// j < 4, t < n: the 2×4 register tile of the float32 GEMM.
func dot2x4Generic(x []float32, ldx int, w []float32, stride, n int, r *[8]float32) {
	var acc [8]float32
	x0, x1 := x[:n], x[ldx:ldx+n]
	for j := 0; j < 4; j++ {
		wr := w[j*stride : j*stride+n]
		var s0, s1 float32
		for t, wv := range wr {
			s0 += x0[t] * wv
			s1 += x1[t] * wv
		}
		acc[j], acc[4+j] = s0, s1
	}
	*r = acc
}

// axpyGeneric adds a·x[i] to y[i] for i < len(y).
func axpyGeneric(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}
