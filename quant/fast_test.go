package quant

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// testRows returns rows of 1024 values of several kinds: normal, offset,
// heavy-tailed with outliers, block scales changing every 32 values, and a
// row with a constant run and a lone outlier.
func testRows() [][]float32 {
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 1024
	kinds := []func(i int) float64{
		func(int) float64 { return rng.NormFloat64() },
		func(int) float64 { return 0.5 + rng.Float64() },
		func(i int) float64 {
			v := rng.NormFloat64() / math.Sqrt(rng.ExpFloat64())
			if i%97 == 0 {
				v *= 30
			}
			return v
		},
		func(i int) float64 { return rng.NormFloat64() * math.Pow(10, float64(i/32%5-3)) },
		func(i int) float64 {
			if i%256 == 17 {
				return 40
			}
			if i < 512 {
				return -0.3
			}
			return 0.02 * rng.NormFloat64()
		},
	}
	var rows [][]float32
	for _, k := range kinds {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(k(i))
		}
		rows = append(rows, x)
	}
	return rows
}

// testImatrix returns a log-normal importance per column with a few
// columns twenty times as important.
func testImatrix(n int) []float32 {
	rng := rand.New(rand.NewPCG(3, 5))
	im := make([]float32, n)
	for i := range im {
		im[i] = float32(math.Exp(rng.NormFloat64()))
		if i%61 == 0 {
			im[i] *= 20
		}
	}
	return im
}

// weightedSSE returns Σ w·(x − y)² over a row (w = 1 without imatrix).
func weightedSSE(x, y, imatrix []float32) float64 {
	var e float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		w := 1.0
		if imatrix != nil {
			w = float64(imatrix[i%len(imatrix)])
		}
		e += w * d * d
	}
	return e
}

// kEncoders are the quantizers with a fast and an exhaustive search.
var kEncoders = map[Type]func(dst []byte, src, imatrix []float32, exhaustive bool){
	Q2_K: encodeQ2_K, Q3_K: encodeQ3_K, Q4_K: encodeQ4_K, Q5_K: encodeQ5_K, Q6_K: encodeQ6_K,
	Q4_0: encodeQ4_0, Q5_0: encodeQ5_0, Q4_1: encodeQ4_1, Q5_1: encodeQ5_1,
}

// TestFastNearExhaustive checks that the fast K-format (and q4_1/q5_1) search, the default,
// stays within a small factor of the exhaustive reference search (RMSE at
// most 10% above it on any row, 4% over all rows), with and without an
// importance matrix.
func TestFastNearExhaustive(t *testing.T) {
	rows := testRows()
	im := testImatrix(len(rows[0]))
	for _, typ := range []Type{Q4_0, Q5_0, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K} {
		f, _ := FormatOf(typ)
		enc := kEncoders[typ]
		for _, imat := range [][]float32{nil, im} {
			var fastSum, refSum float64
			var worst float64
			for r, x := range rows {
				n, _ := RowBytes(typ, len(x))
				fast, ref := make([]byte, n), make([]byte, n)
				enc(fast, x, imat, false)
				enc(ref, x, imat, true)
				if err := Quantize(typ, make([]byte, n), x, imat); err != nil {
					t.Fatal(err)
				}
				yf, yr := make([]float32, len(x)), make([]float32, len(x))
				f.Dequantize(yf, fast)
				f.Dequantize(yr, ref)
				ef, er := weightedSSE(x, yf, imat), weightedSSE(x, yr, imat)
				fastSum += ef
				refSum += er
				ratio := math.Sqrt(ef / er)
				worst = max(worst, ratio)
				if !(ratio <= 1.10) {
					t.Errorf("%v imatrix=%v row %d: fast rmse %.4g is %.4f× the exhaustive one", typ, imat != nil, r, math.Sqrt(ef), ratio)
				}
			}
			total := math.Sqrt(fastSum / refSum)
			t.Logf("%v imatrix=%v: fast/exhaustive rmse %.4f overall, worst row %.4f", typ, imat != nil, total, worst)
			if !(total <= 1.04) {
				t.Errorf("%v imatrix=%v: fast rmse %.4f× the exhaustive one overall", typ, imat != nil, total)
			}
		}
	}
}

// TestQuantizeRows checks that splitting rows among goroutines gives the
// bytes of row-by-row Quantize, and that bad sizes and values are errors.
func TestQuantizeRows(t *testing.T) {
	rows := testRows()
	cols := len(rows[0])
	src := make([]float32, 0, len(rows)*cols)
	for _, x := range rows {
		src = append(src, x...)
	}
	im := testImatrix(cols)
	for _, typ := range []Type{Q4_0, Q4_1, Q8_0, Q2_K, Q4_K, Q6_K, F16} {
		rb, _ := RowBytes(typ, cols)
		for _, imat := range [][]float32{nil, im} {
			want := make([]byte, len(rows)*rb)
			for r := range rows {
				if err := Quantize(typ, want[r*rb:(r+1)*rb], src[r*cols:(r+1)*cols], imat); err != nil {
					t.Fatal(err)
				}
			}
			for _, threads := range []int{0, 1, 3, 16} {
				got := make([]byte, len(want))
				if err := QuantizeRows(typ, got, src, len(rows), cols, imat, threads); err != nil {
					t.Fatalf("%v threads %d: %v", typ, threads, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%v imatrix=%v threads %d: rows differ from Quantize's", typ, imat != nil, threads)
				}
			}
		}
	}
	rb, _ := RowBytes(Q4_K, cols)
	dst := make([]byte, len(rows)*rb)
	if err := QuantizeRows(Q4_K, dst, src, 0, cols, nil, 2); err != nil {
		t.Errorf("no rows: %v", err)
	}
	bad := []struct {
		name       string
		dst        []byte
		src        []float32
		rows, cols int
		want       string
	}{
		{"short dst", dst[:len(dst)-1], src, len(rows), cols, "bytes"},
		{"short src", dst, src[:len(src)-1], len(rows), cols, "values"},
		{"partial block", dst, src, len(rows), cols - 1, "multiple"},
		{"negative rows", dst, src, -1, cols, "bad size"},
		{"absurd rows", dst, src, math.MaxInt / 2, cols, "bad size"},
	}
	for _, c := range bad {
		if err := QuantizeRows(Q4_K, c.dst, c.src, c.rows, c.cols, nil, 2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	nan := append([]float32(nil), src...)
	nan[3*cols+5] = float32(math.NaN())
	if err := QuantizeRows(Q4_K, dst, nan, len(rows), cols, nil, 3); err == nil || !strings.Contains(err.Error(), "row 3") {
		t.Errorf("NaN in row 3: error %v", err)
	}
	if err := QuantizeRows(Q4_K, dst, src, len(rows), cols, im[:100], 3); err == nil {
		t.Error("an importance matrix that does not fit was accepted")
	}
}

// TestFastDegenerate quantizes blocks the search must not trip on: all
// zeros, constants, one outlier among zeros, values near the fp16 limit and
// subnormal-sized values. Nothing may come back NaN or Inf, zeros stay zero,
// and the fast search does not fall far behind the exhaustive one.
func TestFastDegenerate(t *testing.T) {
	blocks := map[string]func(i int) float32{
		"zeros":    func(int) float32 { return 0 },
		"constant": func(int) float32 { return -0.7 },
		"positive": func(int) float32 { return 3.25 },
		"outlier": func(i int) float32 {
			if i == 100 {
				return -5
			}
			return 0
		},
		"huge":  func(i int) float32 { return float32(i%7-3) * 3e6 },
		"tiny":  func(i int) float32 { return float32(i%5-2) * 1e-7 },
		"alt":   func(i int) float32 { return float32(1 - 2*(i%2)) },
		"ramp":  func(i int) float32 { return float32(i) / 256 },
		"steps": func(i int) float32 { return float32(i / 16) },
	}
	for name, gen := range blocks {
		x := make([]float32, 512)
		for i := range x {
			x[i] = gen(i)
		}
		for typ, enc := range kEncoders {
			f, _ := FormatOf(typ)
			for _, imat := range [][]float32{nil, testImatrix(256)} {
				n, _ := RowBytes(typ, len(x))
				fast, ref := make([]byte, n), make([]byte, n)
				enc(fast, x, imat, false)
				enc(ref, x, imat, true)
				yf, yr := make([]float32, len(x)), make([]float32, len(x))
				f.Dequantize(yf, fast)
				f.Dequantize(yr, ref)
				for i, v := range yf {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || (name == "zeros" && v != 0) {
						t.Fatalf("%s %v: value %d comes back as %g", name, typ, i, v)
					}
				}
				// Blocks that some scale represents exactly (steps,
				// constants) are not worth a search of their own: the
				// fast error may exceed the exhaustive one by a factor of
				// two or by 1e-4 of the signal, not more.
				ef, er := weightedSSE(x, yf, imat), weightedSSE(x, yr, imat)
				if ef > 2*er+1e-4*weightedSSE(x, make([]float32, len(x)), imat) {
					t.Errorf("%s %v imatrix=%v: fast error %.4g, exhaustive %.4g", name, typ, imat != nil, ef, er)
				}
			}
		}
	}
}

// TestSmallMagnitudesBounded quantizes blocks of small values, down to where
// the fp16 super-block scales are subnormal, with the fast and the
// exhaustive search: no value may come back further off than its block's
// largest magnitude (the error of an all-zero block). A super-block scale
// rounded to zero or far below its target once left q4_K and q5_K with a
// minimum that no code could cancel (a fuzzer found it).
func TestSmallMagnitudesBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		scale := math.Pow(10, -3-6*float64(trial)/200)
		x := make([]float32, 512)
		for i := range x {
			switch rng.IntN(3) {
			case 0:
				x[i] = float32(rng.NormFloat64() * scale)
			case 1:
				x[i] = float32(rng.Float64() * scale)
			default:
				x[i] = float32(-rng.Float64() * scale / 10)
			}
		}
		for typ, enc := range kEncoders {
			f, _ := FormatOf(typ)
			for _, imat := range [][]float32{nil, testImatrix(256)} {
				for _, exhaustive := range []bool{false, true} {
					n, _ := RowBytes(typ, len(x))
					b := make([]byte, n)
					enc(b, x, imat, exhaustive)
					y := make([]float32, len(x))
					f.Dequantize(y, b)
					for o := 0; o < len(x); o += f.BlockElems {
						var amax float64
						for _, v := range x[o : o+f.BlockElems] {
							amax = max(amax, math.Abs(float64(v)))
						}
						for i := o; i < o+f.BlockElems; i++ {
							if d := math.Abs(float64(x[i] - y[i])); !(d <= amax*1.0001) {
								t.Fatalf("%v imatrix=%v exhaustive=%v scale %.3g: value %d = %g comes back as %g (block max %g)",
									typ, imat != nil, exhaustive, scale, i, x[i], y[i], amax)
							}
						}
					}
				}
			}
		}
	}
}
