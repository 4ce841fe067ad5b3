//go:build !purego

package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/quant"
)

// q8Ref is the float64 dot product of two q8_0 rows and Σ|w·x|.
func q8Ref(w, x []byte, nb int) (ref, abs float64) {
	for blk := 0; blk < nb; blk++ {
		dw := float64(quant.Float16ToFloat32(binary.LittleEndian.Uint16(w[34*blk:])))
		dx := float64(quant.Float16ToFloat32(binary.LittleEndian.Uint16(x[34*blk:])))
		for j := 2; j < 34; j++ {
			p := dw * dx * float64(int8(w[34*blk+j])) * float64(int8(x[34*blk+j]))
			ref += p
			abs += math.Abs(p)
		}
	}
	return ref, abs
}

// TestQ8_0KernelsExtremeCodes drives the q8_0 kernels directly with the
// extreme codes, odd and even block counts, and NaN sentinels around the
// results, at every kernel level: weight code -128 against activation
// codes ±127 everywhere, and activation code -128 too where the kernel
// takes it (the generic and AVX-512 ones; the GEMM table's activations
// come from the quantizer, which never writes -128, and the AVX2 kernels
// sign the activations by the weights, which -128 would overflow).
func TestQ8_0KernelsExtremeCodes(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 1))
		xMin128 := level != isaAVX2
		for _, nb := range []int{1, 2, 3, 4, 5, 9, 64} {
			w := q8Blocks(rng, 4, nb, true)
			x := q8Blocks(rng, 4, nb, xMin128)
			row := 34 * nb
			check := func(name string, got float32, wr, xr int) {
				t.Helper()
				ref, abs := q8Ref(w[wr*row:], x[xr*row:], nb)
				if !(math.Abs(float64(got)-ref) <= 1e-6*abs) {
					t.Fatalf("%s nb=%d w%d·x%d: %g, want %g (Σ|w·x| %g)", name, nb, wr, xr, got, ref, abs)
				}
			}
			for xr := 0; xr < 4; xr++ {
				var r [4]float32
				dotQ8_0x4(w, row, x[xr*row:(xr+1)*row], nb, &r)
				for j := range r {
					check("4x1", r[j], j, xr)
				}
			}
			if !hasQ8_0x2x4() {
				continue
			}
			xd := make([]float32, 4*nb+2)
			for i := range xd {
				xd[i] = float32(math.NaN())
			}
			for i := 0; i < 4*nb; i++ {
				xd[i] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(x[34*i:]))
			}
			for w0 := 0; w0 < 4; w0 += 2 {
				var r [10]float32
				for i := range r {
					r[i] = float32(math.NaN())
				}
				dotQ8_0x2x4(w[w0*row:], row, x, row, xd[:4*nb], nb, (*[8]float32)(r[1:9]))
				for i := 0; i < 8; i++ {
					check("2x4", r[1+i], w0+i/4, i%4)
				}
				if !math.IsNaN(float64(r[0])) || !math.IsNaN(float64(r[9])) {
					t.Fatalf("2x4 nb=%d: wrote outside its 8 results", nb)
				}
			}
		}
	})
}
