//go:build !(amd64 || arm64) || purego

package cpu

func dot4s(x, w []float32, stride int, r *[4]float32) { dot4sGeneric(x, w, stride, r) }

func dot2x4(x []float32, ldx int, w []float32, stride, n int, r *[8]float32) {
	dot2x4Generic(x, ldx, w, stride, n, r)
}

func axpy(y, x []float32, a float32) { axpyGeneric(y, x, a) }

// accelerated names the float32 kernels in use.
const accelerated = "generic"

func axpy4(y, x []float32, stride int, p *[4]float32) { axpy4Generic(y, x, stride, p) }

// attnRowKernels: the row path of Attention has no vector kernels here.
const attnRowKernels = false
