//go:build !amd64 || purego

package kernels

import "github.com/clefrt/clef/quant"

// The q8_0 driver hooks that have no assembly outside amd64 (shared by the
// arm64 kernels and the generic build; see q8blk_amd64.go for each one).

// f16Strided widens n fp16 values stride bytes apart in src to dst.
func f16Strided(dst []float32, src []byte, stride, n int) {
	f16StridedGeneric(dst, src, stride, n)
}

// q8ScalesPairs reports false: no kernel here reads pair-interleaved
// scales (the SMMLA kernel reads them four to a block, xd[4·b+act]).
func q8ScalesPairs() bool { return false }

// q8ScalesQuad widens the block scales of four q8_0 rows (see the amd64
// version).
func q8ScalesQuad(dst []float32, src []byte, xstride, nb int, pairs bool) {
	q8ScalesQuadGeneric(dst, src, xstride, nb, pairs)
}

// q8PrepActs returns the activations unchanged: no kernel here re-lays
// them.
func q8PrepActs(buf *[]byte, xq []byte, xRow, rows, nb int) ([]byte, int) { return xq, xRow }

// quantizeQ8_0Row quantizes one row of activations to q8_0
// (quant.QuantizeQ8_0Activations).
func quantizeQ8_0Row(dst []byte, src []float32) { quant.QuantizeQ8_0Activations(dst, src) }

// quantizeQ8_KRow quantizes one row of activations to q8_K
// (quant.QuantizeActivations).
func quantizeQ8_KRow(dst []byte, src []float32) error {
	return quant.QuantizeActivations(quant.Q8_K, dst, src)
}
