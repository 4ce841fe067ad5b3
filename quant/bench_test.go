package quant

import (
	"math/rand/v2"
	"testing"
)

// benchTypes are the quantizers benchmarked.
var benchTypes = []Type{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}

// benchQuantize reports the speed of quantize on 4096 N(0,1) values (with
// the fixtures' kind of importance matrix when imat is set), in M values per
// second of wall time and per CPU-second of this process.
func benchQuantize(b *testing.B, imat bool, quantize func(t Type, dst []byte, src, imatrix []float32)) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	var im []float32
	if imat {
		im = testImatrix(len(x))
	}
	for _, t := range benchTypes {
		b.Run(t.String(), func(b *testing.B) {
			n, _ := RowBytes(t, len(x))
			dst := make([]byte, n)
			c0 := cpuTime()
			for b.Loop() {
				quantize(t, dst, x, im)
			}
			b.ReportMetric(float64(len(x))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mvalues/s")
			b.ReportMetric(float64(len(x))*float64(b.N)/(cpuTime()-c0).Seconds()/1e6, "Mvalues/cpu-s")
		})
	}
}

// BenchmarkQuantize measures the default (fast) quantizers without an
// importance matrix.
func BenchmarkQuantize(b *testing.B) {
	benchQuantize(b, false, func(t Type, dst []byte, src, imatrix []float32) { Quantize(t, dst, src, imatrix) })
}

// BenchmarkQuantizeImatrix measures them with an importance matrix.
func BenchmarkQuantizeImatrix(b *testing.B) {
	benchQuantize(b, true, func(t Type, dst []byte, src, imatrix []float32) { Quantize(t, dst, src, imatrix) })
}

// BenchmarkQuantizeExhaustive measures the exhaustive reference search of
// the K formats (the other types have only one search).
func BenchmarkQuantizeExhaustive(b *testing.B) {
	benchQuantize(b, false, func(t Type, dst []byte, src, imatrix []float32) {
		if enc := kEncoders[t]; enc != nil {
			enc(dst, src, imatrix, true)
		} else {
			Quantize(t, dst, src, imatrix)
		}
	})
}

func TestBadInput(t *testing.T) {
	if _, err := ParseType("q4_Z"); err == nil {
		t.Error("ParseType accepted q4_Z")
	}
	if typ, err := ParseType("Q4_K"); err != nil || typ != Q4_K {
		t.Errorf("ParseType(Q4_K) = %v, %v", typ, err)
	}
	if Type(999).String() != "type(999)" {
		t.Error(Type(999).String())
	}
	if _, err := RowBytes(Q4_K, 100); err == nil {
		t.Error("RowBytes accepted a partial super-block")
	}
	if _, err := RowBytes(Q4_K, -256); err == nil {
		t.Error("RowBytes accepted a negative size")
	}
	if _, err := FormatOf(MLXAffine4); err == nil {
		t.Error("FormatOf(MLXAffine4) has a block layout")
	}
	if err := Dequantize(Q8_0, make([]float32, 64), make([]byte, 67)); err == nil {
		t.Error("Dequantize accepted short data")
	}
	if err := Quantize(Q8_0, make([]byte, 68), make([]float32, 64), make([]float32, 48)); err == nil {
		t.Error("Quantize accepted an importance matrix that does not fit")
	}
	if err := Quantize(I8, make([]byte, 64), make([]float32, 64), nil); err == nil {
		t.Error("Quantize to i8 accepted")
	}
	if _, err := VecDot(Q4_K, 256, make([]byte, 144), make([]byte, 291)); err == nil {
		t.Error("VecDot accepted a short activation row")
	}
	if err := QuantizeActivations(Q4_K, make([]byte, 144), make([]float32, 256)); err == nil {
		t.Error("QuantizeActivations accepted a weight format")
	}
	// Half conversions round to nearest even and keep subnormals.
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {5.960464477539063e-08, 0x0001}, {2.98e-08, 0x0000}, {2.99e-08, 0x0001}, {1.0009765625 + 0.00048828125, 0x3c02}} {
		if h := Float32ToFloat16(c.f); h != c.h {
			t.Errorf("Float32ToFloat16(%g) = %#04x, want %#04x", c.f, h, c.h)
		}
	}
	if h := Float32ToBF16(1.00390625); h != 0x3f80 {
		t.Errorf("Float32ToBF16 tie = %#04x", h)
	}
}
