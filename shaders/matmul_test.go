package shaders_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// weights is a test matrix [M][K] in one storage format with its exact
// dequantization.
type weights struct {
	M, K           int
	data, sc, bi   []byte
	rowBytes, sRow int
	groupSize, sbf int
	deq            []float64
}

// fmtInfo describes the formats the kernels support: ggml formats take their
// blocks (and exact dequantizations) from testdata/quant, so every kernel is
// checked against llama.cpp's own decoding.
type fmtInfo struct {
	name       string // kernel suffix
	fixture    string // testdata/quant file stem, "" for generated formats
	elems      int
	blockBytes int
}

var formats = []fmtInfo{
	{"f32", "", 1, 4},
	{"f16", "f16", 1, 2},
	{"bf16", "bf16", 1, 2},
	{"q8_0", "q8_0", 32, 34},
	{"q5_1", "q5_1", 32, 24},
	{"q5_0", "q5_0", 32, 22},
	{"q4_1", "q4_1", 32, 20},
	{"q4_0", "q4_0", 32, 18},
	{"q6_K", "q6_K", 256, 210},
	{"q5_K", "q5_K", 256, 176},
	{"q4_K", "q4_K", 256, 144},
	{"q3_K", "q3_K", 256, 110},
	{"q2_K", "q2_K", 256, 84},
	{"mlx4", "", 32, 0},
	{"mlx8", "", 32, 0},
}

type blockPool struct {
	blocks [][]byte
	deq    [][]float32
}

var pools = map[string]*blockPool{}

func loadPool(t *testing.T, f fmtInfo) *blockPool {
	if p := pools[f.name]; p != nil {
		return p
	}
	p := &blockPool{}
	for _, variant := range []string{"", ".imat"} {
		raw, err := os.ReadFile("../testdata/quant/" + f.fixture + variant + ".blocks.bin")
		if os.IsNotExist(err) && variant != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		deqRaw, err := os.ReadFile("../testdata/quant/" + f.fixture + variant + ".deq.f32.bin")
		if err != nil {
			t.Fatal(err)
		}
		deq := mslemu.ToF32(deqRaw)
		n := len(raw) / f.blockBytes
		if n*f.elems != len(deq) {
			t.Fatalf("%s fixture: %d blocks but %d dequantized values", f.name, n, len(deq))
		}
		for i := 0; i < n; i++ {
			p.blocks = append(p.blocks, raw[i*f.blockBytes:(i+1)*f.blockBytes])
			p.deq = append(p.deq, deq[i*f.elems:(i+1)*f.elems])
		}
	}
	pools[f.name] = p
	return p
}

// f16Bits returns a random normal half in ±[2^-4, 2^2) and its value.
func f16Bits(rng *rand.Rand) (uint16, float64) {
	s, e, m := rng.Intn(2), 11+rng.Intn(6), rng.Intn(1024)
	v := math.Ldexp(1+float64(m)/1024, e-15)
	if s == 1 {
		v = -v
	}
	return uint16(s<<15 | e<<10 | m), v
}

func makeWeights(t *testing.T, rng *rand.Rand, f fmtInfo, M, K int) *weights {
	w := &weights{M: M, K: K, deq: make([]float64, M*K)}
	switch {
	case f.name == "f32":
		v := randF32(rng, M*K, 0.5)
		w.data = mslemu.F32(v)
		for i, x := range v {
			w.deq[i] = float64(x)
		}
		w.rowBytes = 4 * K
	case f.name == "mlx4" || f.name == "mlx8":
		bits := 4
		if f.name == "mlx8" {
			bits = 8
		}
		w.groupSize = []int{32, 64}[rng.Intn(2)]
		if K%w.groupSize != 0 {
			w.groupSize = 32
		}
		w.sbf = rng.Intn(2)
		groups := K / w.groupSize
		w.rowBytes = K * bits / 8
		w.sRow = 2 * groups
		w.data = make([]byte, M*w.rowBytes)
		rng.Read(w.data)
		w.sc = make([]byte, M*w.sRow)
		w.bi = make([]byte, M*w.sRow)
		scale := make([]float64, M*groups)
		bias := make([]float64, M*groups)
		for i := range scale {
			for j, dst := range []*[]float64{&scale, &bias} {
				var bitsV uint16
				var v float64
				if w.sbf == 1 {
					f := float32(rng.NormFloat64() * 0.05)
					bitsV = uint16(math.Float32bits(f) >> 16)
					v = float64(math.Float32frombits(uint32(bitsV) << 16))
				} else {
					bitsV, v = f16Bits(rng)
					v /= 64
					bitsV -= 6 << 10 // divide by 64 exactly: exponent - 6
				}
				(*dst)[i] = v
				buf := w.sc
				if j == 1 {
					buf = w.bi
				}
				binary.LittleEndian.PutUint16(buf[2*i:], bitsV)
			}
		}
		for r := 0; r < M; r++ {
			for e := 0; e < K; e++ {
				bit := e * bits
				q := (int(w.data[r*w.rowBytes+bit/8]) >> (bit % 8)) & (1<<bits - 1)
				g := r*groups + e/w.groupSize
				w.deq[r*K+e] = float64(float32(scale[g])*float32(q) + float32(bias[g]))
			}
		}
	default:
		p := loadPool(t, f)
		if K%f.elems != 0 {
			t.Fatalf("K=%d is not a multiple of the %s block", K, f.name)
		}
		nb := K / f.elems
		w.rowBytes = nb * f.blockBytes
		for r := 0; r < M; r++ {
			for b := 0; b < nb; b++ {
				i := rng.Intn(len(p.blocks))
				// Skip the 'huge' and 'tiny' fixture rows' blocks half of the time
				// so that typical magnitudes dominate.
				w.data = append(w.data, p.blocks[i]...)
				for j, v := range p.deq[i] {
					w.deq[r*K+b*f.elems+j] = float64(v)
				}
			}
		}
	}
	if w.sc == nil {
		w.sc, w.bi = w.data, w.data
	}
	return w
}

// matmulRef returns y[n][m] = sum_k x[n][k] W[m][k] and sum |x W| per output.
func matmulRef(w *weights, x []float32, xStride int, rowOf func(n int) int, N int) (want, abs []float64) {
	want = make([]float64, N*w.M)
	abs = make([]float64, N*w.M)
	for n := 0; n < N; n++ {
		xr := x[rowOf(n)*xStride:]
		for m := 0; m < w.M; m++ {
			var s, a float64
			for k := 0; k < w.K; k++ {
				p := float64(xr[k]) * w.deq[m*w.K+k]
				s += p
				a += math.Abs(p)
			}
			want[n*w.M+m], abs[n*w.M+m] = s, a
		}
	}
	return
}

func checkAbsRef(t *testing.T, what string, got []float32, want, abs []float64, rel float64) {
	t.Helper()
	bad := 0
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= rel*abs[i]+1e-30) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g (|x·w| sum %g)", what, i, got[i], want[i], abs[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs off", what, bad, len(want))
	}
}

func nanF32(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

func matmulArgs(w *weights, N, xStride, yStride int) shaders.KargsMatmul {
	return shaders.KargsMatmul{M: int32(w.M), N: int32(N), K: int32(w.K), XStride: int32(xStride), YStride: int32(yStride),
		GroupSize: int32(w.groupSize), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRow), ScaleBF16: int32(w.sbf)}
}

func mulMvCase(f fmtInfo) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		ks := []int{512}
		if f.elems == 1 {
			ks = []int{100, 512}
		}
		for _, K := range ks {
			M, N := 37, 3
			w := makeWeights(t, rng, f, M, K)
			xStride, yStride := K+5, M+3
			x := randF32(rng, N*xStride, 1)
			y := nanF32(N * yStride)
			args := matmulArgs(w, N, xStride, yStride)
			name := "mul_mv_" + f.name
			out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: [3]int{groups(M, 4), N, 1}, Group: [3]int{64, 1, 1},
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc}, {Index: 3, Data: w.bi}, {Index: 4, Data: mslemu.F32(x)}, {Index: 5, Data: mslemu.F32(y)}}})
			got := mslemu.ToF32(out[5])
			want, abs := matmulRef(w, x, xStride, func(n int) int { return n }, N)
			for n := 0; n < N; n++ {
				checkAbsRef(t, fmt.Sprintf("%s K=%d row %d", name, K, n), got[n*yStride:n*yStride+M], want[n*M:(n+1)*M], abs[n*M:(n+1)*M], 2e-6)
				for m := M; m < yStride; m++ {
					if !math.IsNaN(float64(got[n*yStride+m])) {
						t.Fatalf("%s wrote into the row padding", name)
					}
				}
			}
		}
	}
}

// The tiles mul_mm stages a format in (matmul.metal, mm_tiles): W and x in
// half except for f32 and bf16 weights, with a K step in which some x of a
// 32-token group is beyond ±65504 taken from x in float for that group.
func halfW(f fmtInfo) bool { return f.name != "f32" && f.name != "bf16" }
func halfX(f fmtInfo) bool { return f.name != "f32" && f.name != "bf16" }

// mmHalf is v rounded to the nearest half, as the GPU converts it.
func mmHalf(v float32) float32 { return quant.Float16ToFloat32(quant.Float32ToFloat16(v)) }

// stagedW returns w with the values the kernel multiplies: its dequantized
// weights rounded to half where the format's tile is half.
func stagedW(f fmtInfo, w *weights) *weights {
	if !halfW(f) {
		return w
	}
	c := *w
	c.deq = make([]float64, len(w.deq))
	for i, v := range w.deq {
		c.deq[i] = float64(mmHalf(float32(v)))
	}
	return &c
}

// stagedX returns the x values the kernel multiplies: each overflow group of
// tokens (see xGroups) and 32-wide K step rounded to half, unless a value in
// it is beyond ±65504 (then kept in float).
func stagedX(f fmtInfo, x []float32, xStride, K int, tiles [][]int) []float32 {
	out := append([]float32(nil), x...)
	if !halfX(f) {
		return out
	}
	for _, rows := range tiles {
		for k0 := 0; k0 < K; k0 += 32 {
			big := false
			for _, r := range rows {
				for k := k0; k < min(k0+32, K); k++ {
					big = big || math.Abs(float64(x[r*xStride+k])) > 65504
				}
			}
			if big {
				continue
			}
			for _, r := range rows {
				for k := k0; k < min(k0+32, K); k++ {
					out[r*xStride+k] = mmHalf(x[r*xStride+k])
				}
			}
		}
	}
	return out
}

// xGroups lists the overflow groups of mul_mm's tokens: 32 in order (each
// 64-token tile holds two).
func xGroups(N int) [][]int {
	var ts [][]int
	for n0 := 0; n0 < N; n0 += 32 {
		var t []int
		for n := n0; n < min(n0+32, N); n++ {
			t = append(t, n)
		}
		ts = append(ts, t)
	}
	return ts
}

// mmShape is one mul_mm case: the matrix, whether the tiles fill y
// (FC_mm_direct), x's row stride past K (a multiple of 4 takes the float4
// loads), and x values beyond half's range at (token, k).
type mmShape struct {
	M, N, K int
	direct  bool
	xPad    int
	big     [][2]int
}

// mmShapes are the cases of every format: odd sizes (rows, tokens and, for
// the float formats, K not tile multiples; x rows not 16-byte aligned), whole
// tiles (one, and 2 x 2), and K steps whose x overflows half: in the first
// tile, tokens 3 and 5 (group 0) at step 1 and token 36 (group 1) at step 0,
// so that each step takes one group in float and the other rounded to half;
// in the second tile, token 90 at step 6; the last step (k 230) of the
// first tile both groups (tokens 20 and 40).
var mmShapes = []mmShape{
	{70, 37, 256, false, 3, nil},
	{64, 64, 256, true, 4, nil},
	{128, 128, 256, true, 0, nil},
	{70, 100, 256, false, 0, [][2]int{{3, 40}, {5, 63}, {36, 7}, {90, 200}, {20, 230}, {40, 231}}},
}

// modelShapes are the thinker's projections from hidden 2048 (k/v: 512
// rows, 33 tokens, for every format of the released checkpoints), and, one
// format each, the other row counts of the model (768, 2048, 4096, 5120)
// with token counts that are not tile multiples. They run in one fiber
// order (the shapes above race-check the same code); their size is bounded
// by the emulator's speed (about a second per threadgroup at K = 2048).
var modelShapes = map[string][]mmShape{
	"":     {{512, 33, 2048, false, 0, nil}},
	"q4_K": {{4096, 9, 2048, false, 0, nil}, {768, 600, 2048, false, 0, nil}},
	"mlx4": {{2048, 70, 2048, false, 0, nil}},
	"q8_0": {{5120, 9, 2048, false, 0, nil}},
	"f16":  {{768, 65, 2048, false, 0, nil}},
	"bf16": {{2048, 40, 2048, false, 0, nil}},
}

func isModelFormat(f fmtInfo) bool {
	switch f.name {
	case "q4_K", "q6_K", "q8_0", "mlx4", "mlx8", "bf16", "f16":
		return true
	}
	return false
}

func mulMmCase(f fmtInfo) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		shapes := mmShapes
		if isModelFormat(f) {
			shapes = append(append(append([]mmShape(nil), mmShapes...), modelShapes[""]...), modelShapes[f.name]...)
		}
		for _, sh := range shapes {
			M, N, K := sh.M, sh.N, sh.K
			if f.elems == 1 && !sh.direct && K == 256 {
				K = 101 // a row tail inside the last 32-wide step
			}
			w := makeWeights(t, rng, f, M, K)
			xStride, yStride := K+sh.xPad, M+1
			x := randF32(rng, N*xStride, 1)
			for i, b := range sh.big {
				if b[1] < K { // the float formats' short rows keep the first ones
					x[b[0]*xStride+b[1]] = []float32{1e5, -7e4, 65505}[i%3]
				}
			}
			y := nanF32(N * yStride)
			args := matmulArgs(w, N, xStride, yStride)
			name := "mul_mm_" + f.name
			fc := []byte{0}
			if sh.direct {
				fc[0] = 1
			}
			job := &mslemu.Job{Kernel: name, Grid: [3]int{groups(N, 64), groups(M, 64), 1}, Group: [3]int{128, 1, 1},
				Consts:  []mslemu.Const{{Index: 0, Value: fc}},
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc}, {Index: 3, Data: w.bi}, {Index: 4, Data: mslemu.F32(x)}, {Index: 5, Data: mslemu.F32(y)}}}
			if K == 2048 {
				job.Orders = 1
			}
			out := runJob(t, h, job)
			got := mslemu.ToF32(out[5])
			xs := stagedX(f, x, xStride, K, xGroups(N))
			want, abs := matmulRef(stagedW(f, w), xs, xStride, func(n int) int { return n }, N)
			for n := 0; n < N; n++ {
				checkAbsRef(t, fmt.Sprintf("%s %dx%dx%d direct=%v token %d", name, M, N, K, sh.direct, n), got[n*yStride:n*yStride+M], want[n*M:(n+1)*M], abs[n*M:(n+1)*M], 2e-6)
				if !math.IsNaN(float64(got[n*yStride+M])) {
					t.Fatalf("%s wrote into the row padding", name)
				}
			}
		}
	}
}

// routing returns random distinct top-k experts per token and the per-expert
// lists moe_map builds: entries token*topk+slot in token order.
func routing(rng *rand.Rand, T, E, topk int) (ids []int32, counts []int32, lists []int32) {
	ids = make([]int32, T*topk)
	counts = make([]int32, E)
	lists = make([]int32, E*T)
	for t := 0; t < T; t++ {
		perm := rng.Perm(E)
		for s := 0; s < topk; s++ {
			ids[t*topk+s] = int32(perm[s])
		}
	}
	for e := 0; e < E; e++ {
		for t := 0; t < T; t++ {
			for s := 0; s < topk; s++ {
				if ids[t*topk+s] == int32(e) {
					lists[e*T+int(counts[e])] = int32(t*topk + s)
					counts[e]++
				}
			}
		}
	}
	return
}

// regroup regenerates an MLX matrix with the group size and scale type of ref
// (experts share them).
func regroup(t *testing.T, rng *rand.Rand, f fmtInfo, w, ref *weights) *weights {
	for {
		n := makeWeights(t, rng, f, w.M, w.K)
		if n.groupSize == ref.groupSize && n.sbf == ref.sbf {
			return n
		}
	}
}

func getRowsCase(f fmtInfo) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		rows, cols := 8, 512
		var w *weights
		if f.fixture != "" {
			// Whole fixture rows: the result must be llama.cpp's dequantization
			// bit for bit.
			p := loadPool(t, f)
			w = &weights{M: rows, K: cols, deq: make([]float64, rows*cols)}
			per := cols / f.elems
			for i := 0; i < rows*per; i++ {
				w.data = append(w.data, p.blocks[i]...)
				for j, v := range p.deq[i] {
					w.deq[i*f.elems+j] = float64(v)
				}
			}
			w.rowBytes = per * f.blockBytes
			w.sc, w.bi = w.data, w.data
		} else {
			w = makeWeights(t, rng, f, rows, cols)
		}
		ids := []int32{3, 0, 7, 3, 5, 1, 6, 2, 4}
		args := shaders.KargsGetRows{NIDs: int32(len(ids)), Cols: int32(cols), RowBytes: uint64(w.rowBytes), SRowBytes: uint64(w.sRow),
			GroupSize: int32(w.groupSize), ScaleBF16: int32(w.sbf), NRows: int32(rows)}
		y := nanF32(len(ids) * cols)
		name := "get_rows_" + f.name
		out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: [3]int{len(ids), 1, 1}, Group: [3]int{64, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc}, {Index: 3, Data: w.bi}, {Index: 4, Data: mslemu.I32(ids)}, {Index: 5, Data: mslemu.F32(y)}}})
		got := mslemu.ToF32(out[5])
		for i, id := range ids {
			for c := 0; c < cols; c++ {
				g, want := got[i*cols+c], w.deq[int(id)*cols+c]
				if f.fixture != "" || f.name == "f32" {
					if math.Float32bits(g) != math.Float32bits(float32(want)) {
						t.Fatalf("%s: row %d col %d = %g (%08x), want %g bit for bit", name, id, c, g, math.Float32bits(g), want)
					}
				} else if math.Abs(float64(g)-want) > 1e-6*math.Abs(want)+1e-12 {
					t.Fatalf("%s: row %d col %d = %g, want %g", name, id, c, g, want)
				}
			}
		}
		// An id outside the table gives NaN, never a read outside it.
		bad := []int32{int32(rows)}
		args.NIDs = 1
		out = runJob(t, h, &mslemu.Job{Kernel: name, Grid: [3]int{1, 1, 1}, Group: [3]int{64, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc}, {Index: 3, Data: w.bi}, {Index: 4, Data: mslemu.I32(bad)}, {Index: 5, Data: mslemu.F32(make([]float32, cols))}}})
		if v := mslemu.ToF32(out[5])[0]; !math.IsNaN(float64(v)) {
			t.Fatalf("%s: out-of-range id gave %g, want NaN", name, v)
		}
	}
}

func init() {
	for _, f := range formats {
		register("mul_mv_"+f.name, mulMvCase(f))
		register("mul_mm_"+f.name, mulMmCase(f))
		register("get_rows_"+f.name, getRowsCase(f))
	}
}

// TestWideLoadAlignment: the emulator stops a kernel whose word loads are
// given a misaligned address (x86 would load it anyway; a GPU may not). A
// q4_K row of 146 bytes puts row 1 at a 2-byte boundary.
func TestWideLoadAlignment(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found", mslemu.Clang)
	}
	buildAll(t)
	h := harnesses["get_rows_q4_K"]
	args := shaders.KargsGetRows{NIDs: 1, Cols: 256, RowBytes: 146, NRows: 2}
	w := make([]byte, 2*146)
	_, err := h.Run(&mslemu.Job{Kernel: "get_rows_q4_K", Grid: [3]int{1, 1, 1}, Group: [3]int{64, 1, 1},
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w}, {Index: 2, Data: w}, {Index: 3, Data: w},
			{Index: 4, Data: mslemu.I32([]int32{1})}, {Index: 5, Data: make([]byte, 4*256)}}})
	if err == nil || !strings.Contains(err.Error(), "misaligned") {
		t.Fatalf("misaligned q4_K row: got %v, want a misaligned-load error", err)
	}
	args.RowBytes = 144 // and the aligned layout runs
	if _, err := h.Run(&mslemu.Job{Kernel: "get_rows_q4_K", Grid: [3]int{1, 1, 1}, Group: [3]int{64, 1, 1},
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w}, {Index: 2, Data: w}, {Index: 3, Data: w},
			{Index: 4, Data: mslemu.I32([]int32{1})}, {Index: 5, Data: make([]byte, 4*256)}}}); err != nil {
		t.Fatal(err)
	}
}
