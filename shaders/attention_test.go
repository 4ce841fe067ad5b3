package shaders_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
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

// roundHalf rounds to IEEE binary16 (nearest even), as the GPU's float to
// half conversion does.
func roundHalf(f float32) float32 { return quant.Float16ToFloat32(quant.Float32ToFloat16(f)) }

// attnHalfRef is the contract of flash_attn_mma_*, which stage their
// operands in half: exact attention (float64, base-2 softmax) of
// half(q·scale·log2(e)), half(k) and half(v), the rounding the kernels
// specify, with each output's error bound. What the kernels round beyond
// that is each probability p_j to half (relative error at most u = 2^-11,
// absolute 2^-25 below half's normal range) and the float sums of QKᵀ
// (each score off by at most D·2^-24·Σ|q·k|, so p_j by ln2 times that,
// relatively) and of PV. A relative error e_j in p_j moves the output by
// Σ p_j e_j (v_j - o) / Σ p_j (1+e_j), so
//
//	|err| <= (u + ln2·δs)/(1-u) · Σ p_j |v_j - o| / Σ p_j + n·2^-25·max|v_j - o| / Σ p_j
//
// (p normalised to the row's max, Σ p >= 1), plus the float tolerance the
// float kernels are held to (atol 2e-6, rtol 2e-5) for the float sums.
// With half false it is the same bound for the float kernels (no operand
// rounding, u = 2^-24) plus the worst case of the float sum of PV over n
// keys, n·2^-24·Σ p_j |v_j| / Σ p_j: the 1024-key cases, where float
// rounding outgrows the small cases' atol.
func attnHalfRef(q, k, v []float32, a shaders.KargsAttn, ranges []int32, half bool) (want, bound []float64) {
	D := int(a.HeadDim)
	out := make([]float64, int(a.L)*int(a.OStride))
	tol := make([]float64, len(out))
	group := int(a.NHead / a.NKV)
	qscale := a.Scale * float32(math.Log2E)
	u, rnd := 1.0/2048, roundHalf
	if !half {
		u, rnd = 1.0/(1<<24), func(f float32) float32 { return f }
	}
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
			qh := make([]float64, D)
			for c := range qh {
				qh[c] = float64(rnd(q[i*int(a.QStride)+h*D+c] * qscale))
			}
			s := make([]float64, n)
			mx, ds := math.Inf(-1), 0.0
			for p := lo; p < n; p++ {
				var d, abs float64
				for c := 0; c < D; c++ {
					t := qh[c] * float64(rnd(k[p*int(a.KStride)+kvh*D+c]))
					d += t
					abs += math.Abs(t)
				}
				s[p] = d
				mx = math.Max(mx, d)
				ds = math.Max(ds, float64(D)*abs/(1<<24))
			}
			var sum float64
			for p := lo; p < n; p++ {
				s[p] = math.Exp2(s[p] - mx)
				sum += s[p]
			}
			for c := 0; c < D; c++ {
				var acc float64
				for p := lo; p < n; p++ {
					acc += s[p] * float64(rnd(v[p*int(a.VStride)+kvh*D+c]))
				}
				o := acc / sum
				var dev, maxDev, mag float64
				for p := lo; p < n; p++ {
					e := math.Abs(float64(rnd(v[p*int(a.VStride)+kvh*D+c])) - o)
					dev += s[p] * e
					mag += s[p] * math.Abs(float64(rnd(v[p*int(a.VStride)+kvh*D+c])))
					maxDev = math.Max(maxDev, e)
				}
				out[i*int(a.OStride)+h*D+c] = o
				tol[i*int(a.OStride)+h*D+c] = (u+math.Ln2*ds)/(1-u)*dev/sum + float64(n-lo)*maxDev/(1<<25)/sum +
					2e-6 + 2e-5*math.Abs(o)
				if !half {
					// No operand rounding; the float sum of PV over n keys.
					tol[i*int(a.OStride)+h*D+c] += float64(n-lo) / (1 << 24) * mag / sum
				}
			}
		}
	}
	return out, tol
}

// attnMMAShapes are the simdgroup-matrix kernels' cases at head size d.
func attnMMAShapes(d int) []attnShape {
	return []attnShape{
		{37, 37, 8, 1, d, 1, nil}, // GQA 8:1, two query blocks, the last partial
		{5, 20, 4, 2, d, 1, nil},  // queries at the end of a longer context
		{40, 23, 2, 2, d, 0, nil}, // no mask, a partial last KV block
		{70, 70, 4, 2, d, 0, segRanges(70, []int{0, 3, 40, 40, 70}, 0, false)}, // segments across query blocks
		{45, 45, 2, 2, d, 1, segRanges(45, []int{0, 45}, 9, true)},             // causal sliding window (causal ignored)
		{50, 50, 2, 1, d, 0, segRanges(50, []int{0, 17, 50}, 6, false)},        // window inside segments
		{100, 161, 2, 1, d, 0, nil},                                            // many KV blocks, the last partial
	}
}

// attnRealShapes are the thinker's attention, 32 query heads over 4 KV
// heads of 128, causal at L = 1024: the last query block (the one that
// sees every key) and a chunk that is not a whole number of query or key
// blocks. They run in one fiber order: the emulator computes every
// simdgroup product in all 32 lanes, so a whole 1024-token sequence would
// take many minutes (the small cases above run in the race orders).
var attnRealShapes = []attnShape{
	{32, 1024, 32, 4, 128, 1, nil},
	{29, 1000, 32, 4, 128, 1, nil},
}

// attnLongShapes are the thinker's kernel (d = 128, GQA 8:1 over fewer
// heads) at lengths that are not multiples of its 32-query or 32-key
// blocks: one query at the end of 1030 keys (decode), a whole 600-token
// causal prompt, a 77-query chunk at the end of 1100 keys, segments with a
// one-token segment, and a causal sliding window.
var attnLongShapes = []attnShape{
	{1, 1030, 8, 1, 128, 1, nil},
	{600, 600, 8, 1, 128, 1, nil},
	{77, 1100, 8, 1, 128, 1, nil},
	{300, 300, 8, 1, 128, 0, segRanges(300, []int{0, 130, 131, 300}, 0, false)},
	{257, 257, 8, 1, 128, 0, segRanges(257, []int{0, 257}, 100, true)},
}

// runAttnRamp runs kernel on a causal chunk of 70 queries at the end of
// 700 keys whose scores grow along the keys (key p scaled by 1 + 4p/700):
// a row's max moves by more than 2^8 (log2 units) many times, so the
// kernels' lazy O rescale runs, and a wrong one fails the bound.
func runAttnRamp(t *testing.T, h *mslemu.Harness, rng *rand.Rand, kernel string, half bool) {
	sh := attnShape{70, 700, 8, 1, 128, 1, nil}
	a, q, k, v, ranges := attnInputs(rng, sh)
	for p := 0; p < sh.Lk; p++ {
		g := float32(1 + 4*float64(p)/float64(sh.Lk))
		for c := 0; c < int(a.KStride); c++ {
			k[p*int(a.KStride)+c] *= g
		}
	}
	checkAttnHalf(t, h, kernel, 32, sh, 1, half, a, q, k, v, ranges)
}

func attnMMACase(d int) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		runAttn(t, h, rng, fmt.Sprintf("flash_attn_mma_d%d", d), 32, attnMMAShapes(d))
		if d == 128 {
			// Float sums over up to 1100 keys: held to their worst-case
			// bound (attnHalfRef without the rounding to half).
			runAttnHalf(t, h, rng, "flash_attn_mma_d128", 32, attnRealShapes, 1, false)
			runAttnHalf(t, h, rng, "flash_attn_mma_d128", 32, attnLongShapes, 1, false)
			runAttnRamp(t, h, rng, "flash_attn_mma_d128", false)
		}
	}
}

func attnHalfCase(d int) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		runAttnHalf(t, h, rng, fmt.Sprintf("flash_attn_mma_half_d%d", d), 32, attnMMAShapes(d), 0, true)
		if d == 128 {
			runAttnHalf(t, h, rng, "flash_attn_mma_half_d128", 32, attnRealShapes, 1, true)
			runAttnRamp(t, h, rng, "flash_attn_mma_half_d128", true)
		}
	}
}

// runAttnHalf runs a flash_attn_mma_* kernel (qPerGroup queries per
// threadgroup) on each shape (orders: the fiber orders, 0 for the harness's) and checks it against attnHalfRef
// element by element; it logs the error against exact float64 attention
// (attnRef) too, and returns the largest NMSE against it.
func runAttnHalf(t *testing.T, h *mslemu.Harness, rng *rand.Rand, kernel string, qPerGroup int, shapes []attnShape, orders int, half bool) (nmse float64) {
	for _, sh := range shapes {
		a, q, k, v, ranges := attnInputs(rng, sh)
		nmse = math.Max(nmse, checkAttnHalf(t, h, kernel, qPerGroup, sh, orders, half, a, q, k, v, ranges))
	}
	return nmse
}

// checkAttnHalf is runAttnHalf on one shape's given inputs.
func checkAttnHalf(t *testing.T, h *mslemu.Harness, kernel string, qPerGroup int, sh attnShape, orders int, half bool,
	a shaders.KargsAttn, q, k, v []float32, ranges []int32) (nmse float64) {
	{
		o := nanF32(sh.L * int(a.OStride))
		out := runJob(t, h, &mslemu.Job{Kernel: kernel, Grid: [3]int{groups(sh.L, qPerGroup), sh.nh, 1}, Group: [3]int{128, 1, 1}, Orders: orders,
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: mslemu.F32(q)}, {Index: 2, Data: mslemu.F32(k)},
				{Index: 3, Data: mslemu.F32(v)}, {Index: 4, Data: mslemu.F32(o)}, {Index: 5, Data: mslemu.I32(ranges)}}})
		got := mslemu.ToF32(out[4])
		want, bound := attnHalfRef(q, k, v, a, sh.ranges, half)
		exact := attnRef(q, k, v, a, sh.ranges)
		var num, den, maxErr float64
		bad := 0
		for i := 0; i < sh.L; i++ {
			row := i * int(a.OStride)
			for c := row; c < row+sh.nh*sh.D; c++ {
				g := float64(got[c])
				if d := math.Abs(g - want[c]); math.IsNaN(g) || d > bound[c] {
					if bad < 5 {
						t.Errorf("%s %+v: query %d, element %d = %g, want %g ± %.3g", kernel, sh, i, c-row, g, want[c], bound[c])
					}
					bad++
				}
				num += (g - exact[c]) * (g - exact[c])
				den += exact[c] * exact[c]
				maxErr = math.Max(maxErr, math.Abs(g-exact[c]))
			}
			for c := row + sh.nh*sh.D; c < row+int(a.OStride); c++ {
				if !math.IsNaN(float64(got[c])) {
					t.Fatalf("%s wrote into the row padding", kernel)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s %+v: %d values outside the half-precision bound", kernel, sh, bad)
		}
		t.Logf("%s L=%d Lk=%d heads %d/%d d=%d: against exact attention max abs error %.3g, NMSE %.3g",
			kernel, sh.L, sh.Lk, sh.nh, sh.nkv, sh.D, maxErr, num/den)
		nmse = num / den
	}
	return nmse
}

// attnInputs makes a case's arguments and random q, k, v (rows padded) and
// its ranges buffer.
func attnInputs(rng *rand.Rand, sh attnShape) (a shaders.KargsAttn, q, k, v []float32, ranges []int32) {
	a = shaders.KargsAttn{L: int32(sh.L), Lk: int32(sh.Lk), NHead: int32(sh.nh), NKV: int32(sh.nkv), HeadDim: int32(sh.D),
		Causal: int32(sh.causal), QStride: int32(sh.nh*sh.D + 3), KStride: int32(sh.nkv*sh.D + 1), VStride: int32(sh.nkv * sh.D),
		OStride: int32(sh.nh*sh.D + 2), Scale: float32(1 / math.Sqrt(float64(sh.D)))}
	q = randF32(rng, sh.L*int(a.QStride), 1.5)
	k = randF32(rng, sh.Lk*int(a.KStride), 1.5)
	v = randF32(rng, sh.Lk*int(a.VStride), 1)
	ranges = []int32{-1} // not read
	if sh.ranges != nil {
		a.Ranged, ranges = 1, sh.ranges
	}
	return a, q, k, v, ranges
}

func runAttn(t *testing.T, h *mslemu.Harness, rng *rand.Rand, kernel string, qPerGroup int, shapes []attnShape) {
	for _, sh := range shapes {
		a, q, k, v, ranges := attnInputs(rng, sh)
		o := nanF32(sh.L * int(a.OStride))
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
	for _, d := range []int{32, 64, 72, 128} {
		register(fmt.Sprintf("flash_attn_mma_d%d", d), attnMMACase(d))
		register(fmt.Sprintf("flash_attn_mma_half_d%d", d), attnHalfCase(d))
	}
}
