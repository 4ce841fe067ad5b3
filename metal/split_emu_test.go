//go:build mslemu

package metal

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
)

// TestSplitLaunchesEmulated: the launches ops split to keep command
// buffers short (attention in query chunks, matmuls and experts in row
// chunks, cost.go) give the bits of the whole launches. A backend whose
// split threshold is ~0 splits every op as far as it goes (a threadgroup
// of queries, 32 rows) at the emulator's small shapes.
func TestSplitLaunchesEmulated(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates the kernels")
	}
	whole := emulated(t)
	split, err := NewEmulated()
	if err != nil {
		t.Fatal(err)
	}
	defer split.Close()
	split.opSeconds = 0
	rng := rand.New(rand.NewSource(3))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	const L, Lk, heads, kvHeads, d, hidden, E, k, ffn = 80, 100, 4, 2, 64, 256, 4, 2, 256
	q, kk, v := randn(L*heads*d), randn(Lk*kvHeads*d), randn(Lk*kvHeads*d)
	x, logits := randn(L*hidden), randn(L*E)
	rb, err := quant.RowBytes(quant.Q8_0, hidden)
	if err != nil {
		t.Fatal(err)
	}
	wq := make([]byte, E*ffn*rb) // E expert matrices [ffn, hidden]
	for e := 0; e < E; e++ {
		if err := quant.Quantize(quant.Q8_0, wq[e*ffn*rb:(e+1)*ffn*rb], randn(ffn*hidden), nil); err != nil {
			t.Fatal(err)
		}
	}
	run := func(b *Backend) map[string][]float32 {
		up := func(v []float32, r, c int) *backend.Tensor {
			x, err := b.Upload(v, r, c)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
		out := map[string][]float32{}
		read := func(name string, y *backend.Tensor, err error) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if out[name], err = b.Read(context.Background(), y); err != nil {
				t.Fatal(err)
			}
		}
		tq, tk, tv := up(q, L, heads*d), up(kk, Lk, kvHeads*d), up(v, Lk, kvHeads*d)
		for _, o := range []struct {
			name string
			o    backend.AttentionOptions
		}{
			{"causal", backend.AttentionOptions{Heads: heads, KVHeads: kvHeads, Scale: 0.125, Causal: true}},
			{"bidirectional", backend.AttentionOptions{Heads: heads, KVHeads: kvHeads, Scale: 0.125}},
			{"segments", backend.AttentionOptions{Heads: heads, KVHeads: kvHeads, Scale: 0.125, Segments: []int{0, 30, 100}}},
		} {
			kt, vt := tk, tv
			if o.o.Segments != nil { // segments are over the queries' own rows
				kt, _ = b.Rows(tk, 0, L)
				vt, _ = b.Rows(tv, 0, L)
				o.o.Segments = []int{0, 30, L}
			}
			y, err := b.Attention(tq, kt, vt, o.o)
			read("attention "+o.name, y, err)
		}
		w, err := b.Weight(&weights.Tensor{Name: "w", Type: quant.Q8_0, Shape: []int{ffn, hidden}, Data: wq[:len(wq)/E]})
		if err != nil {
			t.Fatal(err)
		}
		tx := up(x, L, hidden)
		y, err := b.MatMul(tx, w)
		read("matmul", y, err)
		st, err := b.Weight(&weights.Tensor{Name: "experts", Type: quant.Q8_0, Shape: []int{E, ffn, hidden}, Data: wq})
		if err != nil {
			t.Fatal(err)
		}
		ids, ws, err := b.Route(up(logits, L, E), k, true)
		if err != nil {
			t.Fatal(err)
		}
		y, err = b.MoE(tx, ids, ws, backend.Experts{Gate: st, Up: st, Down: st})
		read("moe", y, err)
		return out
	}
	a, s := run(whole), run(split)
	for name, av := range a {
		sv := s[name]
		nonzero := 0
		for i := range av {
			if math.Float32bits(av[i]) != math.Float32bits(sv[i]) {
				t.Fatalf("%s element %d: whole %g, split %g", name, i, av[i], sv[i])
			}
			if av[i] != 0 && !math.IsNaN(float64(av[i])) {
				nonzero++
			}
		}
		if nonzero < len(av)/2 {
			t.Errorf("%s: only %d of %d values finite and nonzero", name, nonzero, len(av))
		}
	}
	st := split.Stats().Kernels
	if st["flash_attn_mma_d64"].Dispatches < 3*3 || st["mul_mm_q8_0"].Dispatches < 3 || st["moe_map"].Dispatches < 3 {
		t.Errorf("the split backend did not split: %+v", st)
	}
}
