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
	x0, x1 := x[:n], x[ldx:ldx+n]
	w0, w1, w2, w3 := w[:n], w[stride:stride+n], w[2*stride:2*stride+n], w[3*stride:3*stride+n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for t := range x0 {
		u, v := x0[t], x1[t]
		a0 += u * w0[t]
		a1 += u * w1[t]
		a2 += u * w2[t]
		a3 += u * w3[t]
		b0 += v * w0[t]
		b1 += v * w1[t]
		b2 += v * w2[t]
		b3 += v * w3[t]
	}
	*r = [8]float32{a0, a1, a2, a3, b0, b1, b2, b3}
}

// axpyGeneric adds a·x[i] to y[i] for i < len(y).
func axpyGeneric(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// axpy4Generic adds p[0]·x[i] + p[1]·x[stride+i] + p[2]·x[2·stride+i] +
// p[3]·x[3·stride+i] to y[i] for i < len(y): four rows stride apart folded
// into y with one pass over it.
func axpy4Generic(y, x []float32, stride int, p *[4]float32) {
	n := len(y)
	a, b, c, d := x[:n], x[stride:stride+n], x[2*stride:2*stride+n], x[3*stride:3*stride+n]
	for i := range y {
		y[i] = y[i] + p[0]*a[i] + p[1]*b[i] + p[2]*c[i] + p[3]*d[i]
	}
}
