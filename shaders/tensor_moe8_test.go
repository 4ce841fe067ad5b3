package shaders_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// The int8 tensor MoE (tensor_moe.metal moe_gu_t8_q4_K, moe_down_t8_q4_K):
// q4_K experts times q8_K activation rows on int8 matmul2d. The reference
// is quant's q4_K · q8_K dot product (the CPU backend's), taken apart into
// its integers in float64: per super-block d_x·d·Σ sc·Σ q·a − d_x·dmin·Σ
// m·bsum. The kernel forms the same integers exactly and the same float
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

// q4kStack is E experts of M rows of K q4_K weights back to back; dead
// experts (live false) are zero bytes.
type q4kStack struct {
	data         []byte
	M, K, rowLen int
}

func makeQ4KStack(t *testing.T, rng *rand.Rand, E, M, K int, live func(int) bool, extreme bool) *q4kStack {
	rb, err := quant.RowBytes(quant.Q4_K, K)
	if err != nil {
		t.Fatal(err)
	}
	s := &q4kStack{data: make([]byte, E*M*rb), M: M, K: K, rowLen: rb}
	for e := 0; e < E; e++ {
		if !live(e) {
			continue
		}
		w := make([]float32, M*K)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * 0.05)
		}
		if err := quant.Quantize(quant.Q4_K, s.data[e*M*rb:(e+1)*M*rb], w, nil); err != nil {
			t.Fatal(err)
		}
		if extreme {
			// Row 0's blocks at the integer bounds: every scale and minimum
			// 63, every code 15 (with x codes of ±127 the sub-block sums
			// reach 60960, the super-block's Σ sc·I 30.7M).
			for b := 0; b < K/256; b++ {
				blk := s.data[e*M*rb+144*b : e*M*rb+144*b+144]
				binary.LittleEndian.PutUint16(blk, quant.Float32ToFloat16(1.0/(1<<14)))
				binary.LittleEndian.PutUint16(blk[2:], quant.Float32ToFloat16(1.0/(1<<12)))
				for i := 4; i < 144; i++ {
					blk[i] = 0xff
				}
			}
		}
	}
	return s
}

func (s *q4kStack) row(e, m int) []byte {
	o := (e*s.M + m) * s.rowLen
	return s.data[o : o+s.rowLen]
}

// q4kDot returns the float64 value of the kernel's sum for weight row w and
// q8_K row x of K values, and its rounding bound.
func q4kDot(w, x []byte, K int) (v, tol float64) {
	var kb quant.KBlock
	var mag float64
	nb := K / 256
	for b := 0; b < nb; b++ {
		kb.Decode(quant.Q4_K, w[144*b:144*b+144])
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

// moe8Case checks moe_gu_t8_q4_K (gu) or moe_down_t8_q4_K.
func moe8Case(gu bool) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range moe8Shapes(gu) {
			checkMoE8(t, h, rng, gu, sh)
			if t.Failed() {
				return
			}
		}
	}
}

func checkMoE8(t *testing.T, h *mslemu.Harness, rng *rand.Rand, gu bool, sh moe8Shape) {
	kernel, bm := "moe_down_t8_q4_K", 64
	if gu {
		kernel, bm = "moe_gu_t8_q4_K", 32
	}
	ids := sh.ids(rng)
	used := map[int]bool{}
	for _, e := range ids {
		used[int(e)] = true
	}
	stored := 0
	for e := range used {
		stored = max(stored, e+1)
	}
	live := func(e int) bool { return used[e] }
	w0 := makeQ4KStack(t, rng, stored, sh.M, sh.K, live, sh.extreme)
	w1 := w0
	if gu {
		w1 = makeQ4KStack(t, rng, stored, sh.M, sh.K, live, false)
	}
	rowTiles := groups(sh.M, bm)
	if sh.rowTiles > 0 {
		rowTiles = min(rowTiles, sh.rowTiles)
	}
	rowsChecked := min(sh.M, bm*rowTiles)
	g := gatherFor(rng, ids, sh.T, sh.E, sh.topk, rowTiles, sh.table)
	entries := sh.T * sh.topk
	xRows := sh.T // gate-up: a row per token; down: a row per entry
	if !gu {
		xRows = entries
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
	xStride := sh.K/256*292 + 8
	xq := q8Rows(t, xf, sh.K, xStride)
	yStride := sh.M + 3
	a := shaders.KargsMatmul{M: int32(sh.M), N: int32(sh.T), K: int32(sh.K), XStride: int32(xStride), YStride: int32(yStride),
		RowBytes: uint64(w0.rowLen), ExpertBytes: uint64(sh.M * w0.rowLen), NExpert: int32(sh.E), TopK: int32(sh.topk),
		XPerSlot: b2i32(!gu), Tiles: b2i32(sh.table)}
	// h (gate-up) in half, y (down) in bf16, NaN before the launch (0x7fc0
	// is NaN in both), with a guard band after the last row.
	yb := nan16(entries*yStride + moeGuard)
	bufs := []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: w0.data}, {Index: 2, Data: w0.data},
		{Index: 3, Data: w0.data}, {Index: 4, Data: xq}, {Index: 5, Data: yb},
		{Index: 6, Data: mslemu.I32(g.counts)}, {Index: 7, Data: mslemu.I32(g.lists)}, {Index: 8, Data: mslemu.I32(g.tiles)}}
	if gu {
		bufs = append(bufs, mslemu.Buffer{Index: 9, Data: w1.data}, mslemu.Buffer{Index: 10, Data: w1.data},
			mslemu.Buffer{Index: 11, Data: w1.data})
	}
	out := runJob(t, h, &mslemu.Job{Kernel: kernel, Grid: g.grid, Group: [3]int{128, 1, 1}, Orders: sh.orders, Buffers: bufs})
	got := make([]float32, entries*yStride+moeGuard)
	for i := range got {
		if gu {
			got[i] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(out[5][2*i:]))
		} else {
			got[i] = quant.BF16ToFloat32(binary.LittleEndian.Uint16(out[5][2*i:]))
		}
	}
	what := fmt.Sprintf("%s %s (M=%d K=%d)", kernel, sh.name, sh.M, sh.K)
	for i, v := range got[entries*yStride:] {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("%s wrote %g into the guard band after the last row (element %d)", what, v, i)
		}
	}
	bad := 0
	for entry := range entries {
		e := int(ids[entry])
		xr := entry / sh.topk
		if !gu {
			xr = entry
		}
		x := xq[xr*xStride : xr*xStride+sh.K/256*292]
		for m := range rowsChecked {
			v := float64(got[entry*yStride+m])
			gv, gt := q4kDot(w0.row(e, m), x, sh.K)
			cpu, err := quant.VecDot(quant.Q4_K, sh.K, w0.row(e, m), x)
			if err != nil {
				t.Fatal(err)
			}
			want, tol, cpuWant, cpuTol := gv, gt, float64(cpu), 2*gt
			if gu {
				uv, ut := q4kDot(w1.row(e, m), x, sh.K)
				cu, err := quant.VecDot(quant.Q4_K, sh.K, w1.row(e, m), x)
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
				r := math.Ldexp(math.Abs(want)+tol, -11) + math.Ldexp(1, -25)
				tol += r
				cpuTol += r
			} else {
				// y is stored in bf16: one rounding of the f32 sum to 8
				// significant bits.
				r := math.Ldexp(math.Abs(want)+tol, -8)
				tol += r
				cpuTol += r
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
		for m := sh.M; m < yStride; m++ {
			if v := got[entry*yStride+m]; !math.IsNaN(float64(v)) {
				t.Fatalf("%s wrote into the row padding (entry %d column %d: %g)", what, entry, m, v)
			}
		}
		if rowsChecked < sh.M && !math.IsNaN(float64(got[entry*yStride+rowsChecked])) {
			t.Fatalf("%s wrote row %d of entry %d, past the launched row tiles", what, rowsChecked, entry)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs off", what, bad, entries*rowsChecked)
	}
}

func b2i32(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

func init() {
	register("moe_gu_t8_q4_K", moe8Case(true))
	register("moe_down_t8_q4_K", moe8Case(false))
}
