package shaders_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// The int8 limbs of flash_attn_t_d128 (tensor_attn.metal): codes of 24 bits
// relative to a vector's largest magnitude, three int8 limbs each.
const (
	taCode  = 8355711 // the largest |code|
	taD     = 128     // head size
	taK     = 64      // keys per block (and queries per threadgroup)
	taLW    = 3 * taD // bytes of the limbs of one Q or K vector
	taVB    = 3 * taK * taD
	tolAttn = 1e-8 // conformance.TolAttn
)

// limbSplit is the reference split of a vector: codes X = rint(x·r) with r =
// taCode/max|x| (float32 arithmetic, as the kernels), clamped to ±taCode,
// limbs X = 65536h + 256m + l (a = floor((X+128)/256), l = X - 256a, h =
// floor((a+128)/256), m = a - 256h); the scale is max|x|/taCode, NaN with a
// non-finite element (codes 0), 0 for a zero vector.
func limbSplit(x []float32) (h, m, l []int8, s float32) {
	h, m, l = make([]int8, len(x)), make([]int8, len(x)), make([]int8, len(x))
	var mx float32
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return h, m, l, float32(math.NaN())
		}
		mx = max(mx, float32(math.Abs(float64(v))))
	}
	if mx == 0 {
		return h, m, l, 0
	}
	r := float32(taCode) / mx
	for i, v := range x {
		X := int64(math.RoundToEven(float64(v * r)))
		X = max(-taCode, min(taCode, X))
		a := (X + 128) >> 8
		hh := (a + 128) >> 8
		if hh < -128 || hh > 127 {
			panic(fmt.Sprintf("limbSplit: code %d has a top limb %d", X, hh))
		}
		h[i], m[i], l[i] = int8(hh), int8(a-256*hh), int8(X-256*a)
	}
	return h, m, l, mx / taCode
}

var tensorAttnBuild struct {
	once sync.Once
	h    *mslemu.Harness
	err  error
}

// tensorAttnHarness returns the emulated tensor_attn.metal (the one
// TestKernels built, or a build of that file alone).
func tensorAttnHarness(t *testing.T) *mslemu.Harness {
	t.Helper()
	if !mslemu.Available() {
		t.Skipf("%s not found", mslemu.Clang)
	}
	if h := harnesses["flash_attn_t_d128"]; h != nil {
		return h
	}
	b := &tensorAttnBuild
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "clef-tensor-attn")
		if err != nil {
			b.err = err
			return
		}
		b.h, b.err = mslemu.Build(dir, "tensor_attn.metal")
		if b.err == nil && !strings.HasPrefix(b.h.Bin, dir) {
			os.RemoveAll(dir) // the harness runs from the cache
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.h
}

// runLimbsQK runs attn_limbs_qk on rows of heads vectors (stride floats
// between rows), padded to a multiple of 64 rows, and returns the limbs
// and the scales.
func runLimbsQK(t *testing.T, h *mslemu.Harness, x []float32, rows, heads, stride int, kOrder bool, orders int) (limbs []byte, scales []float32) {
	t.Helper()
	pad := groups(rows, taK) * taK
	a := shaders.KargsAttnLimbs{Rows: int32(rows), Heads: int32(heads), XStride: int32(stride)}
	if kOrder {
		a.KOrder = 1
	}
	out := runJob(t, h, &mslemu.Job{Kernel: "attn_limbs_qk", Grid: [3]int{pad * heads / 4, 1, 1}, Group: [3]int{128, 1, 1}, Orders: orders,
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: mslemu.F32(x)},
			{Index: 2, Data: bytes.Repeat([]byte{0x5a}, pad*heads*taLW)}, {Index: 3, Data: mslemu.F32(nanF32(pad * heads))}}})
	return out[2], mslemu.ToF32(out[3])
}

// runLimbsV runs attn_limbs_v on rows keys of heads kv heads.
func runLimbsV(t *testing.T, h *mslemu.Harness, v []float32, rows, heads, stride int, orders int) (limbs []byte, scales []float32) {
	t.Helper()
	blocks := groups(rows, taK)
	a := shaders.KargsAttnLimbs{Rows: int32(rows), Heads: int32(heads), XStride: int32(stride)}
	out := runJob(t, h, &mslemu.Job{Kernel: "attn_limbs_v", Grid: [3]int{blocks, heads, 1}, Group: [3]int{128, 1, 1}, Orders: orders,
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: mslemu.F32(v)},
			{Index: 2, Data: bytes.Repeat([]byte{0x5a}, blocks*heads*taVB)}, {Index: 3, Data: mslemu.F32(nanF32(blocks * heads * taD))}}})
	return out[2], mslemu.ToF32(out[3])
}

// runTensorAttn is the host's sequence for one launch of flash_attn_t_d128
// (metal/attention.go): the limbs of K, V and the queries, then attention.
// It returns o (a.L rows of a.OStride, NaN where not written).
func runTensorAttn(t *testing.T, h *mslemu.Harness, a shaders.KargsAttn, q, k, v []float32, ranges []int32, lk, orders int) []float32 {
	t.Helper()
	L, nh, nkv := int(a.L), int(a.NHead), int(a.NKV)
	ql, sq := runLimbsQK(t, h, q, L, nh, int(a.QStride), false, orders)
	kl, sk := runLimbsQK(t, h, k, lk, nkv, int(a.KStride), true, orders)
	vl, sv := runLimbsV(t, h, v, lk, nkv, int(a.VStride), orders)
	o := nanF32(L * int(a.OStride))
	out := runJob(t, h, &mslemu.Job{Kernel: "flash_attn_t_d128", Grid: [3]int{groups(L, taK), nh, 1}, Group: [3]int{128, 1, 1}, Orders: orders,
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: ql}, {Index: 2, Data: kl}, {Index: 3, Data: vl},
			{Index: 4, Data: mslemu.F32(o)}, {Index: 5, Data: mslemu.I32(ranges)}, {Index: 6, Data: mslemu.F32(sq)},
			{Index: 7, Data: mslemu.F32(sk)}, {Index: 8, Data: mslemu.F32(sv)}}})
	return mslemu.ToF32(out[4])
}

// limbsQKCase: attn_limbs_qk writes exactly the limbs and scales of
// limbSplit in both orders ([h | m | l] for Q, [l | m | h] for K), zero
// codes and scales on the padding rows, a NaN scale and zero codes for
// vectors with a NaN or an infinity, 0 for a zero vector.
func limbsQKCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	const rows, heads = 70, 3
	stride := heads*taD + 5
	x := randF32(rng, rows*stride, 2)
	for c := 0; c < taD; c++ {
		x[4*stride+taD+c] = 0 // row 4, head 1: zero
	}
	x[9*stride+2*taD+17] = float32(math.NaN())
	x[11*stride+40] = float32(math.Inf(-1))
	x[12*stride+taD+3] = 1e6 // one outlier: most codes small
	x[13*stride+7] = 3e-30   // tiny values
	for c := 0; c < taD; c++ {
		x[14*stride+c] = float32(c%7-3) * 0.5 // ties of x·r
	}
	for _, kOrder := range []bool{false, true} {
		limbs, scales := runLimbsQK(t, h, x, rows, heads, stride, kOrder, mslemu.RaceOrders)
		pad := groups(rows, taK) * taK
		bad := 0
		for r := 0; r < pad; r++ {
			for hd := 0; hd < heads; hd++ {
				g := r*heads + hd
				var want [3][]int8 // h, m, l
				var ws float32
				if r < rows {
					want[0], want[1], want[2], ws = limbSplit(x[r*stride+hd*taD : r*stride+(hd+1)*taD])
				} else {
					want = [3][]int8{make([]int8, taD), make([]int8, taD), make([]int8, taD)}
				}
				order := []int{0, 1, 2}
				if kOrder {
					order = []int{2, 1, 0}
				}
				got := limbs[g*taLW : (g+1)*taLW]
				for p, li := range order {
					for c := 0; c < taD; c++ {
						if int8(got[p*taD+c]) != want[li][c] {
							if bad < 5 {
								t.Errorf("attn_limbs_qk (k order %v) row %d head %d: limb %d of channel %d = %d, want %d", kOrder, r, hd, li, c, int8(got[p*taD+c]), want[li][c])
							}
							bad++
						}
					}
				}
				if math.Float32bits(scales[g]) != math.Float32bits(ws) && !(math.IsNaN(float64(ws)) && math.IsNaN(float64(scales[g]))) {
					t.Errorf("attn_limbs_qk row %d head %d: scale %g, want %g", r, hd, scales[g], ws)
				}
			}
		}
		if !math.IsNaN(float64(scales[9*heads+2])) || !math.IsNaN(float64(scales[11*heads])) || scales[4*heads+1] != 0 {
			t.Errorf("attn_limbs_qk: scales of the NaN, infinite and zero vectors %g %g %g, want NaN NaN 0", scales[9*heads+2], scales[11*heads], scales[4*heads+1])
		}
		if bad > 0 {
			t.Errorf("attn_limbs_qk (k order %v): %d limbs differ", kOrder, bad)
		}
	}

}

// limbsVCase: attn_limbs_v writes exactly limbSplit's limbs of each
// channel of each 64-key block and kv head, zero codes for the keys past
// the last, a NaN scale for a (block, channel) with a NaN.
func limbsVCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	// 130 keys (the last block of 2), 2 kv heads, a NaN in block 1 at
	// channel 5 of head 0 and a zero channel.
	const lk, nkv = 130, 2
	vs := nkv * taD
	v := randF32(rng, lk*vs, 1)
	v[70*vs+5] = float32(math.NaN())
	for p := 0; p < lk; p++ {
		v[p*vs+taD+9] = 0
	}
	v[3*vs+taD+100] = -40 // an outlier key in a channel
	limbs, scales := runLimbsV(t, h, v, lk, nkv, vs, mslemu.RaceOrders)
	bad := 0
	for b := 0; b < groups(lk, taK); b++ {
		for hd := 0; hd < nkv; hd++ {
			base := (b*nkv + hd) * taVB
			for c := 0; c < taD; c++ {
				n := min(taK, lk-b*taK)
				col := make([]float32, n)
				for j := range col {
					col[j] = v[(b*taK+j)*vs+hd*taD+c]
				}
				wh, wm, wl, ws := limbSplit(col)
				for j := 0; j < taK; j++ {
					var w [3]int8
					if j < n {
						w = [3]int8{wh[j], wm[j], wl[j]}
					}
					for li := 0; li < 3; li++ {
						if g := int8(limbs[base+(li*taK+j)*taD+c]); g != w[li] {
							if bad < 5 {
								t.Errorf("attn_limbs_v block %d head %d key %d channel %d: limb %d = %d, want %d", b, hd, j, c, li, g, w[li])
							}
							bad++
						}
					}
				}
				gs := scales[(b*nkv+hd)*taD+c]
				if math.Float32bits(gs) != math.Float32bits(ws) && !(math.IsNaN(float64(ws)) && math.IsNaN(float64(gs))) {
					t.Errorf("attn_limbs_v block %d head %d channel %d: scale %g, want %g", b, hd, c, gs, ws)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("attn_limbs_v: %d limbs differ", bad)
	}
	if !math.IsNaN(float64(scales[(1*nkv+0)*taD+5])) {
		t.Error("attn_limbs_v: the block with a NaN has a finite scale")
	}
}

// TestTensorAttnLimbs runs the limb cases alone (TestKernels runs them
// among every kernel's).
func TestTensorAttnLimbs(t *testing.T) {
	h := tensorAttnHarness(t)
	limbsQKCase(t, h, rand.New(rand.NewSource(31)))
	limbsVCase(t, h, rand.New(rand.NewSource(32)))
}

// tensorAttnLimbCase checks flash_attn_t_d128 after the limb kernels (the
// host's sequence, runTensorAttn) on the shader kernels' small cases in
// the race orders, and in one order on several query tiles with a partial
// last one, a chunk at the end of a longer context, the thinker's last
// query tile at 1024 keys (attnRealShapes) and keys whose scale grows along
// the sequence (every row's max keeps moving by more than TA_SLACK: O is
// rescaled block after block, causal and under segments), element by
// element against the float kernels' bound (attnHalfRef without rounding
// to half) and by NMSE against exact attention at the conformance
// tolerance.
func tensorAttnLimbCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	small := attnMMAShapes(128)
	shapes := append(append(small, attnShape{130, 130, 4, 2, 128, 1, nil}, attnShape{65, 200, 2, 1, 128, 1, nil}), attnRealShapes...)
	ramps := []attnShape{{130, 300, 2, 1, 128, 1, nil}, {70, 70, 2, 2, 128, 0, segRanges(70, []int{0, 3, 40, 40, 70}, 0, false)}}
	shapes = append(shapes, ramps...)
	for i, sh := range shapes {
		a, q, k, v, ranges := attnInputs(rng, sh)
		orders := mslemu.RaceOrders
		if i >= len(small) {
			orders = 1
		}
		if i >= len(shapes)-len(ramps) {
			for p := 0; p < sh.Lk; p++ {
				for c := 0; c < int(a.KStride); c++ {
					k[p*int(a.KStride)+c] *= 1 + float32(p)/8
				}
			}
		}
		got := runTensorAttn(t, h, a, q, k, v, ranges, sh.Lk, orders)
		want, bound := attnHalfRef(q, k, v, a, sh.ranges, false)
		exact := attnRef(q, k, v, a, sh.ranges)
		var num, den float64
		bad := 0
		for qi := 0; qi < sh.L; qi++ {
			row := qi * int(a.OStride)
			for c := row; c < row+sh.nh*sh.D; c++ {
				g := float64(got[c])
				if d := math.Abs(g - want[c]); math.IsNaN(g) || d > bound[c] {
					if bad < 5 {
						t.Errorf("flash_attn_t_d128 %+v: query %d, element %d = %g, want %g ± %.3g", sh, qi, c-row, g, want[c], bound[c])
					}
					bad++
				}
				num += (g - exact[c]) * (g - exact[c])
				den += exact[c] * exact[c]
			}
			for c := row + sh.nh*sh.D; c < row+int(a.OStride); c++ {
				if !math.IsNaN(float64(got[c])) {
					t.Fatalf("flash_attn_t_d128 %+v wrote into the row padding", sh)
				}
			}
		}
		if bad > 0 {
			t.Errorf("flash_attn_t_d128 %+v: %d values outside the float kernels' bound", sh, bad)
		}
		if nmse := num / den; !(nmse <= tolAttn) {
			t.Errorf("flash_attn_t_d128 %+v: NMSE %.3g against exact attention > %g", sh, nmse, tolAttn)
		}
	}
}

func init() {
	register("attn_limbs_qk", limbsQKCase)
	register("attn_limbs_v", limbsVCase)
	register("flash_attn_t_d128", tensorAttnLimbCase)
}

// TestLimbSplit: the reference split recovers every code and keeps each
// vector's error within half a code of its scale.
func TestLimbSplit(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for n := 0; n < 200; n++ {
		x := randF32(rng, taD, math.Exp(rng.NormFloat64()*4))
		x[rng.Intn(taD)] *= 30
		h, m, l, s := limbSplit(x)
		for i, v := range x {
			got := float64(s) * (65536*float64(h[i]) + 256*float64(m[i]) + float64(l[i]))
			if d := math.Abs(got - float64(v)); d > 0.51*float64(s)+1e-6*math.Abs(float64(v)) {
				t.Fatalf("vector %d element %d: %g from limbs %d %d %d × %g, want %g", n, i, got, h[i], m[i], l[i], s, v)
			}
		}
	}
}

// tattnCase is one attention case of TestTensorAttnInt8.
type tattnCase struct {
	name   string
	sh     attnShape
	lk     int // keys in the buffers (a causal chunk sees its first sh.Lk)
	orders int
	prep   func(a shaders.KargsAttn, q, k, v []float32) // shapes the inputs (nil: attnInputs' normal ones)
}

// heavyTail scales channels of every head of x (rows of stride floats) by f:
// outlier channels ~f times the rms.
func heavyTail(x []float32, stride, heads int, chans []int, f float32) {
	for r := 0; r < len(x)/stride; r++ {
		for hd := 0; hd < heads; hd++ {
			for _, c := range chans {
				x[r*stride+hd*taD+c] *= f
			}
		}
	}
}

func scaleAll(x []float32, f float32) {
	for i := range x {
		x[i] *= f
	}
}

// sinkRows multiplies the V rows of the given keys (every kv head; rows of
// stride floats) by their factors: attention sinks, values 10-30x the rms
// in the 64-key blocks of ordinary keys, so those blocks' per-channel V
// scales are set by the sinks.
func sinkRows(v []float32, stride int, keys map[int]float32) {
	for p, f := range keys {
		for c := 0; c < stride; c++ {
			v[p*stride+c] *= f
		}
	}
}

// peakOn points every query head's row at one key it sees (none in avoid;
// the case must be unranged): q ← g·k_t + noise·q with g such that key t's
// score q·k_t·scale is gap, while the others' scores stay of std ~1 (at
// noise 0.3 with q and k of std 1.5). One key dominates each row, the rest
// weigh ~e^-gap. The key is picked by a fixed hash of (query, head).
func peakOn(a shaders.KargsAttn, q, k []float32, gap, noise float32, avoid ...int) {
	group := int(a.NHead / a.NKV)
	for i := 0; i < int(a.L); i++ {
		hi := int(a.Lk)
		if a.Causal != 0 {
			hi = int(a.Lk-a.L) + i + 1
		}
		for h := 0; h < int(a.NHead); h++ {
			t := (i*131 + h*31) % hi
			for tries := 0; tries < hi && slices.Contains(avoid, t); tries++ {
				t = (t + 1) % hi
			}
			kt := k[t*int(a.KStride)+h/group*taD:][:taD]
			var n2 float32
			for _, e := range kt {
				n2 += e * e
			}
			g := gap / (n2 * a.Scale)
			row := q[i*int(a.QStride)+h*taD:][:taD]
			for c := range row {
				row[c] = g*kt[c] + noise*row[c]
			}
		}
	}
}

// TestTensorAttnInt8: flash_attn_t_d128 on the limbs against exact float64
// attention on the thinker's shapes (32 query heads over 4 kv heads of 128;
// causal at lengths that are not multiples of 64, a chunk at the end of a
// longer context, segments with a sliding window and a query without keys),
// and on stress inputs: a few channels of q and k 10x their rms (the same
// channels in both, or different ones), peaked attention (large q·k, one
// key dominating a row), attention sinks (a few V rows 10-30x the rms in
// blocks of ordinary keys: with every row's weight on an ordinary key of
// the sinks' blocks, P and V of 16 bits would be off by ~7e-8 there),
// diffuse attention over 1100 keys (all probabilities alike), one key per
// row ~15 nats above the rest, and keys whose scale grows along the
// sequence (the O rescale). Each case's NMSE is logged and held to the conformance
// tolerance; a query without keys gives 0 and nothing is written past the
// heads or the queries.
func TestTensorAttnInt8(t *testing.T) {
	h := tensorAttnHarness(t)
	rng := rand.New(rand.NewSource(14))
	emptyRow := func(r []int32) []int32 { r[2*40], r[2*40+1] = 10, 10; return r } // query 40 sees no key
	cases := []tattnCase{
		{name: "causal L=130", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1},
		{name: "causal L=64+37", sh: attnShape{101, 101, 32, 4, 128, 1, nil}, lk: 101, orders: 1},
		{name: "chunk of 37 at the end of 200", sh: attnShape{37, 200, 32, 4, 128, 1, nil}, lk: 200, orders: 1},
		{name: "causal chunk, keys past it in the buffers", sh: attnShape{45, 120, 32, 4, 128, 1, nil}, lk: 190, orders: 1},
		{name: "segments, window, an empty row", sh: attnShape{100, 100, 32, 4, 128, 0,
			emptyRow(segRanges(100, []int{0, 30, 31, 100}, 50, false))}, lk: 100, orders: 1},
		{name: "small, race orders", sh: attnShape{70, 70, 4, 2, 128, 0, segRanges(70, []int{0, 3, 40, 40, 70}, 0, false)}, lk: 70, orders: mslemu.RaceOrders},
		{name: "outlier channels 10x (same in q and k)", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				scaleAll(q, 1/1.5)
				scaleAll(k, 1/1.5)
				heavyTail(q, int(a.QStride), 32, []int{3, 50, 90, 117}, 10)
				heavyTail(k, int(a.KStride), 4, []int{3, 50, 90, 117}, 10)
			}},
		{name: "outlier channels 10x (different in q and k)", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				scaleAll(q, 1/1.5)
				scaleAll(k, 1/1.5)
				heavyTail(q, int(a.QStride), 32, []int{3, 50, 90}, 10)
				heavyTail(k, int(a.KStride), 4, []int{7, 60, 100}, 10)
			}},
		{name: "peaked (q·k/sqrt(d) of std ~10)", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				scaleAll(q, 3)
				scaleAll(k, 1.5)
			}},
		{name: "moderately peaked (std ~3)", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				scaleAll(k, 2/1.5)
			}},
		{name: "sinks: V rows 30x/10x, rows peaked elsewhere", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				peakOn(a, q, k, 8, 0.3, 10, 75, 100)
				sinkRows(v, int(a.VStride), map[int]float32{10: 30, 75: 30, 100: 10})
			}},
		{name: "sinks: V rows 10-30x, plain scores", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				sinkRows(v, int(a.VStride), map[int]float32{0: 30, 5: 10, 70: 20, 100: 30})
			}},
		{name: "diffuse: 1100 keys, scores of std ~0.1", sh: attnShape{64, 1100, 8, 1, 128, 1, nil}, lk: 1100, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				scaleAll(q, 0.1/2.25)
			}},
		{name: "one key per row ~15 above the rest", sh: attnShape{130, 130, 32, 4, 128, 1, nil}, lk: 130, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				peakOn(a, q, k, 15, 0.3)
			}},
		{name: "keys growing along the sequence (O rescaled)", sh: attnShape{130, 300, 4, 1, 128, 1, nil}, lk: 300, orders: 1,
			prep: func(a shaders.KargsAttn, q, k, v []float32) {
				for p := 0; p < len(k)/int(a.KStride); p++ {
					for c := 0; c < int(a.KStride); c++ {
						k[p*int(a.KStride)+c] *= 1 + float32(p)/8
					}
				}
			}},
	}
	worst := 0.0
	for _, c := range cases {
		sh := c.sh
		a, q, k, v, ranges := attnInputs(rng, shapeWithKeys(sh, c.lk))
		a.Lk = int32(sh.Lk) // a chunk sees the first sh.Lk of c.lk keys
		if c.prep != nil {
			c.prep(a, q, k, v)
		}
		got := runTensorAttn(t, h, a, q, k, v, ranges, c.lk, c.orders)
		want := attnRef(q, k, v, a, sh.ranges)
		for i := 0; sh.ranges != nil && i < sh.L; i++ {
			if sh.ranges[2*i] == sh.ranges[2*i+1] { // no keys: 0 (attnRef's 0/0)
				for e := i * int(a.OStride); e < i*int(a.OStride)+sh.nh*taD; e++ {
					want[e] = 0
				}
			}
		}
		var num, den, maxErr float64
		for i := 0; i < sh.L; i++ {
			row := i * int(a.OStride)
			for e := row; e < row+int(a.OStride); e++ {
				g := float64(got[e])
				if e >= row+sh.nh*taD {
					if !math.IsNaN(g) {
						t.Fatalf("%s: wrote into the row padding of query %d", c.name, i)
					}
					continue
				}
				if math.IsNaN(g) || math.IsInf(g, 0) {
					t.Fatalf("%s: query %d element %d = %g, want %g", c.name, i, e-row, g, want[e])
				}
				num += (g - want[e]) * (g - want[e])
				den += want[e] * want[e]
				maxErr = math.Max(maxErr, math.Abs(g-want[e]))
			}
		}
		nmse := num / den
		worst = math.Max(worst, nmse)
		t.Logf("%-46s L=%d Lk=%d heads %d/%d: NMSE %.3g, max abs error %.3g", c.name, sh.L, sh.Lk, sh.nh, sh.nkv, nmse, maxErr)
		if !(nmse <= tolAttn) {
			t.Errorf("%s: NMSE %.3g against exact attention > %g", c.name, nmse, tolAttn)
		}
		if sh.ranges != nil && sh.ranges[2*40] == sh.ranges[2*40+1] && sh.L > 40 {
			for e := 40 * int(a.OStride); e < 40*int(a.OStride)+sh.nh*taD; e++ {
				if got[e] != 0 {
					t.Fatalf("%s: query 40 sees no key but its output[%d] = %g", c.name, e-40*int(a.OStride), got[e])
				}
			}
		}
	}
	t.Logf("worst NMSE %.3g (tolerance %g)", worst, tolAttn)
}

// shapeWithKeys returns sh with lk keys in the buffers (attnInputs makes
// k and v of sh.Lk rows).
func shapeWithKeys(sh attnShape, lk int) attnShape {
	sh.Lk = lk
	return sh
}

// TestTensorAttnNaN: a NaN in a query gives NaN in that query's head and
// nowhere else; a NaN in a key gives NaN in the queries of its kv head that
// see it, and the queries before it under the causal mask stay finite; a
// query without keys gives 0.
func TestTensorAttnNaN(t *testing.T) {
	h := tensorAttnHarness(t)
	rng := rand.New(rand.NewSource(9))
	sh := attnShape{70, 70, 4, 2, 128, 1, nil}
	a, q, k, v, ranges := attnInputs(rng, sh)
	q[5*int(a.QStride)+1*taD+9] = float32(math.NaN())  // query 5, head 1
	k[50*int(a.KStride)+1*taD+3] = float32(math.NaN()) // key 50, kv head 1 (heads 2, 3)
	got := runTensorAttn(t, h, a, q, k, v, ranges, sh.Lk, 1)
	for i := 0; i < sh.L; i++ {
		for hd := 0; hd < sh.nh; hd++ {
			nan := (i == 5 && hd == 1) || (i >= 50 && hd >= 2)
			for c := 0; c < taD; c++ {
				g := got[i*int(a.OStride)+hd*taD+c]
				if math.IsNaN(float64(g)) != nan {
					t.Fatalf("query %d head %d channel %d = %g (want NaN: %v)", i, hd, c, g, nan)
				}
			}
		}
	}
}
