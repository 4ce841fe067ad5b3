package cpu

import (
	"sync"

	"github.com/clefrt/clef/engine/cpu/kernels"
)

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
	if err := b.parallel(m, 8, func(lo, hi int) {
		if err := kernels.QuantizeActivations(w.t.Type, x[lo*k:hi*k], hi-lo, k, xq[lo*rb:hi*rb]); err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	}); err != nil {
		return nil, err
	}
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
	return b.parallelRows(n, m*w.cols, func(lo, hi int) error {
		return gemmQ(out, xq, m, n, w, lo, hi)
	})
}

// kernelRowTile is the weight-row tile of the kernels' GEMMs: a GEMM on
// rows split at multiples of it gives the same bits as one call.
const kernelRowTile = 4

// chunksPerWorker is how many row chunks each worker gets on average:
// more than one so a worker slowed by the rest of the machine does not
// hold up the others, few so each GEMM call is long.
const chunksPerWorker = 4

// minChunkWork is the least work (weight rows × activation values) worth
// a chunk of its own.
const minChunkWork = 1 << 18

// maxChunkWork bounds a chunk's work where the row tile allows: a
// cancelled decision (Interrupt) is seen between chunks, so a chunk is
// what may still run after it (2^27 multiply-adds, tens of milliseconds
// on one core). A GEMM over a whole long prompt (the keys and values of
// 64K rows) would otherwise run a second or more per chunk.
const maxChunkWork = 1 << 27

// rowChunk returns the weight rows per chunk for n rows against work
// activation values per row (m·k): n / (workers × chunksPerWorker),
// rounded up to the kernels' row tile and to at least minChunkWork (all n
// with one worker), and at most maxChunkWork where a row tile is less.
func (b *Backend) rowChunk(n, work int) int {
	c := max(n, 1)
	if b.threads > 1 {
		c = max(n/(b.threads*chunksPerWorker), (minChunkWork+work-1)/max(1, work), 1)
	}
	c = min(c, max(maxChunkWork/max(1, work), kernelRowTile))
	return (c + kernelRowTile - 1) / kernelRowTile * kernelRowTile
}

// parallelRows splits n weight rows into chunks of rowChunk rows that the
// workers pull in turn, and returns the first error of fn.
func (b *Backend) parallelRows(n, work int, fn func(lo, hi int) error) error {
	c := b.rowChunk(n, work)
	chunks := (n + c - 1) / c
	var first error
	var mu sync.Mutex
	if err := b.parallelDynamic(chunks, func(_, i int) {
		if err := fn(i*c, min(n, (i+1)*c)); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}); err != nil {
		return err
	}
	return first
}
