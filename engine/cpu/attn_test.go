package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/backend"
)

// forEachAttnLevel runs f at every level of the attention tile kernels
// this CPU has (generic first), restoring the level after.
func forEachAttnLevel(t *testing.T, f func(t *testing.T)) {
	saved := attnLevel
	defer func() { attnLevel = saved }()
	for l := attnGeneric; l <= attnCPU; l++ {
		attnLevel = l
		t.Run(fmt.Sprintf("level%d", l), f)
	}
}

// TestAttnKernels runs the tile kernels at each level against their
// generic twins on odd sizes, inside NaN guard bands.
func TestAttnKernels(t *testing.T) {
	forEachAttnLevel(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, d := range []int{1, 3, 8, 16, 40, 64, 72, 80, 128, 129} {
			// Four query rows 2d+1 apart, NaN between them.
			qbuf, qs := guarded(rng, attnMR*(2*d+1))
			var q [attnMR][]float32
			for r := range q {
				q[r] = qs[r*(2*d+1) : r*(2*d+1)+d : r*(2*d+1)+d]
				for x := r*(2*d+1) + d; x < (r+1)*(2*d+1); x++ {
					qs[x] = float32(math.NaN())
				}
			}
			q[2] = q[0] // rows may repeat (padding rows share a zero row)
			kbuf, kp := guarded(rng, attnKB*d)
			sbuf, s := guarded(rng, attnMR*attnKB)
			want := make([]float32, attnMR*attnKB)
			attnScore(s, &q, kp, d)
			attnScoreGeneric(want, &q, kp, d)
			for i := range s {
				if !close32(s[i], want[i], math.Sqrt(float64(d))+1) {
					t.Fatalf("attnScore d=%d at %d: %v, generic %v", d, i, s[i], want[i])
				}
			}
			checkGuard(t, "attnScore s", sbuf, len(s))
			checkGuard(t, "attnScore q", qbuf, len(qs))
			checkGuard(t, "attnScore kp", kbuf, len(kp))
		}
		for _, r := range [][2]int{{0, 64}, {0, 1}, {63, 64}, {5, 6}, {3, 40}, {17, 64}, {0, 33}, {31, 33}} {
			a, e := r[0], r[1]
			sbuf, s := guarded(rng, attnKB)
			for i := range s {
				s[i] *= 4
			}
			low := e-a > 1
			if low {
				s[a] = -1000 // below expf's underflow bound once the max is taken off
			}
			s2 := append([]float32(nil), s...)
			m, mg := attnRowMax(s, a, e, 0.375), attnRowMaxGeneric(s2, a, e, 0.375)
			if m != mg {
				t.Fatalf("attnRowMax [%d,%d): %v, generic %v", a, e, m, mg)
			}
			sum, sumg := attnRowExp(s, a, e, m), attnRowExpGeneric(s2, a, e, mg)
			if !close32(sum, sumg, 64) {
				t.Fatalf("attnRowExp [%d,%d) sum %v, generic %v", a, e, sum, sumg)
			}
			for j := range s {
				if (j < a || j >= e || j == a && low) && s[j] != 0 {
					t.Fatalf("attnRowExp [%d,%d): weight %v at %d, want 0", a, e, s[j], j)
				}
				if math.Abs(float64(s[j])-float64(s2[j])) > 2.5e-7*float64(s2[j]) {
					t.Fatalf("attnRowExp [%d,%d) at %d: %v, generic %v", a, e, j, s[j], s2[j])
				}
			}
			checkGuard(t, "attnRowExp s", sbuf, attnKB)
		}
		for _, dp := range []int{16, 32, 48, 64, 80, 128, 144, 208} {
			for _, n := range []int{1, 5, 17, 64} {
				abuf, acc := guarded(rng, attnMR*dp)
				acc2 := append([]float32(nil), acc...)
				pbuf, p := guarded(rng, attnMR*attnKB)
				vbuf, v := guarded(rng, n*dp)
				corr := [attnMR]float32{1, 0.5, 0, 0.25}
				off := attnKB - n
				attnPV(acc, p[off:], v, dp, n, &corr)
				attnPVGeneric(acc2, p[off:], v, dp, n, &corr)
				for i := range acc {
					if !close32(acc[i], acc2[i], math.Sqrt(float64(n))+1) {
						t.Fatalf("attnPV dp=%d n=%d at %d: %v, generic %v", dp, n, i, acc[i], acc2[i])
					}
				}
				checkGuard(t, "attnPV acc", abuf, len(acc))
				checkGuard(t, "attnPV p", pbuf, len(p))
				checkGuard(t, "attnPV v", vbuf, len(v))
			}
		}
	})
}

// TestAttnExp checks the e^x of attnRowExp at each level against math.Exp
// over the softmax range to 2 ulp, and its edges: below -87.3 and outside
// the mask is 0, NaN stays NaN.
func TestAttnExp(t *testing.T) {
	forEachAttnLevel(t, func(t *testing.T) {
		worst := 0.0
		s := make([]float32, attnKB)
		for i := 0; i < 400000; i += attnKB {
			for j := range s {
				s[j] = -87.3 * float32(i+j) / 400000
			}
			x := append([]float32(nil), s...)
			attnRowExp(s, 0, attnKB, 0)
			for j, e := range s {
				want := math.Exp(float64(x[j]))
				ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
				worst = max(worst, math.Abs(float64(e)-want)/ulp)
			}
		}
		if worst > 2 {
			t.Errorf("attnRowExp error %.2f ulp > 2", worst)
		}
		for j := range s {
			s[j] = 0
		}
		s[1], s[2], s[3] = -87.4, -1000, float32(math.NaN())
		attnRowExp(s, 0, 10, 0)
		if s[0] != 1 || s[1] != 0 || s[2] != 0 || s[3] == s[3] || s[10] != 0 {
			t.Errorf("attnRowExp edges: %v", s[:11])
		}
	})
}

// refAttention is GQA attention in float64 over the key ranges of o.
func refAttention(q, k, v []float32, lq, lk, d int, o backend.AttentionOptions) []float64 {
	qc, kc := o.Heads*d, o.KVHeads*d
	out := make([]float64, lq*qc)
	ranges := o.KeyRanges(lq, lk)
	w := make([]float64, lk)
	for i := range lq {
		lo, hi := ranges[i][0], ranges[i][1]
		for h := range o.Heads {
			g := h / (o.Heads / o.KVHeads)
			m := math.Inf(-1)
			for j := lo; j < hi; j++ {
				s := 0.0
				for t := range d {
					s += float64(q[i*qc+h*d+t]) * float64(k[j*kc+g*d+t])
				}
				w[j] = s * float64(o.Scale)
				m = max(m, w[j])
			}
			sum := 0.0
			for j := lo; j < hi; j++ {
				w[j] = math.Exp(w[j] - m)
				sum += w[j]
			}
			for j := lo; j < hi; j++ {
				for t := range d {
					out[i*qc+h*d+t] += w[j] / sum * float64(v[j*kc+g*d+t])
				}
			}
		}
	}
	return out
}

type attnCase struct {
	lq, lk, nh, nkv, d int
	o                  backend.AttentionOptions
}

var attnCases = []attnCase{
	{1, 1, 4, 2, 16, backend.AttentionOptions{Causal: true}},
	{1, 300, 32, 4, 128, backend.AttentionOptions{Causal: true}},  // decode
	{70, 200, 32, 4, 128, backend.AttentionOptions{Causal: true}}, // a chunk after others
	{150, 150, 8, 2, 32, backend.AttentionOptions{Causal: true}},
	{15, 30, 6, 2, 24, backend.AttentionOptions{Causal: true}},
	{37, 37, 3, 3, 72, backend.AttentionOptions{Segments: []int{0, 37}}},
	{150, 150, 4, 4, 64, backend.AttentionOptions{Segments: []int{0, 104, 150}}},
	{140, 140, 2, 2, 80, backend.AttentionOptions{Segments: []int{0, 1, 2, 66, 70, 140}}},
	{130, 130, 2, 1, 40, backend.AttentionOptions{Causal: true, Window: 17}},
	{100, 100, 2, 2, 33, backend.AttentionOptions{Segments: []int{0, 30, 100}, Window: 9}},
	{40, 7, 2, 2, 72, backend.AttentionOptions{}},
	{9, 131, 8, 4, 129, backend.AttentionOptions{}},
}

// TestAttentionTiles checks both Attention paths (the tile one at each
// level) against float64 on decoder and encoder shapes and masks, with
// the values of masked-out keys huge so that any weight they got shows,
// and the tile path's result the same bits at 1, 2 and 3 threads.
func TestAttentionTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	saved := attnTiles
	defer func() { attnTiles = saved }()
	for _, c := range attnCases {
		o := c.o
		o.Heads, o.KVHeads, o.Scale = c.nh, c.nkv, float32(1/math.Sqrt(float64(c.d)))
		kc := c.nkv * c.d
		q, k, v := make([]float32, c.lq*c.nh*c.d), make([]float32, c.lk*kc), make([]float32, c.lk*kc)
		for _, x := range [][]float32{q, k, v} {
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
		}
		// Keys no query row sees (outside every range) get huge values.
		seen := make([]bool, c.lk)
		for _, r := range o.KeyRanges(c.lq, c.lk) {
			for j := r[0]; j < r[1]; j++ {
				seen[j] = true
			}
		}
		for j, s := range seen {
			if !s {
				for x := range kc {
					k[j*kc+x], v[j*kc+x] = 3e4, 1e30
				}
			}
		}
		want := refAttention(q, k, v, c.lq, c.lk, c.d, o)
		name := fmt.Sprintf("Lq=%d Lk=%d heads=%d/%d d=%d %+v", c.lq, c.lk, c.nh, c.nkv, c.d, c.o)
		run := func(t *testing.T, threads int) []float32 {
			b := New(backend.Options{Threads: threads})
			tq, _ := b.Upload(q, c.lq, c.nh*c.d)
			tk, _ := b.Upload(k, c.lk, kc)
			tv, _ := b.Upload(v, c.lk, kc)
			got, err := b.Attention(tq, tk, tv, o)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return got.Handle.([]float32)
		}
		check := func(t *testing.T, path string) []float32 {
			got := run(t, 2)
			var num, den, worst float64
			for i, g := range got {
				e := float64(g) - want[i]
				num, den = num+e*e, den+want[i]*want[i]
				worst = max(worst, math.Abs(e))
			}
			rel := math.Sqrt(num / den)
			if !(rel <= 2e-6) || worst > 1e-5 {
				t.Errorf("%s %s: rel err %.3g, max abs %.3g vs float64", path, name, rel, worst)
			}
			t.Logf("%s %s: rel err %.3g, max abs %.3g vs float64", path, name, rel, worst)
			return got
		}
		attnTiles = false
		check(t, "rows")
		attnTiles = true
		forEachAttnLevel(t, func(t *testing.T) {
			got := check(t, "tiles")
			for _, threads := range []int{1, 3} {
				other := run(t, threads)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(other[i]) {
						t.Fatalf("%s: %d threads differ from 2 at %d", name, threads, i)
					}
				}
			}
		})
	}
}

// BenchmarkAttentionPaths runs one layer's attention at the thinker shape
// (32 query / 4 kv heads of 128, causal) on one worker, the row path and
// the tile path side by side (the tile path also one level lower); GFLOP/s counts the multiply-adds of QKᵀ and
// P·V over the keys each row sees, per second and per CPU-second of the
// process (the machine's other load aside).
func BenchmarkAttentionPaths(b *testing.B) {
	const nh, nkv, d = 32, 4, 128
	saved := attnTiles
	defer func() { attnTiles = saved }()
	for _, L := range []int{512, 2048} {
		be := New(backend.Options{Threads: 1})
		rng := rand.New(rand.NewPCG(1, 2))
		mk := func(n, c int) *backend.Tensor {
			v := make([]float32, n*c)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			t, _ := be.Upload(v, n, c)
			return t
		}
		q, k, v := mk(L, nh*d), mk(L, nkv*d), mk(L, nkv*d)
		flops := float64(L) * float64(L+1) / 2 * nh * d * 4
		// The row path, the tile path at the level in use and, above AVX2,
		// at the level below.
		paths := []int{-1, attnLevel}
		if attnLevel >= 2 {
			paths = append(paths, attnLevel-1)
		}
		for _, level := range paths {
			name := fmt.Sprintf("L=%d/tiles-level%d", L, level)
			if level < 0 {
				name = fmt.Sprintf("L=%d/rows", L)
			}
			b.Run(name, func(b *testing.B) {
				attnTiles = level >= 0
				if level >= 0 {
					saved := attnLevel
					attnLevel = level
					defer func() { attnLevel = saved }()
				}
				c0 := cpuTime()
				for b.Loop() {
					out, err := be.Attention(q, k, v, backend.AttentionOptions{Heads: nh, KVHeads: nkv, Scale: 0.088, Causal: true})
					if err != nil {
						b.Fatal(err)
					}
					be.Free(out)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops*float64(b.N)/(cpuTime()-c0).Seconds()/1e9, "GFLOP/cpu-s")
			})
		}
	}
}
