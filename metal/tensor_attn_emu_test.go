//go:build mslemu

package metal

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
)

// attnRef64 is attention in float64 under o (the rows' key ranges from
// o.KeyRanges), q [lq][heads·d], k and v [lk][kvHeads·d].
func attnRef64(q, k, v []float32, lq, lk, d int, o backend.AttentionOptions) []float32 {
	out := make([]float32, lq*o.Heads*d)
	group := o.Heads / o.KVHeads
	for i, r := range o.KeyRanges(lq, lk) {
		for h := 0; h < o.Heads; h++ {
			kvh := h / group
			s := make([]float64, r[1])
			mx := math.Inf(-1)
			for p := r[0]; p < r[1]; p++ {
				var dot float64
				for c := 0; c < d; c++ {
					dot += float64(q[(i*o.Heads+h)*d+c]) * float64(k[(p*o.KVHeads+kvh)*d+c])
				}
				s[p] = dot * float64(o.Scale)
				mx = math.Max(mx, s[p])
			}
			var sum float64
			for p := r[0]; p < r[1]; p++ {
				s[p] = math.Exp(s[p] - mx)
				sum += s[p]
			}
			for c := 0; c < d; c++ {
				var acc float64
				for p := r[0]; p < r[1]; p++ {
					acc += s[p] * float64(v[(p*o.KVHeads+kvh)*d+c])
				}
				out[(i*o.Heads+h)*d+c] = float32(acc / sum)
			}
		}
	}
	return out
}

// TestTensorAttnHostEmulated: with the tensor path forced on the emulated
// GPU and the op limit low enough that attention runs in several query
// chunks, Attention of head size 128 launches the limbs of k and v once,
// those of each chunk's queries and flash_attn_t_d128 per chunk, and
// matches float64 attention within the conformance suite's TolAttn on the
// thinker's heads (32 over 4): a causal prompt of 130 rows (chunks of 64,
// 64 and 2), a causal chunk of 70 queries at the end of 200 keys, and
// segments under a window (resolved into key ranges); q, k and v are left
// as they were. One query (decode) keeps flash_attn_mma_d128.
func TestTensorAttnHostEmulated(t *testing.T) {
	b := tensorEmulated(t)
	if !b.tensorFamilyOn(tensorFamilyAttn) {
		t.Fatal("attention's tensor family off when forced")
	}
	b.mu.Lock()
	b.opSeconds = 1e-9 // every chunk one threadgroup of queries
	b.mu.Unlock()
	rng := rand.New(rand.NewSource(128))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	const d, nh, nkv = 128, 32, 4
	for _, c := range []struct {
		lq, lk int
		o      backend.AttentionOptions
		chunks int
	}{
		{130, 130, backend.AttentionOptions{Causal: true}, 3},
		{70, 200, backend.AttentionOptions{Causal: true}, 2},
		{100, 100, backend.AttentionOptions{Segments: []int{0, 30, 31, 100}, Window: 50}, 2},
	} {
		o := c.o
		o.Heads, o.KVHeads, o.Scale = nh, nkv, float32(1/math.Sqrt(d))
		q, k, v := randn(c.lq*nh*d), randn(c.lk*nkv*d), randn(c.lk*nkv*d)
		tq, err := b.Upload(q, c.lq, nh*d)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := b.Upload(k, c.lk, nkv*d)
		if err != nil {
			t.Fatal(err)
		}
		tv, err := b.Upload(v, c.lk, nkv*d)
		if err != nil {
			t.Fatal(err)
		}
		before := b.Stats().Kernels
		y, err := b.Attention(tq, tk, tv, o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Read(context.Background(), y)
		if err != nil {
			t.Fatal(err)
		}
		after := b.Stats().Kernels
		ran := func(k string) int { return after[k].Dispatches - before[k].Dispatches }
		if n := ran("flash_attn_t_d128"); n != c.chunks {
			t.Errorf("Lq=%d Lk=%d: flash_attn_t_d128 dispatched %d times, want %d (one per chunk)", c.lq, c.lk, n, c.chunks)
		}
		if n := ran(attnLimbsQK); n != c.chunks+1 {
			t.Errorf("Lq=%d Lk=%d: %s dispatched %d times, want %d (k once, q per chunk)", c.lq, c.lk, attnLimbsQK, n, c.chunks+1)
		}
		if n := ran(attnLimbsV); n != 1 {
			t.Errorf("Lq=%d Lk=%d: %s dispatched %d times, want 1", c.lq, c.lk, attnLimbsV, n)
		}
		e := conformance.NMSE(got, attnRef64(q, k, v, c.lq, c.lk, d, o))
		t.Logf("Lq=%d Lk=%d causal=%v segments=%v window=%d, %d chunks: NMSE %.3g", c.lq, c.lk, o.Causal, o.Segments, o.Window, c.chunks, e)
		if !(e <= conformance.TolAttn) {
			t.Errorf("Lq=%d Lk=%d: NMSE %.3g > %g", c.lq, c.lk, e, conformance.TolAttn)
		}
		for _, in := range []struct {
			t    *backend.Tensor
			want []float32
		}{{tq, q}, {tk, k}, {tv, v}} {
			back, err := b.Read(context.Background(), in.t)
			if err != nil {
				t.Fatal(err)
			}
			for i := range back {
				if math.Float32bits(back[i]) != math.Float32bits(in.want[i]) {
					t.Fatalf("Attention modified an input at %d", i)
				}
			}
		}
		b.Free(tq, tk, tv, y)
	}
	// Decode (a few queries) keeps the shader kernel: no limbs.
	q, k, v := randn(nh*d), randn(50*nkv*d), randn(50*nkv*d)
	tq, _ := b.Upload(q, 1, nh*d)
	tk, _ := b.Upload(k, 50, nkv*d)
	tv, _ := b.Upload(v, 50, nkv*d)
	before := b.Stats().Kernels
	o := backend.AttentionOptions{Heads: nh, KVHeads: nkv, Scale: float32(1 / math.Sqrt(d)), Causal: true}
	y, err := b.Attention(tq, tk, tv, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Read(context.Background(), y)
	if err != nil {
		t.Fatal(err)
	}
	after := b.Stats().Kernels
	for k, want := range map[string]int{"flash_attn_mma_d128": 1, "flash_attn_t_d128": 0, attnLimbsQK: 0, attnLimbsV: 0} {
		if n := after[k].Dispatches - before[k].Dispatches; n != want {
			t.Errorf("decode: %s dispatched %d times, want %d", k, n, want)
		}
	}
	if e := conformance.NMSE(got, attnRef64(q, k, v, 1, 50, d, o)); !(e <= conformance.TolAttn) {
		t.Errorf("decode: NMSE %.3g > %g", e, conformance.TolAttn)
	}
}
