//go:build mslemu

package metal

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// tensorInt8Backend opens the emulated GPU with the tensor path forced on.
func tensorInt8Backend(t *testing.T) *Backend {
	t.Helper()
	b := tensorEmulated(t)
	if !b.tensorOn() {
		t.Fatal("the tensor matmul family is off when forced")
	}
	return b
}

// TestTensorInt8Emulated: on the tensor path, MatMul of q4_K weights with
// more than 8 rows of x runs quant_q8k_rows then mul_mm_t8_q4_K (not the
// half kernels), and every output is quant.VecDot's value of the weight
// row and the q8_K row of x, bit for bit (the emulated GPU does not
// contract the float steps into fma), also when the op limit splits the
// rows into several launches over one quantization; the CPU backend's q4_K
// matmul, which multiplies the same integers, is reported beside it; 8 rows
// keep the mat-vec kernel.
func TestTensorInt8Emulated(t *testing.T) {
	b := tensorInt8Backend(t)
	cb := cpu.New(backend.Options{Threads: 1})
	rng := rand.New(rand.NewSource(8))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, c := range []struct{ M, N, K, launches int }{
		{70, 33, 256, 1},    // a partial row tile, a partial token tile
		{200, 131, 768, 1},  // four row tiles, three token tiles
		{512, 70, 2048, 1},  // the thinker's k/v projection
		{70, 9, 256 * 3, 1}, // the fewest rows the tensor path takes
		{70, 300, 256, 3},   // under a tiny op limit: chunks of 128, 128 and 44 rows
	} {
		rb, err := quant.RowBytes(quant.Q4_K, c.K)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, c.M*rb)
		if err := quant.Quantize(quant.Q4_K, raw, randn(c.M*c.K), nil); err != nil {
			t.Fatal(err)
		}
		wt := &weights.Tensor{Name: "w", Type: quant.Q4_K, Shape: []int{c.M, c.K}, Data: raw}
		w, err := b.Weight(wt)
		if err != nil {
			t.Fatal(err)
		}
		x := randn(c.N * c.K)
		tx, err := b.Upload(x, c.N, c.K)
		if err != nil {
			t.Fatal(err)
		}
		st := b.Stats().Kernels
		before := [3]int{st["quant_q8k_rows"].Dispatches, st["mul_mm_t8_q4_K"].Dispatches, st["mul_mm_q4_K"].Dispatches}
		b.mu.Lock()
		saved := b.opSeconds
		if c.launches > 1 {
			b.opSeconds = 1e-12
		}
		b.mu.Unlock()
		y, err := b.MatMul(tx, w)
		b.mu.Lock()
		b.opSeconds = saved
		b.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Read(context.Background(), y)
		if err != nil {
			t.Fatal(err)
		}
		st = b.Stats().Kernels
		if st["quant_q8k_rows"].Dispatches != before[0]+1 || st["mul_mm_t8_q4_K"].Dispatches != before[1]+c.launches ||
			st["mul_mm_q4_K"].Dispatches != before[2] {
			t.Fatalf("%dx%dx%d: dispatches quant_q8k_rows %d -> %d, mul_mm_t8_q4_K %d -> %d, mul_mm_q4_K %d -> %d", c.M, c.N, c.K,
				before[0], st["quant_q8k_rows"].Dispatches, before[1], st["mul_mm_t8_q4_K"].Dispatches, before[2], st["mul_mm_q4_K"].Dispatches)
		}

		// quant.VecDot on quant's q8_K rows of x: bit for bit.
		qrb, _ := quant.RowBytes(quant.Q8_K, c.K)
		xq := make([]byte, qrb)
		bad := 0
		for n := 0; n < c.N; n++ {
			if err := quant.QuantizeActivations(quant.Q8_K, xq, x[n*c.K:(n+1)*c.K]); err != nil {
				t.Fatal(err)
			}
			for m := 0; m < c.M; m++ {
				want, err := quant.VecDot(quant.Q4_K, c.K, raw[m*rb:], xq)
				if err != nil {
					t.Fatal(err)
				}
				if g := got[n*c.M+m]; math.Float32bits(g) != math.Float32bits(want) {
					if bad < 5 {
						t.Errorf("%dx%dx%d: y[%d][%d] = %g, quant.VecDot %g", c.M, c.N, c.K, n, m, g, want)
					}
					bad++
				}
			}
		}
		if bad > 0 {
			t.Errorf("%dx%dx%d: %d of %d outputs differ from quant.VecDot", c.M, c.N, c.K, bad, c.M*c.N)
		}

		// The CPU backend's q4_K x q8_K matmul: the same integers, its own
		// float order (reported), and both within TolBlock of the exact
		// product of the dequantized weights.
		cw, err := cb.Weight(wt)
		if err != nil {
			t.Fatal(err)
		}
		cx, err := cb.Upload(x, c.N, c.K)
		if err != nil {
			t.Fatal(err)
		}
		cy, err := cb.MatMul(cx, cw)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := cb.Read(context.Background(), cy)
		if err != nil {
			t.Fatal(err)
		}
		var maxAbs, maxRel float64
		var maxUlp int64
		for i := range got {
			d := math.Abs(float64(got[i]) - float64(ref[i]))
			maxAbs = max(maxAbs, d)
			if ref[i] != 0 {
				maxRel = max(maxRel, d/math.Abs(float64(ref[i])))
			}
			u := int64(math.Float32bits(got[i])) - int64(math.Float32bits(ref[i]))
			maxUlp = max(maxUlp, u, -u)
		}
		t.Logf("%dx%dx%d: against the CPU backend: max |diff| %.3g, max relative %.3g, max %d ulp", c.M, c.N, c.K, maxAbs, maxRel, maxUlp)
		deq := make([]float32, c.M*c.K)
		if err := quant.Dequantize(quant.Q4_K, deq, raw); err != nil {
			t.Fatal(err)
		}
		exact := make([]float32, c.N*c.M)
		for n := 0; n < c.N; n++ {
			for m := 0; m < c.M; m++ {
				var s float64
				for k := 0; k < c.K; k++ {
					s += float64(x[n*c.K+k]) * float64(deq[m*c.K+k])
				}
				exact[n*c.M+m] = float32(s)
			}
		}
		for name, v := range map[string][]float32{"metal": got, "cpu": ref} {
			if e := conformance.NMSE(v, exact); !(e <= conformance.TolBlock) {
				t.Errorf("%dx%dx%d %s: NMSE %.3g against the exact product > %g", c.M, c.N, c.K, name, e, conformance.TolBlock)
			}
		}
	}
	// Eight rows of x keep the mat-vec kernel.
	if kernel, _ := tensorKernel(quant.Q4_K); kernel != "mul_mm_t8_q4_K" {
		t.Errorf("tensorKernel(q4_K) = %s", kernel)
	}
	wh := &tensor{rows: 64, cols: 256, typ: quant.Q4_K}
	if ok, _ := b.tensorMatMul(&tensor{rows: 8, cols: 256, typ: quant.F32}, wh, nil); ok {
		t.Error("8 tokens took the tensor path")
	}
}

// TestTensorInt8ConformanceEmulated: the conformance suite's MatMul cases
// pass over the tensor path with q4_K on the int8 kernels.
func TestTensorInt8ConformanceEmulated(t *testing.T) {
	b := tensorInt8Backend(t)
	ran := false
	for _, c := range conformance.Cases() {
		if c.Name == "MatMul" {
			ran = true
			t.Run(c.Name, func(t *testing.T) { c.Run(t, b) })
		}
	}
	if !ran {
		t.Fatal("no MatMul case in the conformance suite")
	}
	st := b.Stats().Kernels
	for _, k := range []string{"quant_q8k_rows", "mul_mm_t8_q4_K", "mul_mm_t_q8_0"} {
		if st[k].Dispatches == 0 {
			t.Errorf("%s was not dispatched", k)
		}
	}
	if st["mul_mm_q4_K"].Dispatches != 0 {
		t.Error("mul_mm_q4_K dispatched on the tensor path")
	}
}
