package shaders_test

// Emulation cases of the row and shape kernels the joint head uses
// (transpose_f32, pair_features_f32, span_means_f32 in eltwise.metal;
// softmax_f32, row_dots_f32 in norm.metal; group_matmul_f32 in
// matmul.metal).

import (
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// guarded returns n NaN slots followed by a guard band of 7 more NaNs.
func guarded(n int) []float32 { return nanF32(n + 7) }

// checkGuard reports a write past the first n values of got.
func checkGuard(t *testing.T, what string, got []float32, n int) {
	t.Helper()
	for i := n; i < len(got); i++ {
		if !math.IsNaN(float64(got[i])) {
			t.Errorf("%s: wrote past the end at %d", what, i)
			return
		}
	}
}

func transposeCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, sh := range [][2]int{{1, 1}, {1, 9}, {13, 1}, {37, 19}, {64, 33}} {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		x := randF32(rng, n, 1)
		args := shaders.KargsEltwise{N: int32(n), Cols: int32(cols)}
		out := runJob(t, h, &mslemu.Job{Kernel: "transpose_f32", Grid: [3]int{groups(n, 256), 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.F32(guarded(n))}}})
		got := mslemu.ToF32(out[2])
		want := make([]float64, n)
		for r := range rows {
			for c := range cols {
				want[c*rows+r] = float64(x[r*cols+c])
			}
		}
		checkClose(t, "transpose_f32", got[:n], want, 0, 0)
		checkGuard(t, "transpose_f32", got, n)
	}
}

func pairFeaturesCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, sh := range [][2]int{{1, 1}, {3, 37}, {12, 64}, {2, 300}} {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		a, b := randF32(rng, n, 1), randF32(rng, n, 1)
		args := shaders.KargsEltwise{N: int32(n), Cols: int32(cols)}
		out := runJob(t, h, &mslemu.Job{Kernel: "pair_features_f32", Grid: [3]int{groups(n, 256), 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(a)}, {Index: 2, Data: mslemu.F32(b)},
				{Index: 3, Data: mslemu.F32(guarded(4 * n))}}})
		got := mslemu.ToF32(out[3])
		want := make([]float64, 4*n)
		for r := range rows {
			for c := range cols {
				u, v := a[r*cols+c], b[r*cols+c]
				o := want[4*r*cols:]
				o[c], o[cols+c], o[2*cols+c], o[3*cols+c] = float64(u), float64(v), float64(u*v), math.Abs(float64(u-v))
			}
		}
		checkClose(t, "pair_features_f32", got[:4*n], want, 0, 0)
		checkGuard(t, "pair_features_f32", got, 4*n)
	}
}

func spanMeansCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, c := range []struct {
		rows, cols int
		spans      [][2]int
	}{
		{1, 1, [][2]int{{0, 1}}},
		{20, 37, [][2]int{{0, 20}, {3, 4}, {19, 20}, {5, 11}, {5, 11}}},
		{9, 300, [][2]int{{2, 9}, {0, 1}}},
	} {
		x := randF32(rng, c.rows*c.cols, 1)
		var flat []int32
		want := make([]float64, len(c.spans)*c.cols)
		for i, s := range c.spans {
			flat = append(flat, int32(s[0]), int32(s[1]))
			for j := range c.cols {
				var acc float32 // the kernel's order and precision
				for r := s[0]; r < s[1]; r++ {
					acc += x[r*c.cols+j]
				}
				want[i*c.cols+j] = float64(acc / float32(s[1]-s[0]))
			}
		}
		n := len(c.spans) * c.cols
		args := shaders.KargsEltwise{N: int32(n), Cols: int32(c.cols)}
		out := runJob(t, h, &mslemu.Job{Kernel: "span_means_f32", Grid: [3]int{groups(n, 256), 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.I32(flat)},
				{Index: 3, Data: mslemu.F32(guarded(n))}}})
		got := mslemu.ToF32(out[3])
		checkClose(t, "span_means_f32", got[:n], want, 1e-7, 1e-6)
		checkGuard(t, "span_means_f32", got, n)
	}
}

func softmaxCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, c := range []struct {
		rows, cols, threads int
		ranged              bool
	}{{1, 1, 32, false}, {3, 37, 32, false}, {5, 2048, 256, false}, {4, 300, 256, true}, {6, 12, 32, true}, {3, 500, 256, true}} {
		x := randF32(rng, c.rows*c.cols, 3)
		alpha := float32(0.125)
		flat := make([]int32, 2*c.rows)
		for r := range c.rows {
			lo, hi := 0, c.cols
			if c.ranged {
				lo = rng.Intn(c.cols)
				hi = lo + 1 + rng.Intn(c.cols-lo)
			}
			flat[2*r], flat[2*r+1] = int32(lo), int32(hi)
		}
		want := make([]float64, c.rows*c.cols)
		for r := range c.rows {
			lo, hi := int(flat[2*r]), int(flat[2*r+1])
			m := math.Inf(-1)
			for j := lo; j < hi; j++ {
				m = math.Max(m, float64(alpha*x[r*c.cols+j]))
			}
			var s float64
			for j := lo; j < hi; j++ {
				s += math.Exp(float64(alpha*x[r*c.cols+j]) - m)
			}
			for j := lo; j < hi; j++ {
				want[r*c.cols+j] = math.Exp(float64(alpha*x[r*c.cols+j])-m) / s
			}
		}
		n := c.rows * c.cols
		args := shaders.KargsEltwise{N: int32(n), Alpha: alpha, Cols: int32(c.cols)}
		out := runJob(t, h, &mslemu.Job{Kernel: "softmax_f32", Grid: [3]int{c.rows, 1, 1}, Group: [3]int{c.threads, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.I32(flat)},
				{Index: 3, Data: mslemu.F32(guarded(n))}}})
		got := mslemu.ToF32(out[3])
		checkClose(t, "softmax_f32", got[:n], want, 1e-7, 1e-5)
		checkGuard(t, "softmax_f32", got, n)
	}
}

func rowDotsCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, c := range []struct{ rows, cols, threads int }{{1, 1, 32}, {5, 37, 32}, {12, 1024, 256}, {3, 2048, 256}} {
		n := c.rows * c.cols
		a, b := randF32(rng, n, 1), randF32(rng, n, 1)
		args := shaders.KargsNorm{Rows: int32(c.rows), Cols: int32(c.cols), XStride: int32(c.cols), YStride: 1}
		out := runJob(t, h, &mslemu.Job{Kernel: "row_dots_f32", Grid: [3]int{c.rows, 1, 1}, Group: [3]int{c.threads, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(a)}, {Index: 2, Data: mslemu.F32(b)},
				{Index: 3, Data: mslemu.F32(guarded(c.rows))}}})
		got := mslemu.ToF32(out[3])
		want := make([]float64, c.rows)
		for r := range c.rows {
			for j := range c.cols {
				want[r] += float64(a[r*c.cols+j]) * float64(b[r*c.cols+j])
			}
		}
		checkClose(t, "row_dots_f32", got[:c.rows], want, 1e-5*math.Sqrt(float64(c.cols)), 1e-5)
		checkGuard(t, "row_dots_f32", got, c.rows)
	}
}

func groupMatmulCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, c := range []struct{ rows, groups, n, k int }{{1, 1, 1, 1}, {3, 4, 32, 8}, {2, 4, 8, 32}, {5, 3, 7, 45}} {
		x := randF32(rng, c.rows*c.groups*c.k, 1)
		w := randF32(rng, c.groups*c.n*c.k, 1)
		total := c.rows * c.groups * c.n
		args := shaders.KargsMatmul{M: int32(c.n), N: int32(c.rows), K: int32(c.k), XStride: int32(c.groups * c.k), YStride: int32(c.groups * c.n),
			NExpert: int32(c.groups)}
		out := runJob(t, h, &mslemu.Job{Kernel: "group_matmul_f32", Grid: [3]int{(total + 3) / 4, 1, 1}, Group: [3]int{128, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.F32(w)},
				{Index: 3, Data: mslemu.F32(guarded(total))}}})
		got := mslemu.ToF32(out[3])
		want := make([]float64, total)
		for r := range c.rows {
			for g := range c.groups {
				for j := range c.n {
					var s float64
					for k := range c.k {
						s += float64(x[r*c.groups*c.k+g*c.k+k]) * float64(w[(g*c.n+j)*c.k+k])
					}
					want[r*c.groups*c.n+g*c.n+j] = s
				}
			}
		}
		checkClose(t, "group_matmul_f32", got[:total], want, 1e-5*math.Sqrt(float64(c.k)), 1e-5)
		checkGuard(t, "group_matmul_f32", got, total)
	}
}

func init() {
	register("softmax_f32", softmaxCase)
	register("transpose_f32", transposeCase)
	register("pair_features_f32", pairFeaturesCase)
	register("span_means_f32", spanMeansCase)
	register("row_dots_f32", rowDotsCase)
	register("group_matmul_f32", groupMatmulCase)
}
