package shaders_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// attnRef is attention in float64; with ranges query i sees keys
// [ranges[2i], ranges[2i+1]), else all keys (or up to its position when
// causal).
func attnRef(q, k, v []float32, a shaders.KargsAttn, ranges []int32) []float64 {
	D := int(a.HeadDim)
	out := make([]float64, int(a.L)*int(a.OStride))
	group := int(a.NHead / a.NKV)
	for i := 0; i < int(a.L); i++ {
		qpos := int(a.Lk-a.L) + i
		for h := 0; h < int(a.NHead); h++ {
			kvh := h / group
			lo, n := 0, int(a.Lk)
			if a.Causal != 0 {
				n = qpos + 1
			}
			if ranges != nil {
				lo, n = int(ranges[2*i]), int(ranges[2*i+1])
			}
			s := make([]float64, n)
			mx := math.Inf(-1)
			for p := lo; p < n; p++ {
				var d float64
				for c := 0; c < D; c++ {
					d += float64(q[i*int(a.QStride)+h*D+c]) * float64(k[p*int(a.KStride)+kvh*D+c])
				}
				s[p] = d * float64(a.Scale)
				mx = math.Max(mx, s[p])
			}
			var sum float64
			for p := lo; p < n; p++ {
				s[p] = math.Exp(s[p] - mx)
				sum += s[p]
			}
			for c := 0; c < D; c++ {
				var acc float64
				for p := lo; p < n; p++ {
					acc += s[p] * float64(v[p*int(a.VStride)+kvh*D+c])
				}
				out[i*int(a.OStride)+h*D+c] = acc / sum
			}
		}
	}
	return out
}

type attnShape struct {
	L, Lk, nh, nkv, D, causal int
	ranges                    []int32 // per-query key ranges (ranged), nil: none
}

// segRanges returns the per-query key ranges of L queries over L keys in
// segments cu (cumulative lengths), each query also seeing at most window
// keys before it (0: no window) and none after it when causal.
func segRanges(L int, cu []int, window int, causal bool) []int32 {
	r := make([]int32, 2*L)
	s := 0
	for i := 0; i < L; i++ {
		for i >= cu[s+1] {
			s++
		}
		lo, hi := cu[s], cu[s+1]
		if causal {
			hi = i + 1
		}
		if window > 0 {
			lo = max(lo, i-window+1)
		}
		r[2*i], r[2*i+1] = int32(lo), int32(hi)
	}
	return r
}

func attnCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	runAttn(t, h, rng, "flash_attn_f32", 8, []attnShape{
		{37, 37, 8, 1, 128, 1, nil}, // the thinker's GQA 8:1, head_dim 128
		{5, 20, 4, 2, 128, 1, nil},  // queries at the end of a longer context
		{5, 21, 3, 3, 72, 0, nil},   // encoder-style, no mask, head_dim 72
		{9, 9, 2, 2, 64, 0, nil},
		{37, 37, 4, 4, 72, 0, segRanges(37, []int{0, 4, 4, 20, 37}, 0, false)}, // segments (per image/frame), one inside a block
		{41, 41, 4, 2, 64, 0, segRanges(41, []int{0, 26, 41}, 0, false)},       // audio windows
		{30, 30, 2, 1, 40, 0, segRanges(30, []int{0, 30}, 7, true)},            // causal sliding window
		{33, 33, 2, 2, 72, 0, segRanges(33, []int{0, 10, 33}, 5, false)},       // window inside segments
	})
}

func attnMMACase(d int) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		runAttn(t, h, rng, fmt.Sprintf("flash_attn_mma_d%d", d), 32, []attnShape{
			{37, 37, 8, 1, d, 1, nil}, // GQA 8:1, two query blocks, the last partial
			{5, 20, 4, 2, d, 1, nil},  // queries at the end of a longer context
			{40, 23, 2, 2, d, 0, nil}, // no mask, a partial last KV block
			{70, 70, 4, 2, d, 0, segRanges(70, []int{0, 3, 40, 40, 70}, 0, false)}, // segments across query blocks
			{45, 45, 2, 2, d, 1, segRanges(45, []int{0, 45}, 9, true)},             // causal sliding window (causal ignored)
			{50, 50, 2, 1, d, 0, segRanges(50, []int{0, 17, 50}, 6, false)},        // window inside segments
		})
	}
}

func runAttn(t *testing.T, h *mslemu.Harness, rng *rand.Rand, kernel string, qPerGroup int, shapes []attnShape) {
	for _, sh := range shapes {
		a := shaders.KargsAttn{L: int32(sh.L), Lk: int32(sh.Lk), NHead: int32(sh.nh), NKV: int32(sh.nkv), HeadDim: int32(sh.D),
			Causal: int32(sh.causal), QStride: int32(sh.nh*sh.D + 3), KStride: int32(sh.nkv*sh.D + 1), VStride: int32(sh.nkv * sh.D),
			OStride: int32(sh.nh*sh.D + 2), Scale: float32(1 / math.Sqrt(float64(sh.D)))}
		q := randF32(rng, sh.L*int(a.QStride), 1.5)
		k := randF32(rng, sh.Lk*int(a.KStride), 1.5)
		v := randF32(rng, sh.Lk*int(a.VStride), 1)
		o := nanF32(sh.L * int(a.OStride))
		ranges := []int32{-1} // not read
		if sh.ranges != nil {
			a.Ranged, ranges = 1, sh.ranges
		}
		out := runJob(t, h, &mslemu.Job{Kernel: kernel, Grid: [3]int{groups(sh.L, qPerGroup), sh.nh, 1}, Group: [3]int{128, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: mslemu.F32(q)}, {Index: 2, Data: mslemu.F32(k)},
				{Index: 3, Data: mslemu.F32(v)}, {Index: 4, Data: mslemu.F32(o)}, {Index: 5, Data: mslemu.I32(ranges)}}})
		got := mslemu.ToF32(out[4])
		want := attnRef(q, k, v, a, sh.ranges)
		for i := 0; i < sh.L; i++ {
			row := i * int(a.OStride)
			checkClose(t, fmt.Sprintf("%s %+v query %d", kernel, sh, i), got[row:row+sh.nh*sh.D], want[row:row+sh.nh*sh.D], 2e-6, 2e-5)
			for c := sh.nh * sh.D; c < int(a.OStride); c++ {
				if !math.IsNaN(float64(got[row+c])) {
					t.Fatalf("flash_attn wrote into the row padding")
				}
			}
		}
	}
}

func init() {
	register("flash_attn_f32", attnCase)
	for _, d := range []int{32, 64, 128} {
		register(fmt.Sprintf("flash_attn_mma_d%d", d), attnMMACase(d))
	}
}
