//go:build mslemu

package metal

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// TestTensorPathEmulated: with the tensor path forced on the emulated GPU
// (CLEF_METAL_TENSOR=1), the prefill matmuls of q5_K, q8_0 and f16 weights
// run mul_mm_t_* and agree with the float64 product of the dequantized
// weights within the conformance suite's f16 bound (weights are staged in
// half), and q4_K and q6_K run the int8 path (mul_mm_t8_q4_K and
// mul_mm_t8_q6_K on q8_K activations, as the CPU reference multiplies them;
// q6_K: clef quantize q4_k_m's attn_v, 2048 -> 512) within the block
// formats' bound, on
// odd shapes and on the model's hidden size; few tokens and f32 weights
// keep the other kernels.
func TestTensorPathEmulated(t *testing.T) {
	b := tensorEmulated(t)
	if on, why := b.TensorPath(); !on {
		t.Fatalf("tensor path off when forced: %s", why)
	}
	rng := rand.New(rand.NewSource(14))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, c := range []struct {
		typ     quant.Type
		M, N, K int
	}{
		{quant.Q5_K, 70, 37, 256},
		{quant.Q5_K, 200, 131, 2048},
		{quant.Q4_K, 70, 37, 256},
		{quant.Q6_K, 70, 37, 256},
		{quant.Q6_K, 512, 67, 2048},
		{quant.Q8_0, 67, 140, 2048},
		{quant.F16, 45, 129, 101},
	} {
		rb, err := quant.RowBytes(c.typ, c.K)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, c.M*rb)
		if err := quant.Quantize(c.typ, raw, randn(c.M*c.K), nil); err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, c.M*c.K)
		if err := quant.Dequantize(c.typ, deq, raw); err != nil {
			t.Fatal(err)
		}
		w, err := b.Weight(&weights.Tensor{Name: "w", Type: c.typ, Shape: []int{c.M, c.K}, Data: raw})
		if err != nil {
			t.Fatal(err)
		}
		x := randn(c.N * c.K)
		tx, err := b.Upload(x, c.N, c.K)
		if err != nil {
			t.Fatal(err)
		}
		xh, _ := b.act(tx, "x")
		wh, _ := b.handle(w, "w")
		y, err := b.newAct(c.N, c.M)
		if err != nil {
			t.Fatal(err)
		}
		kernel, _ := tensorKernel(c.typ)
		before := b.Stats().Kernels[kernel].Dispatches
		ok, err := b.tensorMatMul(xh, wh, y)
		if !ok || err != nil {
			t.Fatalf("%v %dx%dx%d: tensor path not taken (%v, %v)", c.typ, c.M, c.N, c.K, ok, err)
		}
		got, err := b.Read(context.Background(), wrapT(y))
		if err != nil {
			t.Fatal(err)
		}
		if b.Stats().Kernels[kernel].Dispatches == before {
			t.Fatalf("%v: %s not dispatched", c.typ, kernel)
		}
		want := make([]float32, c.N*c.M)
		for n := 0; n < c.N; n++ {
			for m := 0; m < c.M; m++ {
				var s float64
				for k := 0; k < c.K; k++ {
					s += float64(x[n*c.K+k]) * float64(deq[m*c.K+k])
				}
				want[n*c.M+m] = float32(s)
			}
		}
		tol := conformance.TolHalf
		if slices.Contains(tensorInt8Types, c.typ) {
			tol = conformance.TolBlock // 8-bit activations
		}
		if e := conformance.NMSE(got, want); !(e <= tol) {
			t.Errorf("%v %dx%dx%d on the tensor path: NMSE %.3g > %.3g", c.typ, c.M, c.N, c.K, e, tol)
		}
		for i, v := range got {
			if math.IsNaN(float64(v)) {
				t.Fatalf("%v: NaN at %d", c.typ, i)
			}
		}
		// What the tensor path leaves to the other kernels.
		if ok, _ := b.tensorMatMul(&tensor{rows: 8, cols: c.K}, wh, y); ok {
			t.Errorf("%v: 8 tokens took the tensor path (the mat-vec kernels serve them)", c.typ)
		}
	}
	wf, err := b.Upload(randn(64*64), 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	wfh, _ := b.act(wf, "w")
	if ok, _ := b.tensorMatMul(&tensor{rows: 64, cols: 64}, wfh, nil); ok {
		t.Error("f32 weights took the tensor path")
	}
}

// tensorEmulated opens the emulated GPU with the tensor path forced on
// (CLEF_METAL_TENSOR=1), closed when the test ends; it skips where the
// emulator is missing or under -short.
func tensorEmulated(t *testing.T) *Backend {
	t.Helper()
	t.Setenv(TensorEnv, "1")
	return EmulatedForTest(t)
}
