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
// thread count give bit-identical sums, for weights whose gate and up share
// one quantization of x (Q8_0, Q4_K) and for a gate and up of types that do
// not.
func TestMoEGroupsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const L, E, k, hidden, ffn = 53, 11, 4, 256, 96
	bind := func(typ quant.Type, rows, cols int) *weights.Tensor {
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
		return &weights.Tensor{Name: "w", Type: typ, Shape: []int{rows, cols}, Data: data}
	}
	for _, gates := range [][]quant.Type{{quant.Q8_0, quant.Q8_0}, {quant.Q4_K, quant.Q4_K}, {quant.Q8_0, quant.Q4_K}} {
		b1 := New(backend.Options{Threads: 1})
		gs, us, ds := make([]*weights.Tensor, E), make([]*weights.Tensor, E), make([]*weights.Tensor, E)
		for e := 0; e < E; e++ {
			gs[e], us[e], ds[e] = bind(gates[0], ffn, hidden), bind(gates[1], ffn, hidden), bind(quant.Q8_0, hidden, ffn)
		}
		experts := backend.Experts{Gate: stackExperts(t, b1, gs), Up: stackExperts(t, b1, us), Down: stackExperts(t, b1, ds)}
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
