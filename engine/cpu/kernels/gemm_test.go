package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/quant"
)

var gemmTypes = []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1,
	quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.F16, quant.BF16, quant.F32}

// scaleOffsets lists the byte offsets of the fp16 scales in a block.
var scaleOffsets = map[quant.Type][]int{
	quant.Q8_0: {0}, quant.Q4_0: {0}, quant.Q5_0: {0}, quant.Q4_1: {0, 2}, quant.Q5_1: {0, 2},
	quant.Q2_K: {80, 82}, quant.Q3_K: {108}, quant.Q4_K: {0, 2}, quant.Q5_K: {0, 2}, quant.Q6_K: {208},
}

// operands returns n quantized weight rows and m quantized activation rows
// of k values, and their dequantized values.
func operands(t testing.TB, typ quant.Type, n, m, k int, seed uint64) (w, x []byte, wf, xf []float32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	f, _ := quant.FormatOf(typ)
	wRow, _ := quant.RowBytes(typ, k)
	src := make([]float32, k)
	// A guard band of garbage after the rows must not be read.
	w = make([]byte, n*wRow+64)
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	wf = make([]float32, n*k)
	for j := 0; j < n; j++ {
		row := w[j*wRow : (j+1)*wRow]
		if typ == quant.F32 || typ == quant.F16 || typ == quant.BF16 {
			for i := range src {
				src[i] = float32(rng.NormFloat64() * 0.05)
			}
			f.Quantize(row, src, nil)
		} else {
			// Random blocks: every code value occurs (q8_0's -128, q6_K's
			// scale -128 ...); only the fp16 scales are made sane. Row 1
			// is all 0x80 bytes: q8_0 blocks of code -128 only (a valid
			// code a foreign GGUF may hold), q6_K scales of -128.
			if j == 1 {
				for i := range row {
					row[i] = 0x80
				}
			}
			for b := 0; b < len(row); b += f.BlockBytes {
				for _, o := range scaleOffsets[typ] {
					v := float32(rng.Float64()*0.01+0.001) * float32(1-2*int(rng.Uint32()&1))
					binary.LittleEndian.PutUint16(row[b+o:], quant.Float32ToFloat16(v))
				}
			}
		}
		f.Dequantize(wf[j*k:(j+1)*k], w[j*wRow:(j+1)*wRow])
	}
	xRow, _ := ActivationRowBytes(typ, k)
	act := make([]float32, m*k)
	for i := range act {
		act[i] = float32(rng.NormFloat64())
		if i%97 == 0 {
			act[i] *= 40
		}
		if i/k == 1 {
			// Row 1 saturates the 8-bit activations: codes ±127 in
			// pairs of one sign (q8_0/q8_1: the largest int16 pair sums
			// against weight code -128) and -128 (q8_K: its quantizer
			// maps the most negative value to -128).
			act[i] = 0.999
			if (i%k)/2%2 == 0 {
				act[i] = -1
			}
		}
	}
	x = make([]byte, m*xRow+64)
	if err := QuantizeActivations(typ, act, m, k, x); err != nil {
		t.Fatal(err)
	}
	if f.VecDotType == quant.Q8_K && m > 1 {
		// Our q8_K quantizer (as ggml's now) stays within ±127, but the
		// format holds -128: put it in row 1 (where the -127 codes are)
		// and redo the block sums.
		row := x[xRow : 2*xRow]
		for b := 0; b < len(row); b += 292 {
			for g := 0; g < 16; g++ {
				sum := 0
				for l := 0; l < 16; l++ {
					q := &row[b+4+16*g+l]
					if int8(*q) == -127 {
						*q = 0x80
					}
					sum += int(int8(*q))
				}
				binary.LittleEndian.PutUint16(row[b+260+2*g:], uint16(int16(sum)))
			}
		}
	}
	xf = make([]float32, m*k)
	vf, _ := quant.FormatOf(f.VecDotType)
	for i := 0; i < m; i++ {
		vf.Dequantize(xf[i*k:(i+1)*k], x[i*xRow:(i+1)*xRow])
	}
	return w, x, wf, xf
}

// TestGEMM runs every type through GEMM on odd sizes, with NaN sentinels
// around and between the output rows, against the float64 dot products
// of the dequantized operands.
func TestGEMM(t *testing.T) {
	t.Logf("kernels: %s", Accelerated())
	gemmTable(t)
}

func gemmTable(t *testing.T) {
	for _, typ := range gemmTypes {
		f, _ := quant.FormatOf(typ)
		ks := []int{256, 768}
		if f.BlockElems == 32 {
			ks = []int{32, 96, 800}
		} else if f.BlockElems == 1 {
			ks = []int{1, 7, 300}
		}
		for _, k := range ks {
			// Operands for the largest sizes; smaller cases use prefixes
			// (the following rows then act as guard bands).
			w, x, wf, xf := operands(t, typ, 13, 33, k, uint64(k))
			for _, n := range []int{1, 3, 4, 9, 13} {
				for _, m := range []int{1, 2, 5, 33} {
					ld := n + 3
					out := make([]float32, 2+m*ld+5)
					for i := range out {
						out[i] = float32(math.NaN())
					}
					if err := GEMM(typ, w, n, k, x, m, out[2:], ld); err != nil {
						t.Fatal(err)
					}
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							var ref, abs float64
							for c := 0; c < k; c++ {
								p := float64(wf[j*k+c]) * float64(xf[i*k+c])
								ref += p
								abs += math.Abs(p)
							}
							got := float64(out[2+i*ld+j])
							// q4_1/q5_1 use the rounded fp16 activation sum
							// for the minimum term, as ggml does: compare
							// with the (fixture-checked) reference kernel.
							if typ == quant.Q4_1 || typ == quant.Q5_1 {
								wRow, _ := quant.RowBytes(typ, k)
								xRow, _ := ActivationRowBytes(typ, k)
								r, err := quant.VecDot(typ, k, w[j*wRow:], x[i*xRow:])
								if err != nil {
									t.Fatal(err)
								}
								ref = float64(r)
							}
							tol := 1e-6 * abs
							if !(math.Abs(got-ref) <= tol+1e-30) {
								t.Fatalf("%v k=%d n=%d m=%d: out[%d,%d] = %g, want %g (tol %g)", typ, k, n, m, i, j, got, ref, tol)
							}
						}
					}
					for i := range out {
						r, c := (i-2)/ld, (i-2)%ld
						if i < 2 || r >= m || c >= n {
							if !math.IsNaN(float64(out[i])) {
								t.Fatalf("%v k=%d n=%d m=%d: sentinel %d overwritten", typ, k, n, m, i)
							}
						}
					}
				}
			}
		}
	}
}

// TestFastMatchesGeneric checks that the fast kernels agree with their
// generic twins to float rounding (trivially when there are none).
func TestFastMatchesGeneric(t *testing.T) {
	const k = 4096
	check := func(name string, fast, gen [4]float32, wf, xf []float32) {
		for j := range fast {
			var abs float64
			for c := 0; c < k; c++ {
				abs += math.Abs(float64(wf[j*k+c]) * float64(xf[c]))
			}
			if d := math.Abs(float64(fast[j] - gen[j])); !(d <= 1e-6*abs) {
				t.Errorf("%s row %d: fast %g, generic %g (Σ|w·x| %g)", name, j, fast[j], gen[j], abs)
			}
		}
	}
	var fast, gen [4]float32
	w, x, wf, xf := operands(t, quant.Q8_0, 4, 1, k, 3)
	dotQ8_0x4(w, 34*k/32, x, k/32, &fast)
	dotQ8_0x4Generic(w, 34*k/32, x, k/32, &gen)
	check("q8_0", fast, gen, wf, xf)
	if hasQ8_0x2x4() {
		w, x, wf, xf := operands(t, quant.Q8_0, 2, 4, k, 4)
		nb := k / 32
		xd := make([]float32, 4*nb)
		for i := range xd {
			xd[i] = quant.Float16ToFloat32(le.Uint16(x[34*i:]))
		}
		var f8, g8 [8]float32
		dotQ8_0x2x4(w, 34*nb, x, 34*nb, xd, nb, &f8)
		dotQ8_0x2x4Generic(w, 34*nb, x, 34*nb, nb, &g8)
		for i := range f8 {
			row, a := i/4, i%4
			var abs float64
			for c := 0; c < k; c++ {
				abs += math.Abs(float64(wf[row*k+c]) * float64(xf[a*k+c]))
			}
			if d := math.Abs(float64(f8[i] - g8[i])); !(d <= 1e-6*abs) {
				t.Errorf("q8_0 2x4 w%d·x%d: fast %g, generic %g", row, a, f8[i], g8[i])
			}
		}
	}
	for _, typ := range []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		w, x, wf, xf := operands(t, typ, 4, 1, k, 5)
		wRow, _ := quant.RowBytes(typ, k)
		tile := make([]byte, 4*(k/256)*kRec)
		decodeKTile(typ, tile, w, 4, wRow, k/256, wRow/(k/256))
		kDot4(tile, k/256, x, &fast)
		kDot4Generic(tile, k/256, x, &gen)
		check(typ.String(), fast, gen, wf, xf)
	}
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		// Two weight rows × four activation rows, k not a multiple of 8.
		const k = 1003
		w, _, wf, _ := operands(t, typ, 2, 1, k, 10)
		_, _, _, xf := operands(t, quant.F32, 1, 4, k, 12)
		wRow, _ := quant.RowBytes(typ, k)
		if !hasFloat2x4() {
			continue
		}
		var r8 [8]float32
		dotFloat2x4(typ, w, wRow, k, xf, &r8)
		for row := 0; row < 2; row++ {
			for a := 0; a < 4; a++ {
				var ref, abs float64
				for c := 0; c < k; c++ {
					p := float64(wf[row*k+c]) * float64(xf[a*k+c])
					ref += p
					abs += math.Abs(p)
				}
				if d := math.Abs(float64(r8[4*row+a]) - ref); !(d <= 1e-6*abs) {
					t.Errorf("%v 2x4 w%d·x%d: %g, want %g", typ, row, a, r8[4*row+a], ref)
				}
			}
		}
	}
	_, _, wf, xf = operands(t, quant.F32, 4, 1, k, 9)
	dotF32x4(wf, k, xf, &fast)
	dotF32x4Generic(wf, k, xf, &gen)
	check("f32", fast, gen, wf, xf)
}

func TestGEMMBadInput(t *testing.T) {
	w, x, _, _ := operands(t, quant.Q8_0, 4, 2, 64, 1)
	out := make([]float32, 8)
	cases := []struct {
		name string
		err  error
	}{
		{"short weights", GEMM(quant.Q8_0, w[:100], 4, 64, x, 2, out, 4)},
		{"short activations", GEMM(quant.Q8_0, w, 4, 64, x[:60], 2, out, 4)},
		{"short output", GEMM(quant.Q8_0, w, 4, 64, x, 2, out[:7], 4)},
		{"stride below n", GEMM(quant.Q8_0, w, 4, 64, x, 2, out, 3)},
		{"partial block", GEMM(quant.Q8_0, w, 4, 60, x, 2, out, 4)},
		{"negative size", GEMM(quant.Q8_0, w, -1, 64, x, 2, out, 4)},
		{"unknown type", GEMM(quant.Type(999), w, 4, 64, x, 2, out, 4)},
		{"mlx type", GEMM(quant.MLXAffine4, w, 4, 64, x, 2, out, 4)},
		{"activation rows", QuantizeActivations(quant.Q4_K, make([]float32, 100), 1, 100, make([]byte, 1000))},
		{"short dst", QuantizeActivations(quant.Q8_0, make([]float32, 64), 2, 32, make([]byte, 60))},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

func BenchmarkGEMM(b *testing.B) {
	// The shapes of an MoE expert's projections in a prefill: m tokens
	// routed to the expert, n = 768 outputs, k = 2048 inputs.
	const n, k = 768, 2048
	for _, typ := range gemmTypes {
		for _, m := range []int{1, 8, 32, 128} {
			b.Run(fmt.Sprintf("%v/m=%d", typ, m), func(b *testing.B) {
				w, x, _, _ := operands(b, typ, n, m, k, 1)
				out := make([]float32, m*n)
				b.ResetTimer()
				c0 := cpuTime()
				for b.Loop() {
					GEMM(typ, w, n, k, x, m, out, n)
				}
				flops := 2 * float64(m*n*k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				// CPU time, not wall time: the number does not depend on
				// what else the machine is running.
				b.ReportMetric(flops/(cpuTime()-c0).Seconds()/1e9, "GFLOP/cpu-s")
			})
		}
	}
}

// TestGEMMFloat checks GEMMFloat (float weights, float32 activations not
// rounded to the weight format) against float64 dot products, with NaN
// sentinels, and that splitting the weight rows at multiples of 4 gives
// the same bits as one call.
func TestGEMMFloat(t *testing.T) {
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		for _, k := range []int{1, 7, 300} {
			w, _, wf, _ := operands(t, typ, 13, 1, k, uint64(k)+50)
			_, _, xf, _ := operands(t, quant.F32, 33, 1, k, uint64(k)+60) // 33 unrounded float32 rows
			wRow, _ := quant.RowBytes(typ, k)
			for _, n := range []int{1, 4, 9, 13} {
				for _, m := range []int{1, 2, 5, 33} {
					ld := n + 3
					out := make([]float32, 2+m*ld+5)
					split := make([]float32, len(out))
					for i := range out {
						out[i] = float32(math.NaN())
						split[i] = out[i]
					}
					if err := GEMMFloat(typ, w, n, k, xf, m, out[2:], ld); err != nil {
						t.Fatal(err)
					}
					for j0 := 0; j0 < n; j0 += 4 {
						j1 := min(n, j0+4)
						if err := GEMMFloat(typ, w[j0*wRow:], j1-j0, k, xf, m, split[2+j0:], ld); err != nil {
							t.Fatal(err)
						}
					}
					for i := range out {
						r, c := (i-2)/ld, (i-2)%ld
						if i < 2 || r >= m || c >= n {
							if !math.IsNaN(float64(out[i])) || !math.IsNaN(float64(split[i])) {
								t.Fatalf("%v k=%d n=%d m=%d: sentinel %d overwritten", typ, k, n, m, i)
							}
							continue
						}
						var ref, abs float64
						for c2 := 0; c2 < k; c2++ {
							p := float64(wf[c*k+c2]) * float64(xf[r*k+c2])
							ref += p
							abs += math.Abs(p)
						}
						if got := float64(out[i]); !(math.Abs(got-ref) <= 1e-6*abs+1e-30) {
							t.Fatalf("%v k=%d n=%d m=%d: out[%d,%d] = %g, want %g", typ, k, n, m, r, c, got, ref)
						}
						if math.Float32bits(out[i]) != math.Float32bits(split[i]) {
							t.Fatalf("%v k=%d n=%d m=%d: out[%d,%d] = %g in one call, %g split by 4 rows", typ, k, n, m, r, c, out[i], split[i])
						}
					}
				}
			}
		}
	}
	w := make([]byte, 4*64*2)
	x := make([]float32, 2*64)
	out := make([]float32, 8)
	for name, err := range map[string]error{
		"q8_0 weights":      GEMMFloat(quant.Q8_0, w, 4, 64, x, 2, out, 4),
		"short weights":     GEMMFloat(quant.BF16, w[:100], 4, 64, x, 2, out, 4),
		"short activations": GEMMFloat(quant.BF16, w, 4, 64, x[:100], 2, out, 4),
		"short output":      GEMMFloat(quant.BF16, w, 4, 64, x, 2, out[:7], 4),
		"negative size":     GEMMFloat(quant.BF16, w, -1, 64, x, 2, out, 4),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// dotQ8_0x2x4 runs dotQ8_0x2x4Scaled with the activation scales given row
// by row (xd[act·nb+b]) and the weight scales widened from the blocks.
func dotQ8_0x2x4(w []byte, stride int, x []byte, xstride int, xd []float32, nb int, r *[8]float32) {
	wd := make([]float32, 2*nb)
	for row := 0; row < 2; row++ {
		f16StridedGeneric(wd[row*nb:], w[row*stride:], 34, nb)
	}
	xq := make([]float32, q8QuadFloats(nb))
	for a := 0; a < 4; a++ {
		for b := 0; b < nb; b++ {
			if q8ScalesPairs() {
				xq[8*(b/2)+2*a+b%2] = xd[a*nb+b]
			} else {
				xq[4*b+a] = xd[a*nb+b]
			}
		}
	}
	var buf []byte
	xa, xs := q8PrepActs(&buf, x, xstride, 4, nb)
	var o [8]float32
	dotQ8_0x2x4Scaled(w, stride, wd, 1, xa, xs, xq, 1, nb, o[:], 2)
	for a := 0; a < 4; a++ {
		r[a], r[4+a] = o[2*a], o[2*a+1]
	}
}

// TestQuantizeActivationsExact checks that QuantizeActivations writes the
// bits of quant.QuantizeActivations for q8_0 and q8_K (their fast paths),
// block by block: random values over a wide range of magnitudes, an
// all-zero block, exact ties of the rounding (the largest magnitude 127:
// the codes are the values, halves round to even), a largest magnitude
// held by both signs (q8_K takes the first), scales that are fp16
// subnormals or overflow, blocks whose largest magnitude is so small that
// 127 over it overflows, and blocks with a NaN or an infinity.
func TestQuantizeActivationsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 5))
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		f, _ := quant.FormatOf(typ)
		vf, _ := quant.FormatOf(f.VecDotType)
		bs := vf.BlockElems
		const nb = 40
		x := make([]float32, bs*nb)
		for b := 0; b < nb; b++ {
			blk := x[bs*b : bs*b+bs]
			scale := math.Pow(10, float64(b%16)*4-30) // 1e-30 .. 1e30
			for i := range blk {
				blk[i] = float32(rng.NormFloat64() * scale)
			}
			switch b {
			case 3:
				clear(blk)
			case 4, 5:
				// Largest magnitude 127 (q8_K: -127 first): the codes
				// are the values; x.5 ties.
				for i := range blk {
					blk[i] = float32(int(rng.Uint32()%254)-127) + 0.5
				}
				blk[0], blk[7] = -127, 127
			case 6:
				blk[9] = float32(math.NaN())
			case 7:
				blk[0] = float32(math.Inf(-1))
			case 8:
				blk[bs-1] = float32(math.Inf(1))
			case 9:
				blk[5] = 3e38
			case 10:
				for i := range blk {
					blk[i] = float32(rng.NormFloat64()) * 1e-7 // scale below fp16's normal range
				}
			case 11:
				blk[3], blk[20] = -5e3, 5e3
			case 12:
				blk[3], blk[20] = 5e3, -5e3
			case 13, 14:
				// Largest magnitude below 127/MaxFloat32 (~3.7e-37):
				// 127/amax overflows; b = 14 is fp32-subnormal.
				clear(blk)
				blk[2], blk[11] = 1e-38, -3e-39
				if b == 14 {
					blk[2] = 2e-42
				}
			}
		}
		for _, m := range []int{1, 2} {
			k := len(x) / m
			n, _ := ActivationRowBytes(typ, k)
			got := make([]byte, m*n)
			if err := QuantizeActivations(typ, x, m, k, got); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, m*n)
			for i := 0; i < m; i++ {
				if err := quant.QuantizeActivations(f.VecDotType, want[i*n:(i+1)*n], x[i*k:(i+1)*k]); err != nil {
					t.Fatal(err)
				}
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v m=%d: byte %d (block %d): %#x, want %#x", f.VecDotType, m, i, i/vf.BlockBytes, got[i], want[i])
				}
			}
		}
	}
}

// TestF16Strided checks the strided fp16 widening (eight at a time in
// assembly, the rest one by one) against its generic twin on every count
// up to 40, with fp16 values of every kind (subnormals, infinities, NaNs).
func TestF16Strided(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	const stride = 34
	src := make([]byte, 40*stride)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 40; n++ {
		got := make([]float32, n+1)
		want := make([]float32, n+1)
		got[n], want[n] = -1, -1
		f16Strided(got, src[:max(n*stride, 1)], stride, n)
		f16StridedGeneric(want, src, stride, n)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d: [%d] = %#x, want %#x", n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}
}

// TestGEMMBlockingSameBits checks that the cache blocking of the q8_0 and
// packed K drivers changes no bits: one call over all rows against calls
// on 4-row slices of the weights and activation slices cut at multiples
// of 4 (the last holding the m mod 4 rows), which block differently but
// run the same kernel per output.
func TestGEMMBlockingSameBits(t *testing.T) {
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		const n, m = 138, 135
		k := 512
		if typ == quant.Q8_0 {
			k = 800
		}
		w, x, _, _ := operands(t, typ, n, m, k, 31)
		wRow, _ := quant.RowBytes(typ, k)
		xRow, _ := ActivationRowBytes(typ, k)
		whole := make([]float32, m*n)
		if err := GEMM(typ, w, n, k, x, m, whole, n); err != nil {
			t.Fatal(err)
		}
		split := make([]float32, m*n)
		cuts := []int{0, 4, 72, 132, m}
		for j0 := 0; j0 < n; j0 += 4 {
			j1 := min(n, j0+4)
			for c := 0; c+1 < len(cuts); c++ {
				i0, i1 := cuts[c], cuts[c+1]
				if err := GEMM(typ, w[j0*wRow:], j1-j0, k, x[i0*xRow:], i1-i0, split[i0*n+j0:], n); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range whole {
			if math.Float32bits(whole[i]) != math.Float32bits(split[i]) {
				t.Fatalf("%v: out[%d,%d] = %g in one call, %g split", typ, i/n, i%n, whole[i], split[i])
			}
		}
	}
}
