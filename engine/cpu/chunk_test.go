package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// TestMatMulChunksThreadInvariant checks that MatMul gives the same bits
// with 1, 2 and 3 workers on weights large enough to be cut into several
// row chunks, with a partial last row tile (n = 301), for float and block
// weight types, 8-bit and precise activations.
func TestMatMulChunksThreadInvariant(t *testing.T) {
	const n, k, m = 301, 512, 5
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, n*k)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 0.05)
	}
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, typ := range []quant.Type{quant.BF16, quant.F16, quant.F32, quant.Q8_0, quant.Q4_K} {
		f, err := quant.FormatOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := quant.RowBytes(typ, k)
		data := make([]byte, n*rb)
		for r := 0; r < n; r++ {
			f.Quantize(data[r*rb:(r+1)*rb], src[r*k:(r+1)*k], nil)
		}
		wt := &weights.Tensor{Name: "w", Type: typ, Shape: []int{n, k}, Data: data}
		for _, precise := range []bool{false, true} {
			var ref []float32
			for _, threads := range []int{1, 2, 3} {
				b := New(backend.Options{Threads: threads, Precise: precise})
				if threads > 1 && b.rowChunk(n, m*k) >= n {
					t.Fatalf("%v: %d threads: one chunk of %d rows, the test does not split", typ, threads, n)
				}
				w, err := b.Weight(wt)
				if err != nil {
					t.Fatal(err)
				}
				xt, _ := b.Upload(x, m, k)
				out, err := b.MatMul(xt, w)
				if err != nil {
					t.Fatal(err)
				}
				got := out.Handle.([]float32)
				if ref == nil {
					ref = got
					continue
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("%v precise=%v: %d threads: out[%d] = %g, 1 thread %g", typ, precise, threads, i, got[i], ref[i])
					}
				}
			}
		}
	}
}
