//go:build amd64 && !purego

package cpu

import (
	"github.com/clefrt/clef/engine/cpu/kernels"
	"golang.org/x/sys/cpu"
)

// useAVX2 selects the AVX2+FMA float32 kernels, unless the kernels
// package runs its generic set (CLEF_CPU_ISA=generic forces it).
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && kernels.Accelerated() != "generic"

//go:noescape
func dot4AVX2(x, w *float32, stride, n int, r *[4]float32)

//go:noescape
func dot2x4AVX2(x *float32, ldx int, w *float32, stride, n int, r *[8]float32)

//go:noescape
func axpyAVX2(y, x *float32, n int, a float32)

// dot4s is dot4sGeneric on AVX2: the multiple-of-16 head in assembly, the
// tail in Go.
func dot4s(x, w []float32, stride int, r *[4]float32) {
	n := len(x)
	h := n &^ 15
	if !useAVX2 || h == 0 {
		dot4sGeneric(x, w, stride, r)
		return
	}
	_ = w[3*stride+n-1]
	dot4AVX2(&x[0], &w[0], stride, h, r)
	for i := h; i < n; i++ {
		r[0] += x[i] * w[i]
		r[1] += x[i] * w[stride+i]
		r[2] += x[i] * w[2*stride+i]
		r[3] += x[i] * w[3*stride+i]
	}
}

// dot2x4 is dot2x4Generic on AVX2.
func dot2x4(x []float32, ldx int, w []float32, stride, n int, r *[8]float32) {
	h := n &^ 7
	if !useAVX2 || h == 0 {
		dot2x4Generic(x, ldx, w, stride, n, r)
		return
	}
	_ = x[ldx+n-1]
	_ = w[3*stride+n-1]
	dot2x4AVX2(&x[0], ldx, &w[0], stride, h, r)
	for t := h; t < n; t++ {
		for i := 0; i < 2; i++ {
			xv := x[i*ldx+t]
			for j := 0; j < 4; j++ {
				r[i*4+j] += xv * w[j*stride+t]
			}
		}
	}
}

// axpy is axpyGeneric on AVX2.
func axpy(y, x []float32, a float32) {
	n := len(y)
	h := n &^ 7
	if !useAVX2 || h == 0 {
		axpyGeneric(y, x, a)
		return
	}
	_ = x[n-1]
	axpyAVX2(&y[0], &x[0], h, a)
	for i := h; i < n; i++ {
		y[i] += a * x[i]
	}
}

// accelerated names the float32 kernels in use.
var accelerated = map[bool]string{true: "avx2", false: "generic"}[useAVX2]

//go:noescape
func axpy4AVX2(y, x *float32, stride, n int, p *[4]float32)

// axpy4 is axpy4Generic on AVX2.
func axpy4(y, x []float32, stride int, p *[4]float32) {
	n := len(y)
	h := n &^ 7
	if !useAVX2 || h == 0 {
		axpy4Generic(y, x, stride, p)
		return
	}
	_ = x[3*stride+n-1]
	axpy4AVX2(&y[0], &x[0], stride, h, p)
	for i := h; i < n; i++ {
		y[i] = y[i] + p[0]*x[i] + p[1]*x[stride+i] + p[2]*x[2*stride+i] + p[3]*x[3*stride+i]
	}
}
