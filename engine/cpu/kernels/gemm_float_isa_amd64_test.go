//go:build !purego

package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/quant"
)

var floatTypes = []quant.Type{quant.F32, quant.F16, quant.BF16}

// floatKs are the row lengths of the float kernel checks: every residue of
// n8 = k/8 modulo 4 (the AVX-512 loops take 32 or 16 values, then 16 and
// 8) and of k modulo 8 (the scalar tail in Go), n8 = 0 included.
var floatKs = []int{1, 7, 8, 9, 15, 16, 23, 24, 31, 32, 33, 40, 47, 48, 56, 63, 64, 72, 300, 1003}

// floatRows returns rows weight rows of k values of typ, each followed by
// pad NaN values (stride bytes apart), and their values as float32.
func floatRows(rng *rand.Rand, typ quant.Type, rows, k, pad int) (w []byte, stride int, wf []float32) {
	f, _ := quant.FormatOf(typ)
	esz := f.BlockBytes
	stride = esz * (k + pad)
	w = make([]byte, rows*stride)
	wf = make([]float32, rows*k)
	src := make([]float32, k)
	for r := 0; r < rows; r++ {
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 0.05)
		}
		row := w[r*stride : (r+1)*stride]
		f.Quantize(row[:esz*k], src, nil)
		for i := k; i < k+pad; i++ {
			putNaN(typ, row[esz*i:])
		}
		f.Dequantize(wf[r*k:(r+1)*k], row[:esz*k])
	}
	return w, stride, wf
}

// putNaN writes a quiet NaN of typ at b.
func putNaN(typ quant.Type, b []byte) {
	switch typ {
	case quant.F16:
		binary.LittleEndian.PutUint16(b, 0x7e00)
	case quant.BF16:
		binary.LittleEndian.PutUint16(b, 0x7fc0)
	default:
		binary.LittleEndian.PutUint32(b, 0x7fc00000)
	}
}

// floatActs returns rows activation rows of k float32 values (k apart),
// followed by 16 NaN values; one value in 97 is 40 times larger.
func floatActs(rng *rand.Rand, rows, k int) []float32 {
	x := make([]float32, rows*k+16)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	for i := 0; i < rows*k; i++ {
		x[i] = float32(rng.NormFloat64())
		if i%97 == 0 {
			x[i] *= 40
		}
	}
	return x
}

// checkDot fails t unless got is within 1e-6·Σ|w·x| of the float64 dot
// product of w and x (the bound of every float kernel test).
func checkDot(t *testing.T, name string, got float32, w, x []float32) {
	t.Helper()
	var ref, abs float64
	for i := range w {
		p := float64(w[i]) * float64(x[i])
		ref += p
		abs += math.Abs(p)
	}
	if !(math.Abs(float64(got)-ref) <= 1e-6*abs+1e-30) {
		t.Fatalf("%s: %g, want %g (Σ|w·x| %g)", name, got, ref, abs)
	}
}

// nanResults returns n+2 NaN floats: results go to [1, n+1), the ends
// must stay NaN.
func nanResults(n int) []float32 {
	r := make([]float32, n+2)
	for i := range r {
		r[i] = float32(math.NaN())
	}
	return r
}

func checkEnds(t *testing.T, name string, r []float32) {
	t.Helper()
	if !math.IsNaN(float64(r[0])) || !math.IsNaN(float64(r[len(r)-1])) {
		t.Fatalf("%s: wrote outside its results", name)
	}
}

// floatKernelTable drives the float kernels through their dispatch
// (dotFloat2x4, dotFloat4x4, dotHalfx4, dotF32x4, widen) at the current level: odd
// lengths, NaN after every weight row and after the activations (a read
// past k values gives NaN), NaN sentinels around the results, against
// float64 dot products within 1e-6·Σ|w·x|; widening must be exact.
func floatKernelTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 5))
	for _, typ := range floatTypes {
		f, _ := quant.FormatOf(typ)
		for _, k := range floatKs {
			name := fmt.Sprintf("%v k=%d", typ, k)
			w, stride, wf := floatRows(rng, typ, 4, k, 3)
			x := floatActs(rng, 4, k)
			if hasFloat2x4() {
				for r0 := 0; r0 < 4; r0 += 2 {
					r := nanResults(8)
					dotFloat2x4(typ, w[r0*stride:], stride, k, x[:4*k], (*[8]float32)(r[1:9]))
					for i := 0; i < 8; i++ {
						row, a := r0+i/4, i%4
						checkDot(t, fmt.Sprintf("%s 2x4 w%d·x%d", name, row, a), r[1+i], wf[row*k:(row+1)*k], x[a*k:(a+1)*k])
					}
					checkEnds(t, name+" 2x4", r)
				}
			}
			r := nanResults(16)
			if dotFloat4x4(typ, w, stride, k, x[:4*k], (*[16]float32)(r[1:17])) {
				for i := 0; i < 16; i++ {
					row, a := i/4, i%4
					checkDot(t, fmt.Sprintf("%s 4x4 w%d·x%d", name, row, a), r[1+i], wf[row*k:(row+1)*k], x[a*k:(a+1)*k])
				}
				checkEnds(t, name+" 4x4", r)
			} else if level == isaAVX512 {
				t.Fatalf("%s: no 4x4 kernel at level avx512", name)
			}
			for a := 0; a < 4; a++ {
				r := nanResults(4)
				xa := x[a*k : (a+1)*k]
				if typ == quant.F32 {
					tile := make([]float32, 4*k+8)
					for i := range tile {
						tile[i] = float32(math.NaN())
					}
					copy(tile, wf)
					dotF32x4(tile, k, xa, (*[4]float32)(r[1:5]))
				} else if !dotHalfx4(typ == quant.BF16, w, stride, k, xa, (*[4]float32)(r[1:5])) {
					continue
				}
				for j := 0; j < 4; j++ {
					checkDot(t, fmt.Sprintf("%s 4x1 w%d·x%d", name, j, a), r[1+j], wf[j*k:(j+1)*k], xa)
				}
				checkEnds(t, name+" 4x1", r)
			}
			dst := nanResults(k)
			widen(f, dst[1:k+1], w[:stride])
			checkEnds(t, name+" widen", dst)
			for i := 0; i < k; i++ {
				if math.Float32bits(dst[1+i]) != math.Float32bits(wf[i]) {
					t.Fatalf("%s widen: value %d is %g, want %g", name, i, dst[1+i], wf[i])
				}
			}
		}
	}
}

// TestGEMMFloatEachISA runs TestGEMMFloat and the float kernel table at
// every kernel level this CPU runs.
func TestGEMMFloatEachISA(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		TestGEMMFloat(t)
		floatKernelTable(t)
	})
}

// fma32 is a·b + c rounded once to float32 (round to nearest even), as
// VFMADD231PS computes it.
func fma32(a, b, c float32) float32 {
	var p, s big.Float
	p.SetPrec(1000).SetFloat64(float64(a))
	p.Mul(&p, big.NewFloat(float64(b)))
	s.SetPrec(1000).Add(&p, big.NewFloat(float64(c)))
	r, _ := s.Float32()
	return r
}

// lanesSum adds the lanes of a vector register as the kernels' horizontal
// sums do: the high half onto the low half until one lane is left.
func lanesSum(l []float32) float32 {
	for n := len(l) / 2; n >= 1; n /= 2 {
		for i := 0; i < n; i++ {
			l[i] += l[i+n]
		}
	}
	return l[0]
}

// modelDot is the float kernels' summation order for one result of 8·n8
// values: lanes sums per register width (8 for AVX2, 16 for AVX-512), a
// fused multiply-add per value into lane i mod width of one set of sums;
// the 4×1 AVX-512 kernels keep two sets (set = i/16 mod 2 within each 32,
// the 16 after the last 32 to set 0, the last 8 to set 1), added lane by
// lane before the horizontal sum. w4x1 selects the 4×1 kernel's order.
func modelDot(w, x []float32, width int, w4x1 bool) float32 {
	n := len(w)
	sets := [2][]float32{make([]float32, width), make([]float32, width)}
	for i := 0; i < n; i++ {
		set := 0
		if width == 16 && w4x1 {
			switch {
			case i < n/32*32:
				set = i / 16 % 2
			case n%32 >= 16 && i < n/32*32+16:
				set = 0
			default:
				set = 1
			}
		}
		l := sets[set]
		l[i%width] = fma32(w[i], x[i], l[i%width])
	}
	if width == 16 && n%16 != 0 {
		// The last 8 values ran at full width with zero high lanes.
		l := sets[0]
		if w4x1 {
			l = sets[1]
		}
		for i := 8; i < 16; i++ {
			l[i] = fma32(0, 0, l[i])
		}
	}
	if width == 16 && w4x1 {
		for i := range sets[0] {
			sets[0][i] += sets[1][i]
		}
	}
	return lanesSum(sets[0])
}

// TestFloatKernelsOrder checks the AVX2 and AVX-512 float kernels, called
// through their dispatch functions at each level (the 4×4 one only at
// avx512, where it must give the 2×4 kernel's bits), bit for bit against
// modelDot: the same products as the generic twins (weights widened
// exactly, one rounding per multiply-add), summed in the order stated
// there, which is all that may differ between the levels. Lengths are
// multiples of 8 (the kernels' contract); the Go tails are in
// floatKernelTable.
func TestFloatKernelsOrder(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		if level == isaGeneric {
			t.Skip("no fast kernels at this level")
		}
		width := 8
		if level == isaAVX512 {
			width = 16
		}
		rng := rand.New(rand.NewPCG(41, 9))
		for _, typ := range floatTypes {
			for _, n8 := range []int{1, 2, 3, 4, 5, 6, 7, 9, 33, 130} {
				k := 8 * n8
				name := fmt.Sprintf("%v %s n8=%d", typ, level, n8)
				w, stride, wf := floatRows(rng, typ, 4, k, 5)
				x := floatActs(rng, 4, k)
				for r0 := 0; r0 < 4; r0 += 2 {
					var r [8]float32
					dotFloat2x4Fast(typ, &w[r0*stride], stride, &x[0], 4*k, n8, &r)
					for i := range r {
						row, a := r0+i/4, i%4
						want := modelDot(wf[row*k:(row+1)*k], x[a*k:(a+1)*k], width, false)
						if math.Float32bits(r[i]) != math.Float32bits(want) {
							t.Fatalf("%s 2x4 w%d·x%d: %g (%#x), model %g (%#x)", name, row, a, r[i], math.Float32bits(r[i]), want, math.Float32bits(want))
						}
					}
				}
				var r16 [16]float32
				if dotFloat4x4Fast(typ, &w[0], stride, &x[0], 4*k, n8, &r16) != (level == isaAVX512) {
					t.Fatalf("%s: the 4x4 kernel runs at level %s", name, level)
				}
				for i := range r16 {
					row, a := i/4, i%4
					want := modelDot(wf[row*k:(row+1)*k], x[a*k:(a+1)*k], width, false)
					if level == isaAVX512 && math.Float32bits(r16[i]) != math.Float32bits(want) {
						t.Fatalf("%s 4x4 w%d·x%d: %g (%#x), model %g (%#x)", name, row, a, r16[i], math.Float32bits(r16[i]), want, math.Float32bits(want))
					}
				}
				for a := 0; a < 4; a++ {
					var r [4]float32
					xa := x[a*k : (a+1)*k]
					if typ == quant.F32 {
						dotF32x4Fast(&wf[0], k, &xa[0], n8, &r)
					} else {
						dotHalfx4Fast(typ == quant.BF16, &w[0], stride, &xa[0], n8, &r)
					}
					for j := range r {
						want := modelDot(wf[j*k:(j+1)*k], xa, width, true)
						if math.Float32bits(r[j]) != math.Float32bits(want) {
							t.Fatalf("%s 4x1 w%d·x%d: %g (%#x), model %g (%#x)", name, j, a, r[j], math.Float32bits(r[j]), want, math.Float32bits(want))
						}
					}
				}
			}
		}
	})
}

// BenchmarkGEMMFloatISA runs GEMMFloat at the thinker's shapes (k = 2048;
// n = 768 for an expert's projection, 2048 and 4096 for attention and
// dense ones; m tokens) at levels avx2 and avx512 in turn inside each
// iteration, and reports GFLOP per CPU-second of each and their ratio
// (avx512/avx2): both see the same machine load.
func BenchmarkGEMMFloatISA(b *testing.B) {
	if cpuLevel < isaAVX512 {
		b.Skipf("this CPU runs at most %s", cpuLevel)
	}
	saved := level
	defer setISA(saved)
	const k = 2048
	rng := rand.New(rand.NewPCG(1, 2))
	x := floatActs(rng, 512, k)
	for _, typ := range []quant.Type{quant.BF16, quant.F16} {
		for _, n := range []int{768, 2048, 4096} {
			w, _, _ := floatRows(rng, typ, n, k, 0)
			for _, m := range []int{1, 8, 64, 512} {
				b.Run(fmt.Sprintf("%v/n=%d/m=%d", typ, n, m), func(b *testing.B) {
					out := make([]float32, m*n)
					var cpu [2]float64
					for b.Loop() {
						for i, l := range []isaLevel{isaAVX2, isaAVX512} {
							setISA(l)
							c0 := cpuTime()
							if err := GEMMFloat(typ, w, n, k, x, m, out, n); err != nil {
								b.Fatal(err)
							}
							cpu[i] += (cpuTime() - c0).Seconds()
						}
					}
					flops := 2 * float64(m*n*k) * float64(b.N) / 1e9
					b.ReportMetric(flops/cpu[0], "avx2-GFLOP/cpu-s")
					b.ReportMetric(flops/cpu[1], "avx512-GFLOP/cpu-s")
					b.ReportMetric(cpu[0]/cpu[1], "avx512/avx2")
				})
			}
		}
	}
}
