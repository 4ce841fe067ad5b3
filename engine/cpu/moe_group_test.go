package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// TestMoEGroupsAgree checks that every grouping of the experts (one group,
// groups of a few experts, one expert at a time with split GEMMs) and every
// thread count give bit-identical sums, for weights whose gate shares one
// quantization of x (Q8_0, Q4_K) and for mixed gate types that do not.
func TestMoEGroupsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const L, E, k, hidden, ffn = 53, 11, 4, 256, 96
	bind := func(b *Backend, typ quant.Type, rows, cols int) *backend.Tensor {
		f, err := quant.FormatOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(rng.NormFloat64() / math.Sqrt(float64(cols)))
		}
		rb, _ := quant.RowBytes(typ, cols)
		data := make([]byte, rows*rb)
		for r := 0; r < rows; r++ {
			f.Quantize(data[r*rb:(r+1)*rb], v[r*cols:(r+1)*cols], nil)
		}
		w, err := b.Weight(&weights.Tensor{Name: "w", Type: typ, Shape: []int{rows, cols}, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, gates := range [][]quant.Type{{quant.Q8_0}, {quant.Q4_K}, {quant.Q8_0, quant.Q4_K}} {
		b1 := New(backend.Options{Threads: 1})
		experts := make([]backend.Expert, E)
		for e := range experts {
			g := gates[e%len(gates)]
			experts[e] = backend.Expert{Gate: bind(b1, g, ffn, hidden), Up: bind(b1, g, ffn, hidden), Down: bind(b1, quant.Q8_0, hidden, ffn)}
		}
		x := make([]float32, L*hidden)
		logits := make([]float32, L*E)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		var want []float32
		for _, threads := range []int{1, 2, 3} {
			b := New(backend.Options{Threads: threads})
			tx, _ := b.Upload(x, L, hidden)
			tl, _ := b.Upload(logits, L, E)
			ids, ws, err := b.Route(tl, k, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, rows := range []int{1 << 20, 3 * L, 40, 0} {
				saved := moeBufferFloats
				moeBufferFloats = rows * hidden
				out, err := b.MoE(tx, ids, ws, experts)
				moeBufferFloats = saved
				if err != nil {
					t.Fatal(err)
				}
				got, _ := b.Read(context.Background(), out)
				if want == nil {
					want = got
					continue
				}
				for i := range want {
					if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
						t.Fatalf("gates %v threads=%d buffer rows %d: value %d is %v, want %v", gates, threads, rows, i, got[i], want[i])
					}
				}
			}
		}
	}
}
