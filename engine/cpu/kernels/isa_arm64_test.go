//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/clefrt/clef/quant"
	"golang.org/x/sys/cpu"
)

// TestExpectedISA fails when CLEF_EXPECT_ISA names a level other than the
// one detected, so that a run under an emulator (qemu-aarch64 -cpu max:
// i8mm; -cpu cortex-a76: neon; -cpu cortex-a53: generic) proves which
// kernels it covered. Without the variable it only logs the level.
func TestExpectedISA(t *testing.T) {
	t.Logf("detected %s (dot product %v, i8mm %v); running %s",
		cpuLevel, cpu.ARM64.HasASIMDDP, cpu.ARM64.HasI8MM, level)
	want := strings.TrimSpace(os.Getenv("CLEF_EXPECT_ISA"))
	if want == "" {
		t.Skip("CLEF_EXPECT_ISA not set")
	}
	if cpuLevel.String() != want {
		t.Fatalf("CLEF_EXPECT_ISA=%s but this CPU is detected as %s (dot product %v, i8mm %v)",
			want, cpuLevel, cpu.ARM64.HasASIMDDP, cpu.ARM64.HasI8MM)
	}
}

// TestQ8_0x2x4I8MM drives the SMMLA q8_0 kernel through q8_0TilesI8MM
// (and below level i8mm the generic twin) directly: two pairs of weight
// rows × two quads of activation rows with every code value, -128 against
// -128 and ±127, odd and even block counts, a gap of NaNs between the
// quads' widened scales and NaN sentinels around and between the output
// rows (the driver's out/ldOut form), against float64 dot products of the
// blocks and the generic twin, at every level.
func TestQ8_0x2x4I8MM(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 4))
		const np, nq = 2, 2
		for _, nb := range []int{1, 2, 3, 4, 5, 9, 64} {
			row := 34 * nb
			w := q8Blocks(rng, 2*np, nb, true)
			x := q8Blocks(rng, 4*nq, nb, true)
			qf := 4*nb + 4
			xd := make([]float32, nq*qf)
			wd := make([]float32, 2*np*nb+3)
			for i := range xd {
				xd[i] = float32(math.NaN())
			}
			for i := range wd {
				wd[i] = float32(math.NaN())
			}
			for b := 0; b < nb; b++ {
				for r := 0; r < 4*nq; r++ {
					xd[r/4*qf+4*b+r%4] = f16(x[r*row+34*b:])
				}
				for r := 0; r < 2*np; r++ {
					wd[r*nb+b] = f16(w[r*row+34*b:])
				}
			}
			// The results in rows of ldOut with NaNs between and around.
			const ldOut = 2*np + 3
			out := make([]float32, 1+4*nq*ldOut+1)
			for i := range out {
				out[i] = float32(math.NaN())
			}
			q8_0TilesI8MM(w, row, wd, x, row, xd, qf, nb, np, nq, out[1:1+(4*nq-1)*ldOut+2*np], ldOut)
			for q := 0; q < nq; q++ {
				for p := 0; p < np; p++ {
					var g [8]float32
					dotQ8_0x2x4Generic(w[2*p*row:], row, x[4*q*row:], row, nb, &g)
					for i := 0; i < 8; i++ {
						wr, xr := 2*p+i/4, 4*q+i%4
						var ref, abs float64
						for b := 0; b < nb; b++ {
							d := float64(f16(w[wr*row+34*b:])) * float64(f16(x[xr*row+34*b:]))
							for j := 2; j < 34; j++ {
								p := d * float64(int8(w[wr*row+34*b+j])) * float64(int8(x[xr*row+34*b+j]))
								ref += p
								abs += math.Abs(p)
							}
						}
						got := float64(out[1+xr*ldOut+wr])
						if !(math.Abs(got-ref) <= 1e-6*abs) || !(math.Abs(got-float64(g[i])) <= 1e-6*abs) {
							t.Fatalf("nb=%d w%d·x%d: %g, want %g (generic %g, Σ|w·x| %g)", nb, wr, xr, got, ref, g[i], abs)
						}
					}
				}
			}
			for i := range out {
				if c := (i - 1) % ldOut; (i == 0 || c >= 2*np || i > (4*nq-1)*ldOut+2*np) && !math.IsNaN(float64(out[i])) {
					t.Fatalf("nb=%d: wrote outside its results (out[%d] = %g)", nb, i, out[i])
				}
			}
		}
	})
}

// TestKDot4x2 checks the SMMLA K-format kernel (and below level i8mm its
// generic twin) on every K format: decoded tiles of the shared operands
// (random blocks with every code and scale value, row 1 all 0x80 bytes;
// activation row 1 saturated, q8_K code -128 included) against two
// activation rows, with NaN sentinels around the results, against the
// float64 dot products of the dequantized operands and the generic twin.
func TestKDot4x2(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		for _, typ := range []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
			for _, k := range []int{256, 768, 2048} {
				const m = 3
				nb := k / 256
				w, x, wf, xf := operands(t, typ, 4, m, k, uint64(k)+11)
				wRow, _ := quant.RowBytes(typ, k)
				xRow, _ := ActivationRowBytes(typ, k)
				tile := make([]byte, 4*nb*kRec)
				decodeKTile(typ, tile, w, 4, wRow, nb, wRow/nb)
				for a0 := 0; a0+2 <= m; a0++ {
					var r [10]float32
					for i := range r {
						r[i] = float32(math.NaN())
					}
					kDot4x2(tile, nb, x[a0*xRow:], xRow, (*[8]float32)(r[1:9]))
					var g [8]float32
					kDot4x2Generic(tile, nb, x[a0*xRow:], xRow, &g)
					for i := 0; i < 8; i++ {
						a, row := a0+i/4, i%4
						var ref, abs float64
						for c := 0; c < k; c++ {
							p := float64(wf[row*k+c]) * float64(xf[a*k+c])
							ref += p
							abs += math.Abs(p)
						}
						got := float64(r[1+i])
						if !(math.Abs(got-ref) <= 1e-6*abs) || !(math.Abs(got-float64(g[i])) <= 1e-6*abs) {
							t.Fatalf("%v k=%d w%d·x%d: %g, want %g (generic %g, Σ|w·x| %g)", typ, k, row, a, got, ref, g[i], abs)
						}
					}
					if !math.IsNaN(float64(r[0])) || !math.IsNaN(float64(r[9])) {
						t.Fatalf("%v k=%d: wrote outside its 8 results", typ, k)
					}
				}
			}
		}
	})
}

// TestGEMMTakesI8MM checks which kernels GEMM runs at each level: at
// i8mm the q8_0 results of the first m mod 4 = 0 rows have the bits of
// the SMMLA kernel called directly and the leftover row those of
// dotQ8_0x4 (SDOT), the K-format pairs of rows those of kDot4x2 and the
// odd last row those of kDot4; below i8mm neither 2×4 kernel is offered
// and every row has the bits of the per-row kernels.
func TestGEMMTakesI8MM(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		i8mm := level >= isaI8MM
		if hasQ8_0x2x4() != i8mm || hasKDot4x2() != i8mm {
			t.Fatalf("level %s: hasQ8_0x2x4 %v, hasKDot4x2 %v, want %v", level, hasQ8_0x2x4(), hasKDot4x2(), i8mm)
		}
		same := func(what string, got, want float32) {
			t.Helper()
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("level %s: %s = %g from GEMM, %g from the kernel", level, what, got, want)
			}
		}

		// q8_0: 8 weight rows, 9 activation rows (two quads and one left).
		const n, m, k = 8, 9, 800
		nb := k / 32
		w, x, _, _ := operands(t, quant.Q8_0, n, m, k, 21)
		row := 34 * nb
		out := make([]float32, m*n)
		if err := GEMM(quant.Q8_0, w, n, k, x, m, out, n); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, m*n)
		if i8mm {
			wd := make([]float32, n*nb)
			for j := 0; j < n; j++ {
				f16StridedGeneric(wd[j*nb:], w[j*row:], 34, nb)
			}
			qf := q8QuadFloats(nb)
			xd := make([]float32, 2*qf)
			for q := 0; q < 2; q++ {
				q8ScalesQuadGeneric(xd[q*qf:], x[4*q*row:], row, nb, false)
			}
			q8_0TilesI8MM(w, row, wd, x, row, xd, qf, nb, n/2, 2, want, n)
		}
		for i := 0; i < m; i++ {
			if i8mm && i < 8 {
				continue
			}
			for j0 := 0; j0 < n; j0 += 4 {
				var r [4]float32
				dotQ8_0x4(w[j0*row:], row, x[i*row:], nb, &r)
				copy(want[i*n+j0:], r[:])
			}
		}
		for i := range out {
			same(fmt.Sprintf("q8_0 out[%d,%d]", i/n, i%n), out[i], want[i])
		}

		// K formats: 4 weight rows, 3 activation rows.
		for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K} {
			const n, m, k = 4, 3, 512
			nb := k / 256
			w, x, _, _ := operands(t, typ, n, m, k, 22)
			wRow, _ := quant.RowBytes(typ, k)
			xRow, _ := ActivationRowBytes(typ, k)
			out := make([]float32, m*n)
			if err := GEMM(typ, w, n, k, x, m, out, n); err != nil {
				t.Fatal(err)
			}
			tile := make([]byte, 4*nb*kRec)
			decodeKTile(typ, tile, w, 4, wRow, nb, wRow/nb)
			var want [m * n]float32
			first := 0
			if i8mm {
				var r8 [8]float32
				kDot4x2(tile, nb, x, xRow, &r8)
				copy(want[:], r8[:])
				first = 2
			}
			for i := first; i < m; i++ {
				var r [4]float32
				kDot4(tile, nb, x[i*xRow:], &r)
				copy(want[i*n:], r[:])
			}
			for i := range out {
				same(fmt.Sprintf("%v out[%d,%d]", typ, i/n, i%n), out[i], want[i])
			}
		}
	})
}
