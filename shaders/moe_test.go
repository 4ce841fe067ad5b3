package shaders_test

import (
	"encoding/binary"
	"math"
	"math/rand"
	"sort"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

func moeTopkCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, sh := range []struct{ T, E, k, norm int }{{37, 128, 8, 1}, {5, 60, 4, 0}} {
		logits := randF32(rng, sh.T*sh.E, 2)
		args := shaders.KargsMoe{Tokens: int32(sh.T), NExpert: int32(sh.E), TopK: int32(sh.k), NormTopK: int32(sh.norm)}
		out := runJob(t, h, &mslemu.Job{Kernel: "moe_topk_f32", Grid: [3]int{groups(sh.T, 64), 1, 1}, Group: [3]int{64, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(logits)},
				{Index: 2, Data: make([]byte, 4*sh.T*sh.k)}, {Index: 3, Data: make([]byte, 4*sh.T*sh.k)}}})
		ids, ws := mslemu.ToI32(out[2]), mslemu.ToF32(out[3])
		for tk := 0; tk < sh.T; tk++ {
			l := logits[tk*sh.E : (tk+1)*sh.E]
			order := make([]int, sh.E)
			for i := range order {
				order[i] = i
			}
			sort.SliceStable(order, func(a, b int) bool { return l[order[a]] > l[order[b]] })
			var mx, sum float64 = math.Inf(-1), 0
			for _, v := range l {
				mx = math.Max(mx, float64(v))
			}
			for _, v := range l {
				sum += math.Exp(float64(v) - mx)
			}
			want := make([]float64, sh.k)
			var psum float64
			for s := 0; s < sh.k; s++ {
				want[s] = math.Exp(float64(l[order[s]])-mx) / sum
				psum += want[s]
				if int(ids[tk*sh.k+s]) != order[s] {
					t.Fatalf("token %d slot %d: expert %d, want %d", tk, s, ids[tk*sh.k+s], order[s])
				}
			}
			if sh.norm == 1 {
				for s := range want {
					want[s] /= psum
				}
			}
			checkClose(t, "moe_topk weights", ws[tk*sh.k:(tk+1)*sh.k], want, 1e-7, 1e-5)
		}
	}
}

func moeMapCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	// 37 x 8 entries span two scan chunks of 256; 300 x 1 with 2 experts
	// gives an expert more hits than one chunk holds.
	for _, sh := range []struct{ T, E, k int }{{37, 128, 8}, {3, 5, 2}, {300, 2, 1}, {64, 8, 4}} {
		ids, counts, lists := routing(rng, sh.T, sh.E, sh.k)
		args := shaders.KargsMoe{Tokens: int32(sh.T), NExpert: int32(sh.E), TopK: int32(sh.k)}
		out := runJob(t, h, &mslemu.Job{Kernel: "moe_map", Grid: [3]int{sh.E, 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.I32(ids)},
				{Index: 2, Data: make([]byte, 4*sh.E)}, {Index: 3, Data: make([]byte, 4*sh.E*sh.T)}}})
		gc, gl := mslemu.ToI32(out[2]), mslemu.ToI32(out[3])
		for e := 0; e < sh.E; e++ {
			if gc[e] != counts[e] {
				t.Fatalf("expert %d: count %d, want %d", e, gc[e], counts[e])
			}
			for i := 0; i < int(counts[e]); i++ {
				if gl[e*sh.T+i] != lists[e*sh.T+i] {
					t.Fatalf("expert %d entry %d: %d, want %d", e, i, gl[e*sh.T+i], lists[e*sh.T+i])
				}
			}
		}
	}
}

// moeCombineCase checks moe_combine_f32 (rows of f32) or, with bf16,
// moe_combine_bf16 (rows of bf16, as moe_down_* of the block formats writes
// them): a combine that read the bf16 rows as f32 would read two of them as
// one float and miss the reference by far.
func moeCombineCase(bf16 bool) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		name := "moe_combine_f32"
		if bf16 {
			name = "moe_combine_bf16"
		}
		for _, res := range []int{0, 1} {
			T, k, cols := 7, 8, 131
			ys := randF32(rng, T*k*cols, 1)
			yb := mslemu.F32(ys)
			if bf16 {
				yb = bf16Bytes(ys) // ys now holds the bf16 values
			}
			ws := randF32(rng, T*k, 0.3)
			r := randF32(rng, T*cols, 1)
			args := shaders.KargsMoe{Tokens: int32(T), TopK: int32(k), Cols: int32(cols), AddResidual: int32(res)}
			out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: [3]int{groups(T*cols, 256), 1, 1}, Group: [3]int{256, 1, 1},
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: yb}, {Index: 2, Data: mslemu.F32(ws)},
					{Index: 3, Data: mslemu.F32(r)}, {Index: 4, Data: mslemu.F32(nanF32(T*cols + 64))}}})
			want := make([]float64, T*cols)
			for tk := 0; tk < T; tk++ {
				for c := 0; c < cols; c++ {
					var s float64
					if res == 1 {
						s = float64(r[tk*cols+c])
					}
					for j := 0; j < k; j++ {
						s += float64(ws[tk*k+j]) * float64(ys[(tk*k+j)*cols+c])
					}
					want[tk*cols+c] = s
				}
			}
			got := mslemu.ToF32(out[4])
			checkClose(t, name, got[:T*cols], want, 1e-6, 1e-5)
			for i, v := range got[T*cols:] {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("%s wrote past the output (element %d after it)", name, i)
				}
			}
		}
	}
}

// halfBytes rounds v to half in place and returns the halves' bytes.
func halfBytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		hb := quant.Float32ToFloat16(x)
		binary.LittleEndian.PutUint16(b[2*i:], hb)
		v[i] = quant.Float16ToFloat32(hb)
	}
	return b
}

// bf16Bytes rounds v to bf16 in place and returns the bf16 values' bytes.
func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		hb := quant.Float32ToBF16(x)
		binary.LittleEndian.PutUint16(b[2*i:], hb)
		v[i] = quant.BF16ToFloat32(hb)
	}
	return b
}

// nan16 is n 16-bit NaNs (0x7fc0: a NaN as bf16 and as half).
func nan16(n int) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], 0x7fc0)
	}
	return b
}

// moeBF16 reports whether a format's moe_down_* writes its rows in bf16
// (the block formats; f32, bf16 and f16 write f32).
func moeBF16(f fmtInfo) bool { return moeHalf(f) && f.name != "f16" }

// moeGuard is the elements of NaN after the last output row of the
// gathered-matmul checks: a kernel that writes past its rows shows there.
const moeGuard = 64

func moeGridCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	E := 37
	counts := make([]int32, E)
	for i := range counts {
		counts[i] = int32(rng.Intn(200))
	}
	counts[3], counts[4], counts[5] = 0, 64, 65
	args := shaders.KargsMoeTiles{NExpert: int32(E), RowsGu: 12, RowsDown: 5}
	out := runJob(t, h, &mslemu.Job{Kernel: "moe_grid", Grid: [3]int{groups(E, 32), 1, 1}, Group: [3]int{32, 1, 1},
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.I32(counts)}, {Index: 2, Data: make([]byte, 24*E)}}})
	g := mslemu.ToI32(out[2])
	for e, c := range counts {
		n := (c + 63) / 64
		if want := [6]int32{12, n, 1, 5, n, 1}; [6]int32(g[6*e:6*e+6]) != want {
			t.Fatalf("expert %d (count %d): grids %v, want %v", e, c, g[6*e:6*e+6], want)
		}
	}
}

// moeTilesCase checks the tile table against a sequential walk, with
// experts past one scan chunk (300 > 256) and empty experts.
func moeTilesCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, E := range []int{37, 300} {
		counts := make([]int32, E)
		for i := range counts {
			counts[i] = int32(rng.Intn(160))
		}
		counts[3], counts[4], counts[5] = 0, 64, 65
		var want []int32
		for e, c := range counts {
			for j := int32(0); 64*j < c; j++ {
				want = append(want, int32(e), 64*j)
			}
		}
		size := 2 * (E + 1 + len(want))
		args := shaders.KargsMoeTiles{NExpert: int32(E), RowsGu: 7, RowsDown: 9}
		out := runJob(t, h, &mslemu.Job{Kernel: "moe_tiles", Grid: [3]int{1, 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.I32(counts)},
				{Index: 2, Data: mslemu.I32(make([]int32, size))}, {Index: 3, Data: make([]byte, 24)}}})
		g, tiles := mslemu.ToI32(out[3]), mslemu.ToI32(out[2])
		n := int32(len(want) / 2)
		if [6]int32(g) != [6]int32{7, n, 1, 9, n, 1} {
			t.Fatalf("E=%d: grids %v, want [7 %d 1 9 %d 1]", E, g, n, n)
		}
		for i := range want {
			if tiles[i] != want[i] {
				t.Fatalf("E=%d: tile word %d = %d, want %d", E, i, tiles[i], want[i])
			}
		}
		for i := len(want); i < size; i++ {
			if tiles[i] != 0 {
				t.Fatalf("E=%d: wrote past the table (word %d)", E, i)
			}
		}
	}
}

// ---- the gathered matmuls ----------------------------------------------------

// moeHalf reports whether the tile element type is half of a format's gathered matmuls: half for
// every format but f32 and bf16 (float tiles keep the bf16 release's answers byte-identical to
// the reference).
func moeHalf(f fmtInfo) bool { return f.name != "f32" && f.name != "bf16" }

// moeRoundHalf rounds v to the nearest half (ties to even), as the kernels do
// when they stage a value in a half tile.
func moeRoundHalf(v float64) float64 {
	return float64(quant.Float16ToFloat32(quant.Float32ToFloat16(float32(v))))
}

// stack is E experts' matrices of one format stored back to back (as a GGUF
// *_exps tensor), with what the kernels compute from them: the dequantized
// weights, rounded to half for the half kernels.
type stack struct {
	ws           []*weights
	data, sc, bi []byte
	deq          [][]float64 // per expert [M][K], as staged in the tile
}

// makeStack makes E experts; only those live reports true are filled (the
// others are zero bytes that the kernel must not read, and have no deq).
func makeStack(t *testing.T, rng *rand.Rand, f fmtInfo, E, M, K int, live func(e int) bool) *stack {
	s := &stack{}
	for e := 0; e < E; e++ {
		if e > 0 && !live(e) {
			w := *s.ws[0]
			w.data, w.sc, w.bi, w.deq = make([]byte, len(w.data)), make([]byte, len(w.sc)), make([]byte, len(w.bi)), nil
			s.ws = append(s.ws, &w)
			s.data = append(s.data, w.data...)
			if w.sRow > 0 {
				s.sc = append(s.sc, w.sc...)
				s.bi = append(s.bi, w.bi...)
			}
			s.deq = append(s.deq, nil)
			continue
		}
		w := makeWeights(t, rng, moderate(t, f), M, K)
		if e > 0 && f.name[:3] == "mlx" {
			w = regroup(t, rng, f, w, s.ws[0])
		}
		s.ws = append(s.ws, w)
		s.data = append(s.data, w.data...)
		if w.sRow > 0 {
			s.sc = append(s.sc, w.sc...)
			s.bi = append(s.bi, w.bi...)
		}
		d := make([]float64, len(w.deq))
		for i, v := range w.deq {
			d[i] = v
			if moeHalf(f) {
				d[i] = moeRoundHalf(v)
			}
		}
		s.deq = append(s.deq, d)
	}
	if s.sc == nil {
		s.sc, s.bi = s.data, s.data
	}
	return s
}

// moderate returns f with its fixture blocks limited to those whose
// weights stay within ±4 (the fixtures also hold 'huge' blocks): h =
// SiLU(g)·u of such weights stays far inside half's range, as an expert's
// does, while the huge blocks would take products of the gate-up test to
// 1e9, past the 65504 that a half h can hold.
func moderate(t *testing.T, f fmtInfo) fmtInfo {
	if f.fixture == "" {
		return f
	}
	m := f
	m.name += "/moderate"
	if pools[m.name] == nil {
		p, q := loadPool(t, f), &blockPool{}
		for i, d := range p.deq {
			ok := true
			for _, v := range d {
				ok = ok && math.Abs(float64(v)) <= 4
			}
			if ok {
				q.blocks, q.deq = append(q.blocks, p.blocks[i]), append(q.deq, d)
			}
		}
		if len(q.blocks) < 16 {
			t.Fatalf("%s fixture: only %d blocks within ±4", f.name, len(q.blocks))
		}
		pools[m.name] = q
	}
	return m
}

// dot returns sum x[k]*w[m][k] and sum |x[k]*w[m][k]|.
func dot(x []float64, w []float64, m, K int) (s, a float64) {
	for k := 0; k < K; k++ {
		p := x[k] * w[m*K+k]
		s += p
		a += math.Abs(p)
	}
	return
}

// moeGather is one gathered launch's routing: the per-expert lists and the
// grid (with args.tiles = 1, the tile table listed in a shuffled expert
// order: the order of the table is free).
type moeGather struct {
	ids, counts, lists, tiles []int32
	grid                      [3]int
}

func gatherFor(rng *rand.Rand, ids []int32, T, E, topk, rowTiles int, table bool) moeGather {
	g := moeGather{ids: ids, counts: make([]int32, E), lists: make([]int32, E*T)}
	for e := 0; e < E; e++ {
		for i, id := range ids {
			if id == int32(e) {
				g.lists[e*T+int(g.counts[e])] = int32(i)
				g.counts[e]++
			}
		}
	}
	if !table {
		g.tiles = []int32{-1, -1} // must not be read
		g.grid = [3]int{rowTiles, groups(T, 64), E}
		return g
	}
	for _, e := range rng.Perm(E) {
		for n0 := int32(0); n0 < g.counts[e]; n0 += 64 {
			g.tiles = append(g.tiles, int32(e), n0)
		}
	}
	g.grid = [3]int{rowTiles, len(g.tiles) / 2, 1}
	return g
}

func randomIDs(rng *rand.Rand, T, E, topk int) []int32 {
	ids := make([]int32, T*topk)
	for t := 0; t < T; t++ {
		for s, e := range rng.Perm(E)[:topk] {
			ids[t*topk+s] = int32(e)
		}
	}
	return ids
}

func moeArgs(s *stack, M, K, T, E, topk, xStride, yStride int, perSlot, table bool) shaders.KargsMatmul {
	w := s.ws[0]
	a := shaders.KargsMatmul{M: int32(M), N: int32(T), K: int32(K), XStride: int32(xStride), YStride: int32(yStride),
		GroupSize: int32(w.groupSize), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRow), ScaleBF16: int32(w.sbf),
		ExpertBytes: uint64(M * w.rowBytes), SExpertBytes: uint64(M * w.sRow), NExpert: int32(E), TopK: int32(topk)}
	if perSlot {
		a.XPerSlot = 1
	}
	if table {
		a.Tiles = 1
	}
	return a
}

// moeShape is one gathered-matmul check: T tokens routed to topk of E
// experts, M output rows, K inputs, x rows xPad elements longer than K.
type moeShape struct {
	T, E, topk, M, K, xPad int
	table                  bool
	orders                 int                          // 0: the harness's (race) orders
	ids                    func(rng *rand.Rand) []int32 // nil: random
	stored                 int                          // experts with bytes (0: E); ids stay below
	rowTiles               int                          // row tiles launched and checked (0: all)
	// twin: another kernel of the same op (the shader kernel of a tensor
	// kernel) run on the same inputs; the two must agree within the sum of
	// their tolerances against the reference.
	twin string
}

// storedExperts returns how many experts the test stores and which of them
// the routing uses (the others hold zero bytes).
func (sh moeShape) storedExperts(ids []int32) (int, func(int) bool) {
	used := map[int]bool{}
	for _, e := range ids {
		used[int(e)] = true
	}
	n := sh.E
	if sh.stored > 0 {
		n = sh.stored
	}
	return n, func(e int) bool { return used[e] }
}

// launched returns the row tiles the check launches.
func (sh moeShape) launched(all int) int {
	if sh.rowTiles > 0 {
		return min(sh.rowTiles, all)
	}
	return all
}

func moeShapes(f fmtInfo, M int) []moeShape {
	K := 256
	if f.elems == 1 {
		K = 101 // a row tail inside the last 32-wide step
	}
	return []moeShape{
		// ~67 entries per expert: a full and a partial 64-token tile; x rows
		// a multiple of 4 long (vector loads).
		{T: 100, E: 3, topk: 2, M: M, K: K, xPad: (4-K%4)%4 + 4, table: true},
		// Grid z = expert (experts stored one by one), scalar x loads.
		{T: 37, E: 3, topk: 2, M: M, K: K, xPad: 1},
	}
}

// realShape: the thinker's MoE (hidden 2048, 128 experts top-8, expert FFN
// 768: the kernel's arguments are the model's). To keep the emulation
// affordable, 70 tokens are all routed to the same 8 experts (in shuffled
// slots) among the first 16, so every active expert has a full and a
// partial 64-token tile and only 16 experts need bytes, and two row tiles
// are launched (and checked); one order (the small shapes check races).
func realShape(gu bool) moeShape {
	s := moeShape{T: 70, E: 128, topk: 8, M: 2048, K: 768, xPad: 0, table: true, orders: 1, stored: 16, rowTiles: 2}
	if gu {
		s.M, s.K = 768, 2048
	}
	s.ids = func(rng *rand.Rand) []int32 {
		set := rng.Perm(16)[:8]
		ids := make([]int32, 70*8)
		for t := 0; t < 70; t++ {
			for s, j := range rng.Perm(8) {
				ids[t*8+s] = int32(set[j])
			}
		}
		return ids
	}
	return s
}

func moeSilu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// moeGuCase checks h = SiLU(x Wg^T) * (x Wu^T) for every routed entry, by
// the kernel prefix+f.name (moe_gu_ or the tensor path's moe_gu_t_). The
// reference uses the values the kernel multiplies (x and W rounded to half
// for the half kernels) in float64: float accumulation then allows 2e-6 of
// sum |x w| on each product, as for every matmul, carried through SiLU·up,
// plus the final rounding of h to half.
func moeGuCase(prefix string, f fmtInfo, shapes []moeShape) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range shapes {
			ids := randomIDs(rng, sh.T, sh.E, sh.topk)
			if sh.ids != nil {
				ids = sh.ids(rng)
			}
			stored, live := sh.storedExperts(ids)
			gate := makeStack(t, rng, f, stored, sh.M, sh.K, live)
			up := makeStack(t, rng, f, stored, sh.M, sh.K, live)
			if f.name[:3] == "mlx" && (up.ws[0].groupSize != gate.ws[0].groupSize || up.ws[0].sbf != gate.ws[0].sbf) {
				up = makeStackLike(t, rng, f, stored, gate, live)
			}
			g := gatherFor(rng, ids, sh.T, sh.E, sh.topk, sh.launched(groups(sh.M, 32)), sh.table)
			rowsChecked := min(sh.M, 32*g.grid[0])
			xStride, yStride := sh.K+sh.xPad, sh.M+3
			// h = SiLU(g)·u is stored in half and must fit it (65504), as an
			// expert's does: the fixture formats are limited to moderate
			// blocks, the MLX weights (random codes times random scales)
			// are not, so their x is smaller (at 1, mlx8 reaches ~1e5).
			xScale := 1.0
			if f.name[:3] == "mlx" {
				xScale = 0.25
			}
			x := randF32(rng, sh.T*xStride, xScale)
			entries := sh.T * sh.topk
			half := moeHalf(f)
			var y []byte
			if half {
				y = make([]byte, 2*entries*yStride)
				for i := range entries * yStride {
					binary.LittleEndian.PutUint16(y[2*i:], 0x7e00) // NaN
				}
			} else {
				y = mslemu.F32(nanF32(entries * yStride))
			}
			args := moeArgs(gate, sh.M, sh.K, sh.T, sh.E, sh.topk, xStride, yStride, false, sh.table)
			name := prefix + f.name
			out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: g.grid, Group: [3]int{128, 1, 1}, Orders: sh.orders,
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: gate.data}, {Index: 2, Data: gate.sc},
					{Index: 3, Data: gate.bi}, {Index: 4, Data: mslemu.F32(x)}, {Index: 5, Data: y},
					{Index: 6, Data: mslemu.I32(g.counts)}, {Index: 7, Data: mslemu.I32(g.lists)}, {Index: 8, Data: mslemu.I32(g.tiles)},
					{Index: 9, Data: up.data}, {Index: 10, Data: up.sc}, {Index: 11, Data: up.bi}}})
			read := func(out [][]byte) func(i int) float64 {
				return func(i int) float64 {
					if half {
						return float64(quant.Float16ToFloat32(binary.LittleEndian.Uint16(out[5][2*i:])))
					}
					return float64(mslemu.ToF32(out[5][4*i : 4*i+4])[0])
				}
			}
			got, twin := read(out), func(int) float64 { return math.NaN() }
			if sh.twin != "" {
				twin = read(runJob(t, harnesses[sh.twin], &mslemu.Job{Kernel: sh.twin, Grid: g.grid, Group: [3]int{128, 1, 1}, Orders: 1,
					Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: gate.data}, {Index: 2, Data: gate.sc},
						{Index: 3, Data: gate.bi}, {Index: 4, Data: mslemu.F32(x)}, {Index: 5, Data: y},
						{Index: 6, Data: mslemu.I32(g.counts)}, {Index: 7, Data: mslemu.I32(g.lists)}, {Index: 8, Data: mslemu.I32(g.tiles)},
						{Index: 9, Data: up.data}, {Index: 10, Data: up.sc}, {Index: 11, Data: up.bi}}}))
			}
			bad := 0
			xr := make([]float64, sh.K)
			for entry := 0; entry < entries; entry++ {
				tk, e := entry/sh.topk, int(ids[entry])
				for k := range xr {
					xr[k] = float64(x[tk*xStride+k])
					if half {
						xr[k] = moeRoundHalf(xr[k])
					}
				}
				for m := 0; m < rowsChecked; m++ {
					gv, ga := dot(xr, gate.deq[e], m, sh.K)
					uv, ua := dot(xr, up.deq[e], m, sh.K)
					want := moeSilu(gv) * uv
					// d silu/dg is within [-0.1, 1.1].
					tol := 1.1*2e-6*ga*math.Abs(uv) + math.Abs(moeSilu(gv))*2e-6*ua + 1e-6*math.Abs(want) + 1e-30
					if half {
						tol += math.Ldexp(math.Abs(want)+tol, -11) + math.Ldexp(1, -24)
					}
					v := got(entry*yStride + m)
					if d := math.Abs(v - want); !(d <= tol) {
						if bad < 5 {
							t.Errorf("%s T=%d M=%d K=%d entry %d (expert %d) row %d: %g, want %g (tolerance %g)", name, sh.T, sh.M, sh.K, entry, e, m, v, want, tol)
						}
						bad++
					}
					if sh.twin != "" {
						if tw := twin(entry*yStride + m); !(math.Abs(v-tw) <= 2*tol) {
							if bad < 5 {
								t.Errorf("%s T=%d entry %d row %d: %g, %s gives %g (tolerance %g)", name, sh.T, entry, m, v, sh.twin, tw, 2*tol)
							}
							bad++
						}
					}
				}
				for m := sh.M; m < yStride; m++ {
					if v := got(entry*yStride + m); !math.IsNaN(v) {
						t.Fatalf("%s wrote into the row padding (entry %d column %d: %g)", name, entry, m, v)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s T=%d M=%d K=%d: %d of %d outputs off", name, sh.T, sh.M, sh.K, bad, entries*sh.M)
			}
		}
	}
}

// makeStackLike makes a stack with the MLX group size and scale type of ref
// (gate and up share their storage).
func makeStackLike(t *testing.T, rng *rand.Rand, f fmtInfo, E int, ref *stack, live func(int) bool) *stack {
	for {
		s := makeStack(t, rng, f, E, ref.ws[0].M, ref.ws[0].K, live)
		if s.ws[0].groupSize == ref.ws[0].groupSize && s.ws[0].sbf == ref.ws[0].sbf {
			return s
		}
	}
}

// moeDownCase checks (kernel prefix+f.name) y[entry] = W_e h[entry] with h one row per entry in
// the kernel's element type (half values for the half kernels) and y one row per entry (bf16 for
// the block formats: within the matmul's 2e-6 of sum |x w| plus its rounding to bf16, else f32),
// the row padding and a guard band after the last row left NaN.
func moeDownCase(prefix string, f fmtInfo, shapes []moeShape) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range shapes {
			ids := randomIDs(rng, sh.T, sh.E, sh.topk)
			if sh.ids != nil {
				ids = sh.ids(rng)
			}
			stored, live := sh.storedExperts(ids)
			w := makeStack(t, rng, f, stored, sh.M, sh.K, live)
			g := gatherFor(rng, ids, sh.T, sh.E, sh.topk, sh.launched(groups(sh.M, 64)), sh.table)
			rowsChecked := min(sh.M, 64*g.grid[0])
			entries := sh.T * sh.topk
			xStride, yStride := sh.K+sh.xPad, sh.M+2
			xv := randF32(rng, entries*xStride, 1)
			half, bf16 := moeHalf(f), moeBF16(f)
			xb, yb := mslemu.F32(xv), mslemu.F32(nanF32(entries*yStride+moeGuard))
			if half {
				xb = halfBytes(xv)
			}
			if bf16 {
				yb = nan16(entries*yStride + moeGuard)
			}
			args := moeArgs(w, sh.M, sh.K, sh.T, sh.E, sh.topk, xStride, yStride, true, sh.table)
			name := prefix + f.name
			// read returns the kernel's y as float64s (from bf16 for the
			// block formats).
			read := func(b []byte) []float64 {
				v := make([]float64, entries*yStride+moeGuard)
				for i := range v {
					if bf16 {
						v[i] = float64(quant.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
					} else {
						v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
					}
				}
				return v
			}
			out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: g.grid, Group: [3]int{128, 1, 1}, Orders: sh.orders,
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc},
					{Index: 3, Data: w.bi}, {Index: 4, Data: xb}, {Index: 5, Data: yb},
					{Index: 6, Data: mslemu.I32(g.counts)}, {Index: 7, Data: mslemu.I32(g.lists)}, {Index: 8, Data: mslemu.I32(g.tiles)}}})
			got := read(out[5])
			var twin []float64
			if sh.twin != "" {
				twin = read(runJob(t, harnesses[sh.twin], &mslemu.Job{Kernel: sh.twin, Grid: g.grid, Group: [3]int{128, 1, 1}, Orders: 1,
					Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc},
						{Index: 3, Data: w.bi}, {Index: 4, Data: xb}, {Index: 5, Data: yb},
						{Index: 6, Data: mslemu.I32(g.counts)}, {Index: 7, Data: mslemu.I32(g.lists)}, {Index: 8, Data: mslemu.I32(g.tiles)}}})[5])
			}
			for i, v := range got[entries*yStride:] {
				if !math.IsNaN(v) {
					t.Fatalf("%s wrote %g into the guard band after the last row (element %d)", name, v, i)
				}
			}
			xr := make([]float64, sh.K)
			bad := 0
			for entry := 0; entry < entries; entry++ {
				e := int(ids[entry])
				for k := range xr {
					xr[k] = float64(xv[entry*xStride+k])
				}
				for m := range rowsChecked {
					want, abs := dot(xr, w.deq[e], m, sh.K)
					// The float sum within 2e-6 of sum |x w|, then (bf16)
					// one rounding to 8 significant bits: 2^-8 of the
					// value.
					tol := 2e-6*abs + 1e-30
					if bf16 {
						tol += math.Ldexp(math.Abs(want)+tol, -8)
					}
					v := got[entry*yStride+m]
					if d := math.Abs(v - want); !(d <= tol) {
						if bad < 5 {
							t.Errorf("%s T=%d M=%d K=%d entry %d (expert %d) row %d: %g, want %g (tolerance %.3g)", name, sh.T, sh.M, sh.K, entry, e, m, v, want, tol)
						}
						bad++
					}
					// Both kernels within tol of the reference.
					if twin != nil && !(math.Abs(v-twin[entry*yStride+m]) <= 2*tol) {
						t.Fatalf("%s T=%d entry %d row %d: %g, %s gives %g", name, sh.T, entry, m, v, sh.twin, twin[entry*yStride+m])
					}
				}
				for m := sh.M; m < yStride; m++ {
					if !math.IsNaN(got[entry*yStride+m]) {
						t.Fatalf("%s wrote into the row padding", name)
					}
				}
				if bad > 0 {
					t.Errorf("%s T=%d M=%d K=%d entry %d: %d of %d outputs off", name, sh.T, sh.M, sh.K, entry, bad, rowsChecked)
					return
				}
			}
		}
	}
}

func init() {
	register("moe_tiles", moeTilesCase)
	register("moe_grid", moeGridCase)
	register("moe_topk_f32", moeTopkCase)
	register("moe_map", moeMapCase)
	register("moe_combine_f32", moeCombineCase(false))
	register("moe_combine_bf16", moeCombineCase(true))
	for _, f := range formats {
		gu, down := moeShapes(f, 45), moeShapes(f, 70)
		if f.name == "q4_K" {
			// The thinker's shapes at 70 tokens on 8 experts, and at 1, 65
			// and 600 tokens on 16 (one partial tile, a full and a partial
			// one, several full ones per expert).
			gu = append(gu, realShape(true), realShapeT(true, 1, ""), realShapeT(true, 65, ""), realShapeT(true, 600, ""))
			down = append(down, realShape(false), realShapeT(false, 1, ""), realShapeT(false, 65, ""), realShapeT(false, 600, ""))
		}
		register("moe_gu_"+f.name, moeGuCase("moe_gu_", f, gu))
		register("moe_down_"+f.name, moeDownCase("moe_down_", f, down))
	}
}

// TestMoEOverflowGuard: moe_gu_f16 stages x in half; a token whose x
// exceeds half's range (±65504) in a K step must be multiplied from x in
// float in that step (else its h is inf or NaN), and the choice must be the
// token's own: every token's h has the same bits whichever tokens share its
// tile, as when the backend splits a launch into row chunks (metal/moe.go)
// and the tiles gather other tokens. 70 tokens routed to one expert (tiles
// 0-63 and 64-69) against the same tokens in two launches of 40 and 30
// (tiles 0-39 | 40-69): tokens 40-63 share a tile with an overflowing token
// in the first and not in the second.
func TestMoEOverflowGuard(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	buildAll(t)
	const name = "moe_gu_f16"
	h := harnesses[name]
	rng := rand.New(rand.NewSource(14))
	const T, M, K = 70, 45, 256
	xStride, yStride := K+4, M+3
	// Weights ~1e-3, exact halves: an overflowing x (7e4) gives g and u of
	// ~70, so h stays inside half.
	mk := func() ([]byte, []float64) {
		data, deq := make([]byte, 2*M*K), make([]float64, M*K)
		for i := range deq {
			b := quant.Float32ToFloat16(float32(rng.NormFloat64() * 1e-3))
			binary.LittleEndian.PutUint16(data[2*i:], b)
			deq[i] = float64(quant.Float16ToFloat32(b))
		}
		return data, deq
	}
	gd, gq := mk()
	ud, uq := mk()
	x := randF32(rng, T*xStride, 1)
	big := map[int]bool{5: true, 66: true}
	x[5*xStride+40] = 7e4    // K step 1, first tile of the whole launch
	x[66*xStride+250] = -8e4 // K step 7, the last tile
	run := func(t0, n int) []uint16 {
		ids := make([]int32, n) // top-1 of one expert
		g := gatherFor(rng, ids, n, 1, 1, groups(M, 32), true)
		a := shaders.KargsMatmul{M: M, N: int32(n), K: K, XStride: int32(xStride), YStride: int32(yStride), RowBytes: 2 * K,
			ExpertBytes: 2 * M * K, NExpert: 1, TopK: 1, Tiles: 1}
		hb := make([]byte, 2*n*yStride)
		out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: g.grid, Group: [3]int{128, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&a)}, {Index: 1, Data: gd}, {Index: 2, Data: gd},
				{Index: 3, Data: gd}, {Index: 4, Data: mslemu.F32(x[t0*xStride : (t0+n)*xStride])}, {Index: 5, Data: hb},
				{Index: 6, Data: mslemu.I32(g.counts)}, {Index: 7, Data: mslemu.I32(g.lists)}, {Index: 8, Data: mslemu.I32(g.tiles)},
				{Index: 9, Data: ud}, {Index: 10, Data: ud}, {Index: 11, Data: ud}}})
		v := make([]uint16, n*yStride)
		for i := range v {
			v[i] = binary.LittleEndian.Uint16(out[5][2*i:])
		}
		return v
	}
	whole := run(0, T)
	split := append(run(0, 40), run(40, 30)...)
	for i := range whole {
		if whole[i] != split[i] {
			t.Fatalf("token %d row %d: h %#04x in the whole launch, %#04x in the split one", i/yStride, i%yStride, whole[i], split[i])
		}
	}
	xr := make([]float64, K)
	for tk := range T {
		for k := range xr {
			xr[k] = float64(x[tk*xStride+k])
			if !big[tk] {
				xr[k] = moeRoundHalf(xr[k])
			}
		}
		for m := range M {
			gv, ga := dot(xr, gq, m, K)
			uv, ua := dot(xr, uq, m, K)
			want := moeSilu(gv) * uv
			tol := 1.1*2e-6*ga*math.Abs(uv) + math.Abs(moeSilu(gv))*2e-6*ua + 1e-6*math.Abs(want) + 1e-30
			tol += math.Ldexp(math.Abs(want)+tol, -11) + math.Ldexp(1, -24)
			v := float64(quant.Float16ToFloat32(whole[tk*yStride+m]))
			if d := math.Abs(v - want); !(d <= tol) {
				t.Fatalf("token %d row %d: h %g, want %g (tolerance %g)", tk, m, v, want, tol)
			}
			if big[tk] && m == 0 {
				t.Logf("token %d (|x| > 65504): h[0] = %g", tk, v)
			}
		}
	}
}
