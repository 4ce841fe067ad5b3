//go:build darwin && arm64

package metal

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// TestConformanceMetal runs the shared conformance suite on the real GPU.
// It is the first thing to run on a Mac: nothing in this package has been
// executed on Apple hardware before.
func TestConformanceMetal(t *testing.T) {
	if ok, why := Available(); !ok {
		t.Skipf("no Metal device: %s", why)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conformance.Run(t, b)
}

// TestPipelines compiles the library with Apple's compiler and builds a
// pipeline for every entry point of shaders/ (specialised where the kernel
// takes function constants).
func TestPipelines(t *testing.T) {
	g, err := sharedGPU()
	if err != nil {
		t.Skipf("no Metal device: %v", err)
	}
	for _, name := range shaders.KernelNames() {
		var consts []fconst
		if strings.HasPrefix(name, "mul_mm_") && !strings.HasPrefix(name, "mul_mm_id_") {
			consts = []fconst{{Index: 0, Bool: true}}
		}
		var err error
		g.do(func() { _, err = g.pipeline(name, consts) })
		if err != nil {
			t.Error(err)
		}
	}
}

func benchMatMul(b *testing.B, typ quant.Type, tokens, n, k int) {
	be, err := New()
	if err != nil {
		b.Skip(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, n*k)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	rb, _ := quant.RowBytes(typ, k)
	data := make([]byte, n*rb)
	for r := 0; r < n; r++ {
		quant.Quantize(typ, data[r*rb:(r+1)*rb], v[r*k:(r+1)*k], nil)
	}
	w, err := be.Weight(&weights.Tensor{Name: "bench", Type: typ, Shape: []int{n, k}, Data: data})
	if err != nil {
		b.Fatal(err)
	}
	x, _ := be.Upload(make([]float32, tokens*k), tokens, k)
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		y, err := be.MatMul(x, w)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := be.Read(ctx, y); err != nil {
			b.Fatal(err)
		}
		be.Free(y)
	}
	b.ReportMetric(2*float64(tokens*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
}

func BenchmarkMulMvQ4K(b *testing.B) { benchMatMul(b, quant.Q4_K, 1, 4096, 4096) }
func BenchmarkMulMmQ4K(b *testing.B) { benchMatMul(b, quant.Q4_K, 512, 4096, 4096) }
func BenchmarkMulMmQ8(b *testing.B)  { benchMatMul(b, quant.Q8_0, 512, 4096, 4096) }
func BenchmarkMulMmF16(b *testing.B) { benchMatMul(b, quant.F16, 512, 4096, 4096) }
