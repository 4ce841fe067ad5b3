package shaders_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/metal"
	"github.com/clefrt/clef/shaders/emu"
)

func attnRef(q, k, v []float32, a metal.KargsAttn) []float64 {
	D := int(a.HeadDim)
	out := make([]float64, int(a.L)*int(a.OStride))
	group := int(a.NHead / a.NKV)
	for i := 0; i < int(a.L); i++ {
		qpos := int(a.Lk-a.L) + i
		for h := 0; h < int(a.NHead); h++ {
			kvh := h / group
			n := int(a.Lk)
			if a.Causal != 0 {
				n = qpos + 1
			}
			s := make([]float64, n)
			mx := math.Inf(-1)
			for p := 0; p < n; p++ {
				var d float64
				for c := 0; c < D; c++ {
					d += float64(q[i*int(a.QStride)+h*D+c]) * float64(k[p*int(a.KStride)+kvh*D+c])
				}
				s[p] = d * float64(a.Scale)
				mx = math.Max(mx, s[p])
			}
			var sum float64
			for p := range s {
				s[p] = math.Exp(s[p] - mx)
				sum += s[p]
			}
			for c := 0; c < D; c++ {
				var acc float64
				for p := range s {
					acc += s[p] * float64(v[p*int(a.VStride)+kvh*D+c])
				}
				out[i*int(a.OStride)+h*D+c] = acc / sum
			}
		}
	}
	return out
}

type attnShape struct{ L, Lk, nh, nkv, D, causal int }

func attnCase(t *testing.T, h *emu.Harness, rng *rand.Rand) {
	runAttn(t, h, rng, "flash_attn_f32", 8, []attnShape{
		{37, 37, 8, 1, 128, 1}, // the thinker's GQA 8:1, head_dim 128
		{5, 20, 4, 2, 128, 1},  // queries at the end of a longer context
		{5, 21, 3, 3, 72, 0},   // encoder-style, no mask, head_dim 72
		{9, 9, 2, 2, 64, 0},
	})
}

func attnMMACase(d int) kernelCase {
	return func(t *testing.T, h *emu.Harness, rng *rand.Rand) {
		runAttn(t, h, rng, fmt.Sprintf("flash_attn_mma_d%d", d), 32, []attnShape{
			{37, 37, 8, 1, d, 1}, // GQA 8:1, two query blocks, the last partial
			{5, 20, 4, 2, d, 1},  // queries at the end of a longer context
			{40, 23, 2, 2, d, 0}, // no mask, a partial last KV block
		})
	}
}

func runAttn(t *testing.T, h *emu.Harness, rng *rand.Rand, kernel string, qPerGroup int, shapes []attnShape) {
	for _, sh := range shapes {
		a := metal.KargsAttn{L: int32(sh.L), Lk: int32(sh.Lk), NHead: int32(sh.nh), NKV: int32(sh.nkv), HeadDim: int32(sh.D),
			Causal: int32(sh.causal), QStride: int32(sh.nh*sh.D + 3), KStride: int32(sh.nkv*sh.D + 1), VStride: int32(sh.nkv * sh.D),
			OStride: int32(sh.nh*sh.D + 2), Scale: float32(1 / math.Sqrt(float64(sh.D)))}
		q := randF32(rng, sh.L*int(a.QStride), 1.5)
		k := randF32(rng, sh.Lk*int(a.KStride), 1.5)
		v := randF32(rng, sh.Lk*int(a.VStride), 1)
		o := nanF32(sh.L * int(a.OStride))
		out := runJob(t, h, &emu.Job{Kernel: kernel, Grid: [3]int{groups(sh.L, qPerGroup), sh.nh, 1}, Group: [3]int{128, 1, 1},
			Buffers: []emu.Buffer{{Index: 0, Data: metal.Bytes(&a)}, {Index: 1, Data: emu.F32(q)}, {Index: 2, Data: emu.F32(k)},
				{Index: 3, Data: emu.F32(v)}, {Index: 4, Data: emu.F32(o)}}})
		got := emu.ToF32(out[4])
		want := attnRef(q, k, v, a)
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
