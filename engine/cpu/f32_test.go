package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// guarded returns a slice of n random values inside a buffer whose guard
// bands on both sides hold NaN: a kernel reading outside its slice turns
// the result into NaN, and one writing outside it is caught by checkGuard.
func guarded(rng *rand.Rand, n int) (buf, s []float32) {
	const guard = 16
	buf = make([]float32, n+2*guard)
	for i := range buf {
		buf[i] = float32(math.NaN())
	}
	s = buf[guard : guard+n : guard+n]
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return buf, s
}

func checkGuard(t *testing.T, what string, buf []float32, n int) {
	t.Helper()
	for i := range buf {
		if (i < 16 || i >= 16+n) && !math.IsNaN(float64(buf[i])) {
			t.Fatalf("%s: wrote guard band at %d", what, i)
		}
	}
}

func close32(a, b float32, scale float64) bool {
	return math.Abs(float64(a)-float64(b)) <= 1e-5*scale && !math.IsNaN(float64(a))
}

// TestF32Kernels runs the fast float32 kernels (AVX2 unless -tags purego)
// and their generic twins on one table of odd sizes with NaN guard bands.
func TestF32Kernels(t *testing.T) {
	t.Logf("float32 kernels: %s", accelerated)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 128, 257} {
		scale := math.Sqrt(float64(n)) + 1
		// dot4s: rows stride apart, stride > n with NaN between rows.
		stride := n + 5
		wbuf, w := guarded(rng, 4*stride)
		for j := 0; j < 4; j++ {
			for i := n; i < stride; i++ {
				w[j*stride+i] = float32(math.NaN())
			}
		}
		_, x := guarded(rng, n)
		var got, want [4]float32
		dot4s(x, w[:3*stride+n], stride, &got)
		dot4sGeneric(x, w[:3*stride+n], stride, &want)
		for j := range got {
			if !close32(got[j], want[j], scale) {
				t.Errorf("dot4s n=%d row %d: %v, generic %v", n, j, got[j], want[j])
			}
		}
		checkGuard(t, "dot4s w", wbuf, 4*stride)

		// dot2x4: two x rows ldx apart.
		ldx := n + 3
		_, x2 := guarded(rng, 2*ldx)
		for i := n; i < ldx; i++ {
			x2[i] = float32(math.NaN())
		}
		var g8, w8 [8]float32
		dot2x4(x2[:ldx+n], ldx, w[:3*stride+n], stride, n, &g8)
		dot2x4Generic(x2[:ldx+n], ldx, w[:3*stride+n], stride, n, &w8)
		for j := range g8 {
			if !close32(g8[j], w8[j], scale) {
				t.Errorf("dot2x4 n=%d out %d: %v, generic %v", n, j, g8[j], w8[j])
			}
		}

		// axpy: y must change only inside its slice.
		ybuf, y := guarded(rng, n)
		y2 := append([]float32(nil), y...)
		axpy(y, x, 0.75)
		axpyGeneric(y2, x, 0.75)
		for i := range y {
			if !close32(y[i], y2[i], 1) {
				t.Errorf("axpy n=%d at %d: %v, generic %v", n, i, y[i], y2[i])
			}
		}
		checkGuard(t, "axpy y", ybuf, n)

		// axpy4: four x rows stride apart folded into y.
		ybuf, y = guarded(rng, n)
		y2 = append([]float32(nil), y...)
		p := [4]float32{0.5, -1.25, 2, 0.125}
		axpy4(y, w[:3*stride+n], stride, &p)
		axpy4Generic(y2, w[:3*stride+n], stride, &p)
		for i := range y {
			if !close32(y[i], y2[i], scale) {
				t.Errorf("axpy4 n=%d at %d: %v, generic %v", n, i, y[i], y2[i])
			}
		}
		checkGuard(t, "axpy4 y", ybuf, n)
	}
}

func BenchmarkGEMMTileF32(b *testing.B) {
	const m, k, nt = 64, 2048, 16
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, m*k)
	w := make([]float32, nt*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	out := make([]float32, m*nt)
	b.SetBytes(int64(2 * m * k * nt)) // "bytes" = flops, so MB/s reads as MFLOP/s
	for i := 0; i < b.N; i++ {
		gemmTile(out, x, w, m, k, nt, 0, nt)
	}
}
