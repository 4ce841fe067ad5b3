package shaders_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

func eltwiseCase(name string, inputs int, alpha float32, ref func(a, b float64) float64) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, n := range []int{1, 255, 257, 1000} {
			args := shaders.KargsEltwise{N: int32(n), Alpha: alpha}
			a, b := randF32(rng, n, 2), randF32(rng, n, 2)
			bufs := []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(a)}}
			if inputs == 2 {
				bufs = append(bufs, mslemu.Buffer{Index: 2, Data: mslemu.F32(b)})
			}
			// A guard band after y must stay untouched: y has n+7 slots of NaN.
			y := make([]float32, n+7)
			for i := range y {
				y[i] = float32(math.NaN())
			}
			bufs = append(bufs, mslemu.Buffer{Index: inputs + 1, Data: mslemu.F32(y)})
			out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: [3]int{groups(n, 256), 1, 1}, Group: [3]int{256, 1, 1}, Buffers: bufs})
			got := mslemu.ToF32(out[len(out)-1])
			want := make([]float64, n)
			for i := range want {
				want[i] = ref(float64(a[i]), float64(b[i]))
			}
			checkClose(t, name, got[:n], want, 1e-6, 1e-5)
			for i := n; i < n+7; i++ {
				if !math.IsNaN(float64(got[i])) {
					t.Errorf("%s n=%d: wrote past the end at %d", name, n, i)
				}
			}
		}
	}
}

func init() {
	register("add_f32", eltwiseCase("add_f32", 2, 0, func(a, b float64) float64 { return a + b }))
	register("mul_f32", eltwiseCase("mul_f32", 2, 0, func(a, b float64) float64 { return a * b }))
	register("scale_f32", eltwiseCase("scale_f32", 1, 0.37, func(a, b float64) float64 { return float64(float32(0.37)) * a }))
	register("silu_mul_f32", eltwiseCase("silu_mul_f32", 2, 0, func(a, b float64) float64 { return a / (1 + math.Exp(-a)) * b }))
	register("gelu_f32", eltwiseCase("gelu_f32", 1, 0, func(a, b float64) float64 { return 0.5 * a * (1 + math.Erf(a/math.Sqrt2)) }))
	register("gelu_tanh_f32", eltwiseCase("gelu_tanh_f32", 1, 0, func(a, b float64) float64 {
		return 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a)))
	}))
}

// addBiasCase checks add_bias_f32: a bias of cols values added to every row,
// with a guard band after y.
func addBiasCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, sh := range [][2]int{{1, 1}, {9, 37}, {3, 1280}, {257, 1}} {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		a, b := randF32(rng, n, 1), randF32(rng, cols, 1)
		args := shaders.KargsEltwise{N: int32(n), Cols: int32(cols)}
		out := runJob(t, h, &mslemu.Job{Kernel: "add_bias_f32", Grid: [3]int{groups(n, 256), 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(a)}, {Index: 2, Data: mslemu.F32(b)},
				{Index: 3, Data: mslemu.F32(nanF32(n + 7))}}})
		got := mslemu.ToF32(out[3])
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(a[i] + b[i%cols])
		}
		checkClose(t, "add_bias_f32", got[:n], want, 0, 0)
		for i := n; i < n+7; i++ {
			if !math.IsNaN(float64(got[i])) {
				t.Errorf("add_bias_f32 [%d %d]: wrote past the end at %d", rows, cols, i)
			}
		}
	}
}

func addRowsCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	rows, cols := 9, 37
	x := randF32(rng, rows*cols, 1)
	src := randF32(rng, 3*cols, 1)
	idx := []int32{8, 0, 4}
	args := shaders.KargsAddRows{Rows: int32(rows), Cols: int32(cols), NSrc: 3}
	out := runJob(t, h, &mslemu.Job{Kernel: "add_rows_f32", Grid: [3]int{groups(3*cols, 256), 1, 1}, Group: [3]int{256, 1, 1},
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(src)}, {Index: 2, Data: mslemu.I32(idx)},
			{Index: 3, Data: mslemu.F32(x)}}})
	want := make([]float64, rows*cols)
	for i := range want {
		want[i] = float64(x[i])
	}
	for i, r := range idx {
		for c := 0; c < cols; c++ {
			want[int(r)*cols+c] += float64(src[i*cols+c])
		}
	}
	checkClose(t, "add_rows_f32", mslemu.ToF32(out[3]), want, 1e-6, 1e-6)
}

func init() {
	register("copy_f32", eltwiseCase("copy_f32", 1, 0, func(a, b float64) float64 { return a }))
	register("add_rows_f32", addRowsCase)
	register("add_bias_f32", addBiasCase)
}
