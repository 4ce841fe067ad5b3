package shaders_test

import (
	"math"
	"math/rand"
	"sort"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
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

func moeCombineCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, res := range []int{0, 1} {
		T, k, cols := 7, 8, 131
		ys := randF32(rng, T*k*cols, 1)
		ws := randF32(rng, T*k, 0.3)
		r := randF32(rng, T*cols, 1)
		args := shaders.KargsMoe{Tokens: int32(T), TopK: int32(k), Cols: int32(cols), AddResidual: int32(res)}
		out := runJob(t, h, &mslemu.Job{Kernel: "moe_combine_f32", Grid: [3]int{groups(T*cols, 256), 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(ys)}, {Index: 2, Data: mslemu.F32(ws)},
				{Index: 3, Data: mslemu.F32(r)}, {Index: 4, Data: mslemu.F32(nanF32(T * cols))}}})
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
		checkClose(t, "moe_combine", mslemu.ToF32(out[4]), want, 1e-6, 1e-5)
	}
}

func moeGridCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	E := 37
	counts := make([]int32, E)
	for i := range counts {
		counts[i] = int32(rng.Intn(100))
	}
	counts[3], counts[4] = 0, 32
	args := shaders.KargsMoe{NExpert: int32(E), Cols: 12}
	out := runJob(t, h, &mslemu.Job{Kernel: "moe_grid", Grid: [3]int{groups(E, 32), 1, 1}, Group: [3]int{32, 1, 1},
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.I32(counts)}, {Index: 2, Data: make([]byte, 12*E)}}})
	g := mslemu.ToI32(out[2])
	for e, c := range counts {
		if want := [3]int32{(c + 31) / 32, 12, 1}; [3]int32{g[3*e], g[3*e+1], g[3*e+2]} != want {
			t.Fatalf("expert %d (count %d): grid %v, want %v", e, c, g[3*e:3*e+3], want)
		}
	}
}

// moeTilesCase checks the tile table against a sequential walk, with
// experts past one scan chunk (300 > 256) and empty experts.
func moeTilesCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, E := range []int{37, 300} {
		counts := make([]int32, E)
		for i := range counts {
			counts[i] = int32(rng.Intn(80))
		}
		counts[3], counts[4], counts[5] = 0, 32, 33
		var want []int32
		for e, c := range counts {
			for j := int32(0); 32*j < c; j++ {
				want = append(want, int32(e), 32*j)
			}
		}
		size := 2 * (E + 1 + len(want))
		args := shaders.KargsMoe{NExpert: int32(E), Cols: 7}
		out := runJob(t, h, &mslemu.Job{Kernel: "moe_tiles", Grid: [3]int{1, 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.I32(counts)},
				{Index: 2, Data: mslemu.I32(make([]int32, size))}, {Index: 3, Data: make([]byte, 12)}}})
		g, tiles := mslemu.ToI32(out[3]), mslemu.ToI32(out[2])
		if [3]int32{g[0], g[1], g[2]} != [3]int32{int32(len(want) / 2), 7, 1} {
			t.Fatalf("E=%d: grid %v, want [%d 7 1]", E, g, len(want)/2)
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

func init() {
	register("moe_tiles", moeTilesCase)
	register("moe_grid", moeGridCase)
	register("moe_topk_f32", moeTopkCase)
	register("moe_map", moeMapCase)
	register("moe_combine_f32", moeCombineCase)
}
