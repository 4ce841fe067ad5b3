package cpu

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// randomQ8_0 returns rows x cols of Q8_0 weights with random quants and
// scales near 1/(127·sqrt(cols)), written block by block (no float pass).
func randomQ8_0(rng *rand.Rand, rows, cols int) *weights.Tensor {
	nb := rows * cols / 32
	data := make([]byte, nb*34)
	for b := 0; b < nb; b++ {
		blk := data[b*34 : (b+1)*34]
		s := quant.Float32ToFloat16(float32(1/(127*math.Sqrt(float64(cols)))) * float32(0.5+rng.Float64()))
		blk[0], blk[1] = byte(s), byte(s>>8)
		for i := 2; i < 34; i++ {
			blk[i] = byte(rng.IntN(256))
		}
	}
	return &weights.Tensor{Name: "w", Type: quant.Q8_0, Shape: []int{rows, cols}, Data: data}
}

// moeBench is one MoE layer of the thinker's shapes (hidden 2048, 128
// experts of ffn 768, top-8) on Q8_0 weights, with L rows routed by
// random logits.
type moeBench struct {
	experts backend.Experts
	x, ids  *backend.Tensor
	ws      *backend.Tensor
}

func newMoEBench(b *testing.B, be *Backend, L int) *moeBench {
	rng := rand.New(rand.NewPCG(3, 4))
	const E, k, hidden, ffn = 128, 8, 2048, 768
	gs, us, ds := make([]*weights.Tensor, E), make([]*weights.Tensor, E), make([]*weights.Tensor, E)
	for e := range gs {
		gs[e], us[e], ds[e] = randomQ8_0(rng, ffn, hidden), randomQ8_0(rng, ffn, hidden), randomQ8_0(rng, hidden, ffn)
	}
	m := &moeBench{experts: backend.Experts{Gate: stackExperts(b, be, gs), Up: stackExperts(b, be, us), Down: stackExperts(b, be, ds)}}
	x := make([]float32, L*hidden)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	logits := make([]float32, L*E)
	for i := range logits {
		logits[i] = float32(2 * rng.NormFloat64())
	}
	m.x, _ = be.Upload(x, L, hidden)
	tl, _ := be.Upload(logits, L, E)
	var err error
	if m.ids, m.ws, err = be.Route(tl, k, true); err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkMoE runs one MoE layer of the thinker's shapes on Q8_0 weights
// at 2 threads (the engine-level part of a prefill chunk: routing
// bookkeeping, the shared quantization, expert gathers, SiLU, the weighted
// sums and the fork-joins around the expert GEMMs), reporting tokens per
// second and the process CPU milliseconds per layer.
func BenchmarkMoE(b *testing.B) {
	be := New(backend.Options{Threads: 2})
	for _, L := range []int{128, 512} {
		m := newMoEBench(b, be, L)
		b.Run("L="+strconv.Itoa(L), func(b *testing.B) {
			c0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out, err := be.MoE(m.x, m.ids, m.ws, m.experts)
				if err != nil {
					b.Fatal(err)
				}
				be.Free(out)
			}
			b.StopTimer()
			b.ReportMetric(float64(L*b.N)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric((cpuTime()-c0).Seconds()/float64(b.N)*1e3, "cpu-ms/op")
		})
	}
}
