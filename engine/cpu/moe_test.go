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

// TestMoEPathsAgree checks that the two MoE schedules (whole experts per
// worker, and experts in turn with split matmuls) give bit-identical sums.
func TestMoEPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const L, E, k, hidden, ffn = 37, 8, 3, 64, 96
	for _, typ := range []quant.Type{quant.F32, quant.Q8_0} {
		for _, threads := range []int{1, 3} {
			b := New(backend.Options{Threads: threads})
			bind := func(rows, cols int) *weights.Tensor {
				f, _ := quant.FormatOf(typ)
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
			gates, ups, downs := make([]*weights.Tensor, E), make([]*weights.Tensor, E), make([]*weights.Tensor, E)
			for e := 0; e < E; e++ {
				gates[e], ups[e], downs[e] = bind(ffn, hidden), bind(ffn, hidden), bind(hidden, ffn)
			}
			experts := backend.Experts{Gate: stackExperts(t, b, gates), Up: stackExperts(t, b, ups), Down: stackExperts(t, b, downs)}
			x := make([]float32, L*hidden)
			logits := make([]float32, L*E)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for i := range logits {
				logits[i] = float32(rng.NormFloat64())
			}
			tx, _ := b.Upload(x, L, hidden)
			tl, _ := b.Upload(logits, L, E)
			ids, ws, err := b.Route(tl, k, true)
			if err != nil {
				t.Fatal(err)
			}
			run := func(buf int) []float32 {
				saved := moeBufferFloats
				defer func() { moeBufferFloats = saved }()
				moeBufferFloats = buf
				out, err := b.MoE(tx, ids, ws, experts)
				if err != nil {
					t.Fatal(err)
				}
				v, _ := b.Read(context.Background(), out)
				return v
			}
			a, c := run(1<<30), run(0)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(c[i]) {
					t.Fatalf("%v threads=%d: value %d differs: %v vs %v", typ, threads, i, a[i], c[i])
				}
			}
		}
	}
}

// stackExperts binds per-expert matrices as one stacked weight [E, out, in],
// in the parted form of the bf16 release.
func stackExperts(t testing.TB, b backend.Backend, ts []*weights.Tensor) *backend.Tensor {
	t.Helper()
	st, err := weights.Stack("experts", ts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Weight(st)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
