package cpu

import (
	"math"
	"testing"

	"github.com/clefrt/clef/engine/backend"
)

// TestSiLU holds the float32 SiLU of the MoE to the float64 x·σ(x) within
// 4 ulp of the result over the range the experts see, and checks its ends:
// 0, a very negative x (-0 or a tiny negative), a very positive x (x), NaN.
func TestSiLU(t *testing.T) {
	ulp := func(v float32) float64 {
		a := math.Abs(float64(v))
		return float64(math.Nextafter32(float32(a), float32(math.Inf(1)))) - a
	}
	bad := 0
	for i := -200000; i <= 200000; i++ {
		x := float32(i) * 1e-4 * float32(1+i%7) // -140..140, uneven steps
		want := float64(x) / (1 + math.Exp(-float64(x)))
		got := silu(x)
		if d := math.Abs(float64(got) - want); d > 4*ulp(float32(want)) && d > 1e-38 {
			if bad++; bad < 5 {
				t.Errorf("silu(%g) = %g, want %g (%.1f ulp)", x, got, want, d/ulp(float32(want)))
			}
		}
	}
	if v := silu(0); v != 0 {
		t.Errorf("silu(0) = %g", v)
	}
	if v := silu(-200); v > 0 || v < -1e-30 {
		t.Errorf("silu(-200) = %g, want about -0", v)
	}
	if v := silu(200); v != 200 {
		t.Errorf("silu(200) = %g, want 200", v)
	}
	if v := silu(float32(math.NaN())); v == v {
		t.Errorf("silu(NaN) = %g", v)
	}
}

// TestSiLUMul holds siluMul (the AVX2 lanes where there are any, the
// generic twin elsewhere) to the float64 silu(g)·u within 4 ulp of the
// result plus the rounding of the product, over odd lengths (tails of 1..63
// after whole blocks), blocks with a gate below -80 or a NaN (those go to
// silu), gates past ±87.3 and guard values after the slice that must stay.
func TestSiLUMul(t *testing.T) {
	ulp := func(v float64) float64 {
		a := float32(math.Abs(v))
		return float64(math.Nextafter32(a, float32(math.Inf(1))) - a)
	}
	rng := uint32(7)
	next := func() float32 { rng = rng*1664525 + 1013904223; return float32(rng>>8)/float32(1<<24)*2 - 1 }
	for _, n := range []int{1, 7, 8, 63, 64, 65, 130, 200, 511} {
		for _, special := range []string{"none", "low", "nan", "huge"} {
			g := make([]float32, n+3)
			u := make([]float32, n+3)
			for i := range g {
				g[i] = next() * 12
				u[i] = next() * 3
			}
			switch special {
			case "low":
				g[n/2] = -95
			case "nan":
				g[n/2] = float32(math.NaN())
			case "huge":
				g[n/2], g[n-1] = 90, 88
			}
			g0 := append([]float32(nil), g...)
			siluMul(g[:n], u[:n])
			for i := 0; i < n; i++ {
				x := float64(g0[i])
				want := x / (1 + math.Exp(-x)) * float64(u[i])
				if g0[i] != g0[i] {
					if g[i] == g[i] {
						t.Errorf("n=%d %s: [%d] silu(NaN)·u = %g, want NaN", n, special, i, g[i])
					}
					continue
				}
				if d := math.Abs(float64(g[i]) - want); d > 5*ulp(want) && d > 1e-37 {
					t.Errorf("n=%d %s: [%d] silu(%g)·%g = %g, want %g", n, special, i, g0[i], u[i], g[i], want)
				}
			}
			for i := n; i < n+3; i++ {
				if g[i] != g0[i] {
					t.Errorf("n=%d %s: guard [%d] changed", n, special, i)
				}
			}
		}
	}
}

// TestSiLUMulThreads: the SiLU of an expert FFN over the workers gives the
// same bits at 1, 2, 3 and 5 threads, on a size whose even cut is no
// multiple of the vector block (201 rows x 768) and with gates below -80
// (their blocks go to silu) scattered in.
func TestSiLUMulThreads(t *testing.T) {
	n := 201 * 768
	g0 := make([]float32, n)
	u := make([]float32, n)
	rng := uint32(3)
	for i := range g0 {
		rng = rng*1664525 + 1013904223
		g0[i] = (float32(rng>>8)/float32(1<<24)*2 - 1) * 10
		u[i] = float32(i%13) - 6
		if i%9973 == 0 {
			g0[i] = -90
		}
	}
	var want []float32
	for _, threads := range []int{1, 2, 3, 5} {
		g := append([]float32(nil), g0...)
		if err := New(backend.Options{Threads: threads}).siluMulParallel(g, u); err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = g
			continue
		}
		for i := range g {
			if math.Float32bits(g[i]) != math.Float32bits(want[i]) {
				t.Fatalf("threads %d: [%d] = %g, 1 thread gave %g", threads, i, g[i], want[i])
			}
		}
	}
}
