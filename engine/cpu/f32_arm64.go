//go:build arm64 && !purego

package cpu

//go:noescape
func dot4NEON(x, w *float32, stride, n int, acc *[32]float32)

//go:noescape
func dot2x4NEON(x *float32, ldx int, w *float32, stride, n int, acc *[32]float32)

//go:noescape
func axpyNEON(y, x *float32, n int, a float32)

// lanes4 adds the four lanes of acc[4i:4i+4].
func lanes4(acc *[32]float32, i int) float32 {
	return (acc[4*i] + acc[4*i+1]) + (acc[4*i+2] + acc[4*i+3])
}

// dot4s is dot4sGeneric on NEON: the multiple-of-8 head in assembly, the
// tail in Go.
func dot4s(x, w []float32, stride int, r *[4]float32) {
	n := len(x)
	h := n &^ 7
	if h == 0 {
		dot4sGeneric(x, w, stride, r)
		return
	}
	_ = w[3*stride+n-1]
	var acc [32]float32
	dot4NEON(&x[0], &w[0], stride, h, &acc)
	for j := 0; j < 4; j++ {
		r[j] = lanes4(&acc, 2*j) + lanes4(&acc, 2*j+1)
	}
	for i := h; i < n; i++ {
		r[0] += x[i] * w[i]
		r[1] += x[i] * w[stride+i]
		r[2] += x[i] * w[2*stride+i]
		r[3] += x[i] * w[3*stride+i]
	}
}

// dot2x4 is dot2x4Generic on NEON.
func dot2x4(x []float32, ldx int, w []float32, stride, n int, r *[8]float32) {
	h := n &^ 3
	if h == 0 {
		dot2x4Generic(x, ldx, w, stride, n, r)
		return
	}
	_ = x[ldx+n-1]
	_ = w[3*stride+n-1]
	var acc [32]float32
	dot2x4NEON(&x[0], ldx, &w[0], stride, h, &acc)
	for o := 0; o < 8; o++ {
		r[o] = lanes4(&acc, o)
	}
	for t := h; t < n; t++ {
		for i := 0; i < 2; i++ {
			xv := x[i*ldx+t]
			for j := 0; j < 4; j++ {
				r[i*4+j] += xv * w[j*stride+t]
			}
		}
	}
}

// axpy is axpyGeneric on NEON.
func axpy(y, x []float32, a float32) {
	n := len(y)
	h := n &^ 7
	if h == 0 {
		axpyGeneric(y, x, a)
		return
	}
	_ = x[n-1]
	axpyNEON(&y[0], &x[0], h, a)
	for i := h; i < n; i++ {
		y[i] += a * x[i]
	}
}

// accelerated names the float32 kernels in use.
const accelerated = "neon"

//go:noescape
func axpy4NEON(y, x *float32, stride, n int, p *[4]float32)

// axpy4 is axpy4Generic on NEON.
func axpy4(y, x []float32, stride int, p *[4]float32) {
	n := len(y)
	h := n &^ 7
	if h == 0 {
		axpy4Generic(y, x, stride, p)
		return
	}
	_ = x[3*stride+n-1]
	axpy4NEON(&y[0], &x[0], stride, h, p)
	for i := h; i < n; i++ {
		y[i] = y[i] + p[0]*x[i] + p[1]*x[stride+i] + p[2]*x[2*stride+i] + p[3]*x[3*stride+i]
	}
}

// attnRowKernels: Attention keeps its row path here, whose dot and axpy
// kernels have NEON versions (the tile kernels have only generic ones).
const attnRowKernels = true
