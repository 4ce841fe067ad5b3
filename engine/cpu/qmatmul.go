package cpu

import (
	"sync"

	"github.com/clefrt/clef/engine/cpu/kernels"
)

// qRowsPerChunk is the granularity in weight rows at which the quantized
// GEMM is split over workers (a multiple of the kernels' 4-row tiles).
const qRowsPerChunk = 16

// quantized reports whether a matmul with w runs on 8-bit activations.
func (b *Backend) quantized(w *weight) bool { return w.dec.q8 && !b.precise }

// quantizeActs quantizes x [m, k] to the activation format of w's type,
// rows split over the workers when parallel is set.
func (b *Backend) quantizeActs(w *weight, x []float32, m, k int, parallel bool) ([]byte, error) {
	rb, err := kernels.ActivationRowBytes(w.t.Type, k)
	if err != nil {
		return nil, err
	}
	xq := make([]byte, m*rb)
	if !parallel {
		return xq, kernels.QuantizeActivations(w.t.Type, x, m, k, xq)
	}
	var first error
	var mu sync.Mutex
	b.parallel(m, 8, func(lo, hi int) {
		if err := kernels.QuantizeActivations(w.t.Type, x[lo*k:hi*k], hi-lo, k, xq[lo*rb:hi*rb]); err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	})
	return xq, first
}

// gemmQ fills out [m, n] with the quantized activations xq times the rows
// [lo, hi) of w, writing columns lo..hi-1.
func gemmQ(out []float32, xq []byte, m, n int, w *weight, lo, hi int) error {
	rb := w.dec.rowBytes
	return kernels.GEMM(w.t.Type, w.t.Data[lo*rb:hi*rb], hi-lo, w.cols, xq, m, out[lo:], n)
}

// matmulQ computes out [m, n] = x Wᵀ on 8-bit activations, the weight rows
// split over the workers.
func (b *Backend) matmulQ(out, x []float32, m, k, n int, w *weight) error {
	xq, err := b.quantizeActs(w, x, m, k, true)
	if err != nil {
		return err
	}
	return b.gemmQParallel(out, xq, m, n, w)
}

// gemmQParallel computes out [m, n] from quantized activations xq, the
// weight rows split over the workers.
func (b *Backend) gemmQParallel(out []float32, xq []byte, m, n int, w *weight) error {
	k := w.cols
	chunks := (n + qRowsPerChunk - 1) / qRowsPerChunk
	var first error
	var mu sync.Mutex
	b.parallel(chunks, max(1, 1<<14/max(1, m*k)), func(clo, chi int) {
		if err := gemmQ(out, xq, m, n, w, clo*qRowsPerChunk, min(n, chi*qRowsPerChunk)); err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	})
	return first
}
