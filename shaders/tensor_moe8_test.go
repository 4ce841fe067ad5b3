package shaders_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// The int8 tensor MoE (tensor_moe.metal moe_gu_t8_<fmt>, moe_down_t8_<fmt>,
// fmt each of t8Formats: q4_K, q6_K): experts times q8_K activation rows on
// int8 matmul2d. The reference is quant's K-quant · q8_K dot product (the
// CPU backend's), taken apart into its integers in float64: per super-block
// d_x·d·Σ sc·Σ q·a − d_x·dmin·Σ m·bsum (no minimums in q6_K). The kernel forms the same integers exactly and the same float
// expression per super-block, so it may differ from the float64 value only
// by float32 rounding: a few roundings per super-block term and one per
// addition, (nb + 6)·2^-24 of the sum of the terms' magnitudes.

// q8Rows quantizes rows of K floats (x[r*K:]) to q8_K rows of stride bytes
// (the bytes between rows are 0xff: a kernel that reads them goes wrong).
func q8Rows(t *testing.T, x []float32, K, stride int) []byte {
	n := len(x) / K
	rb := K / 256 * 292
	out := make([]byte, n*stride)
	for i := range out {
		out[i] = 0xff
	}
	for r := 0; r < n; r++ {
		if err := quant.QuantizeActivations(quant.Q8_K, out[r*stride:r*stride+rb], x[r*K:(r+1)*K]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// kStack is E experts of M rows of K weights of one t8Format back to back;
// dead experts (live false) are zero bytes.
type kStack struct {
	data         []byte
	M, K, rowLen int
}

func makeKStack(t *testing.T, rng *rand.Rand, f t8Format, E, M, K int, live func(int) bool, extreme bool) *kStack {
	rb, err := quant.RowBytes(f.typ, K)
	if err != nil {
		t.Fatal(err)
	}
	s := &kStack{data: make([]byte, E*M*rb), M: M, K: K, rowLen: rb}
	for e := 0; e < E; e++ {
		if !live(e) {
			continue
		}
		w := make([]float32, M*K)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * 0.05)
		}
		if err := quant.Quantize(f.typ, s.data[e*M*rb:(e+1)*M*rb], w, nil); err != nil {
			t.Fatal(err)
		}
		if extreme {
			// Row 0's blocks at the integer bounds (with x codes of ±127,
			// q4_K's sub-block sums reach 60960, the super-block's Σ sc·I
			// 30.7M; q6_K's 65024 and 133M).
			for b := 0; b < K/256; b++ {
				o := e*M*rb + f.block*b
				f.extreme(s.data[o:o+f.block], b, 1.0/(1<<14), 1.0/(1<<12))
			}
		}
	}
	return s
}

func (s *kStack) row(e, m int) []byte {
	o := (e*s.M + m) * s.rowLen
	return s.data[o : o+s.rowLen]
}

// kDot returns the float64 value of the kernel's sum for weight row w (of
// format f) and q8_K row x of K values, and its rounding bound.
func kDot(f t8Format, w, x []byte, K int) (v, tol float64) {
	var kb quant.KBlock
	var mag float64
	nb := K / 256
	for b := 0; b < nb; b++ {
		kb.Decode(f.typ, w[f.block*b:f.block*(b+1)])
		a := x[292*b : 292*b+292]
		dx := float64(math.Float32frombits(binary.LittleEndian.Uint32(a)))
		var si, sm int64
		for g := 0; g < 16; g++ {
			var s int64
			for l := 0; l < 16; l++ {
				s += int64(kb.Q[16*g+l]) * int64(int8(a[4+16*g+l]))
			}
			si += int64(kb.Scale[g]) * s
			sm += int64(kb.Min[g]) * int64(int16(binary.LittleEndian.Uint16(a[260+2*g:])))
		}
		p, q := dx*float64(kb.D)*float64(si), dx*float64(kb.DMin)*float64(sm)
		v += p - q
		mag += math.Abs(p) + math.Abs(q)
	}
	return v, float64(nb+6)*math.Ldexp(mag, -24) + 1e-30
}

// moe8Shape is one check: T tokens routed by ids (T*topk entries) to E
// experts, M output rows, K inputs.
type moe8Shape struct {
	name       string
	T, E, topk int
	M, K       int
	table      bool
	orders     int // 0: the race orders
	rowTiles   int // row tiles launched and checked (0: all)
	extreme    bool
	ids        func(rng *rand.Rand) []int32
}

// oddCounts routes T = 130 tokens top-2 over 6 experts so that they get 0,
// 1, 63, 64, 65 and 67 entries (an empty expert, a lone token, one tile
// short of full, exactly full, one over, two tiles): the sorted labels are
// paired i with i + T, distinct since no expert has T entries.
func oddCounts(rng *rand.Rand) []int32 {
	const T = 130
	var labels []int32
	for e, n := range []int{0, 1, 63, 64, 65, 67} {
		for range n {
			labels = append(labels, int32(e))
		}
	}
	ids := make([]int32, 2*T)
	for i := range T {
		a, b := labels[i], labels[i+T]
		if rng.Intn(2) == 0 {
			a, b = b, a
		}
		ids[2*i], ids[2*i+1] = a, b
	}
	return ids
}

// thinkerIDs routes T tokens to a random top-8 of the first 16 experts.
func thinkerIDs(T int) func(rng *rand.Rand) []int32 {
	return func(rng *rand.Rand) []int32 {
		ids := make([]int32, 8*T)
		for t := range T {
			for j, e := range rng.Perm(16)[:8] {
				ids[8*t+j] = int32(e)
			}
		}
		return ids
	}
}

func moe8Shapes(gu bool) []moe8Shape {
	M, K := 70, 512 // gu: 3 row tiles, the last of 6 rows; down: 2, the last of 6
	sh := []moe8Shape{
		{name: "odd counts, table", T: 130, E: 6, topk: 2, M: M, K: K, table: true, ids: oddCounts},
		{name: "odd counts, grid z", T: 130, E: 6, topk: 2, M: M, K: 256, table: false, ids: oddCounts, orders: 1},
		{name: "integer bounds", T: 20, E: 2, topk: 1, M: 33, K: 512, table: true, extreme: true, orders: 1,
			ids: func(*rand.Rand) []int32 { return []int32{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1} }},
	}
	// The thinker's shapes (hidden 2048, 128 experts top-8, expert FFN
	// 768) at 1 and 70 tokens on 16 experts, two row tiles launched.
	rM, rK := 768, 2048
	if !gu {
		rM, rK = 2048, 768
	}
	for _, T := range []int{1, 70} {
		sh = append(sh, moe8Shape{name: fmt.Sprintf("thinker T=%d", T), T: T, E: 128, topk: 8, M: rM, K: rK, table: true,
			orders: 1, rowTiles: 2, ids: thinkerIDs(T)})
	}
	return sh
}

// moe8Case checks moe_gu_t8_<f> (gu) or moe_down_t8_<f>.
func moe8Case(f t8Format, gu bool) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range moe8Shapes(gu) {
			checkMoE8(t, h, rng, f, gu, sh)
			if t.Failed() {
				return
			}
		}
	}
}

func checkMoE8(t *testing.T, h *mslemu.Harness, rng *rand.Rand, f t8Format, gu bool, sh moe8Shape) {
	r := newMoE8Run(t, rng, f, gu, sh, sh.ids(rng))
	xRows := sh.T // gate-up: a row per token; down: a row per entry
	if !gu {
		xRows = r.entries
	}
	xf := randF32(rng, xRows*sh.K, 1)
	if sh.extreme {
		for i := range xf {
			xf[i] = 1 // code -127 everywhere (d_x = -1/127)...
			if i%sh.K == 0 {
				xf[i] = -1 // ...but one 127 a row
			}
		}
	}
	r.xStride = sh.K/256*292 + 8
	r.xq = q8Rows(t, xf, sh.K, r.xStride)
	r.check(t, r.launch(t, h))
}

// moe8Run is one launch of moe_gu_t8_<f> or moe_down_t8_<f> and what checks
// it: the routing, the weights (w1: up), the q8_K rows of x (xStride bytes
// apart) and the output rows' stride (M + 3: padding the kernel must not
// write).
type moe8Run struct {
	f                        t8Format
	gu                       bool
	sh                       moe8Shape
	ids                      []int32
	g                        moeGather
	w0, w1                   *kStack
	xq                       []byte
	xStride, yStride         int
	entries, rowsChecked, bm int
}

// newMoE8Run routes ids and makes the experts they use (row 0 at the
// integer extreme with sh.extreme); x is the caller's.
func newMoE8Run(t *testing.T, rng *rand.Rand, f t8Format, gu bool, sh moe8Shape, ids []int32) *moe8Run {
	r := &moe8Run{f: f, gu: gu, sh: sh, ids: ids, bm: 64, entries: sh.T * sh.topk, yStride: sh.M + 3}
	if gu {
		r.bm = 32
	}
	used := map[int]bool{}
	for _, e := range ids {
		used[int(e)] = true
	}
	stored := 0
	for e := range used {
		stored = max(stored, e+1)
	}
	live := func(e int) bool { return used[e] }
	r.w0 = makeKStack(t, rng, f, stored, sh.M, sh.K, live, sh.extreme)
	r.w1 = r.w0
	if gu {
		r.w1 = makeKStack(t, rng, f, stored, sh.M, sh.K, live, false)
	}
	rowTiles := groups(sh.M, r.bm)
	if sh.rowTiles > 0 {
		rowTiles = min(rowTiles, sh.rowTiles)
	}
	r.rowsChecked = min(sh.M, r.bm*rowTiles)
	r.g = gatherFor(rng, ids, sh.T, sh.E, sh.topk, rowTiles, sh.table)
	return r
}

func (r *moe8Run) kernel() string {
	if r.gu {
		return "moe_gu_t8_" + r.f.name
	}
	return "moe_down_t8_" + r.f.name
}

// launch runs the kernel and returns its output buffer: h (gate-up) in
// half, y (down) in bf16, NaN before the launch (0x7fc0 is NaN in both),
// with a guard band after the last row.
func (r *moe8Run) launch(t *testing.T, h *mslemu.Harness) []byte {
	sh := r.sh
	a := shaders.KargsMatmul{M: int32(sh.M), N: int32(sh.T), K: int32(sh.K), XStride: int32(r.xStride), YStride: int32(r.yStride),
		RowBytes: uint64(r.w0.rowLen), ExpertBytes: uint64(sh.M * r.w0.rowLen), NExpert: int32(sh.E), TopK: int32(sh.topk),
		XPerSlot: b2i32(!r.gu), Tiles: b2i32(sh.table)}
	yb := nan16(r.entries*r.yStride + moeGuard)
	bufs := []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: r.w0.data}, {Index: 2, Data: r.w0.data},
		{Index: 3, Data: r.w0.data}, {Index: 4, Data: r.xq}, {Index: 5, Data: yb},
		{Index: 6, Data: mslemu.I32(r.g.counts)}, {Index: 7, Data: mslemu.I32(r.g.lists)}, {Index: 8, Data: mslemu.I32(r.g.tiles)}}
	if r.gu {
		bufs = append(bufs, mslemu.Buffer{Index: 9, Data: r.w1.data}, mslemu.Buffer{Index: 10, Data: r.w1.data},
			mslemu.Buffer{Index: 11, Data: r.w1.data})
	}
	out := runJob(t, h, &mslemu.Job{Kernel: r.kernel(), Grid: r.g.grid, Group: [3]int{128, 1, 1}, Orders: sh.orders, Buffers: bufs})
	return out[5]
}

// check compares the output (launch's buffer) with the float64 reference
// and the CPU's dot product, and the row padding, the rows past the
// launched row tiles and the guard band with NaN.
func (r *moe8Run) check(t *testing.T, out []byte) {
	t.Helper()
	entries := r.entries
	got := make([]float32, entries*r.yStride+moeGuard)
	for i := range got {
		if r.gu {
			got[i] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(out[2*i:]))
		} else {
			got[i] = quant.BF16ToFloat32(binary.LittleEndian.Uint16(out[2*i:]))
		}
	}
	what := fmt.Sprintf("%s %s (M=%d K=%d)", r.kernel(), r.sh.name, r.sh.M, r.sh.K)
	for i, v := range got[entries*r.yStride:] {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("%s wrote %g into the guard band after the last row (element %d)", what, v, i)
		}
	}
	bad := 0
	for entry := range entries {
		e := int(r.ids[entry])
		xr := entry / r.sh.topk
		if !r.gu {
			xr = entry
		}
		x := r.xq[xr*r.xStride : xr*r.xStride+r.sh.K/256*292]
		for m := range r.rowsChecked {
			v := float64(got[entry*r.yStride+m])
			gv, gt := kDot(r.f, r.w0.row(e, m), x, r.sh.K)
			cpu, err := quant.VecDot(r.f.typ, r.sh.K, r.w0.row(e, m), x)
			if err != nil {
				t.Fatal(err)
			}
			want, tol, cpuWant, cpuTol := gv, gt, float64(cpu), 2*gt
			if r.gu {
				uv, ut := kDot(r.f, r.w1.row(e, m), x, r.sh.K)
				cu, err := quant.VecDot(r.f.typ, r.sh.K, r.w1.row(e, m), x)
				if err != nil {
					t.Fatal(err)
				}
				want = moeSilu(gv) * uv
				// d SiLU/dg is within [-0.1, 1.1]; the f32 SiLU·up adds a
				// few roundings.
				tol = 1.1*gt*(math.Abs(uv)+ut) + math.Abs(moeSilu(gv))*ut + 1e-6*math.Abs(want) + 1e-30
				cpuWant = moeSilu(float64(cpu)) * float64(cu)
				cpuTol = 2 * tol
				// h is stored in half: one rounding to 11 significant
				// bits (or to the subnormals' step 2^-24).
				rnd := math.Ldexp(math.Abs(want)+tol, -11) + math.Ldexp(1, -25)
				tol += rnd
				cpuTol += rnd
			} else {
				// y is stored in bf16: one rounding of the f32 sum to 8
				// significant bits.
				rnd := math.Ldexp(math.Abs(want)+tol, -8)
				tol += rnd
				cpuTol += rnd
			}
			if d := math.Abs(v - want); !(d <= tol) {
				if bad < 5 {
					t.Errorf("%s: entry %d (expert %d) row %d: %g, want %g (off %.3g, tolerance %.3g)", what, entry, e, m, v, want, d, tol)
				}
				bad++
			} else if d := math.Abs(v - cpuWant); !(d <= cpuTol) {
				if bad < 5 {
					t.Errorf("%s: entry %d (expert %d) row %d: %g, the CPU's dot gives %g (tolerance %.3g)", what, entry, e, m, v, cpuWant, cpuTol)
				}
				bad++
			}
		}
		for m := r.sh.M; m < r.yStride; m++ {
			if v := got[entry*r.yStride+m]; !math.IsNaN(float64(v)) {
				t.Fatalf("%s wrote into the row padding (entry %d column %d: %g)", what, entry, m, v)
			}
		}
		if r.rowsChecked < r.sh.M && !math.IsNaN(float64(got[entry*r.yStride+r.rowsChecked])) {
			t.Fatalf("%s wrote row %d of entry %d, past the launched row tiles", what, r.rowsChecked, entry)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs off", what, bad, entries*r.rowsChecked)
	}
}

// TestMoE8Pair runs a layer's int8 MoE as the host chains it (metal's
// moeFused): moe_gu_t8_<g> writes h in half, quant_q8k_rows_h quantizes
// every routed entry's h to q8_K rows, moe_down_t8_<d> reads them; for every
// pairing of the formats (llama.cpp's Q4_K_M pairs q4_K gate/up with q6_K
// down in half the layers). What passes between the kernels does not
// depend on g or d: h is checked as moe8Case checks it, its q8_K rows
// byte for byte against quant's quantization of the h the kernel wrote,
// and y against the dot of the down weights with those rows.
func TestMoE8Pair(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found", mslemu.Clang)
	}
	buildAll(t)
	const T, E, topk, hidden, ffn = 70, 8, 2, 512, 256
	rng := rand.New(rand.NewSource(11))
	for _, fg := range t8Formats {
		for _, fd := range t8Formats {
			ids := randomIDs(rng, T, E, topk)
			gu := newMoE8Run(t, rng, fg, true, moe8Shape{name: "pair, down " + fd.name, T: T, E: E, topk: topk, M: ffn, K: hidden,
				table: true, orders: 1}, ids)
			gu.xStride = hidden / 256 * 292
			gu.xq = q8Rows(t, randF32(rng, T*hidden, 1), hidden, gu.xStride)
			hb := gu.launch(t, harnesses[gu.kernel()])
			gu.check(t, hb)

			// quant_q8k_rows_h over the entries' h (rows of ffn halves,
			// yStride apart: the padding is NaN, so a read of it shows).
			entries := T * topk
			hqStride := ffn / 256 * 292
			qa := shaders.KargsQ8K{Rows: int32(entries), Cols: ffn, XStride: int32(gu.yStride), YStride: int32(hqStride)}
			qo := runJob(t, harnesses["quant_q8k_rows_h"], &mslemu.Job{Kernel: "quant_q8k_rows_h",
				Grid: [3]int{groups(entries*ffn/256, 4), 1, 1}, Group: [3]int{128, 1, 1}, Orders: 1,
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&qa)}, {Index: 1, Data: hb},
					{Index: 2, Data: make([]byte, entries*hqStride)}}})
			hq := qo[2]
			hv := make([]float32, ffn)
			want := make([]byte, hqStride)
			for e := range entries {
				for i := range hv {
					hv[i] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(hb[2*(e*gu.yStride+i):]))
				}
				if err := quant.QuantizeActivations(quant.Q8_K, want, hv); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(hq[e*hqStride:(e+1)*hqStride], want) {
					t.Fatalf("gate-up %s, down %s: entry %d: quant_q8k_rows_h's q8_K row of h differs from quant's", fg.name, fd.name, e)
				}
			}

			down := newMoE8Run(t, rng, fd, false, moe8Shape{name: "pair, gate-up " + fg.name, T: T, E: E, topk: topk, M: hidden,
				K: ffn, table: true, orders: 1}, ids)
			down.xStride, down.xq = hqStride, hq
			down.check(t, down.launch(t, harnesses[down.kernel()]))
		}
	}
}

func b2i32(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

func init() {
	for _, f := range t8Formats {
		register("moe_gu_t8_"+f.name, moe8Case(f, true))
		register("moe_down_t8_"+f.name, moe8Case(f, false))
	}
}
