package quant

import (
	"testing"
)

func TestDbg2(t *testing.T) {
	input := readF32(t, "input.f32.bin")
	imat := readF32(t, "imatrix.f32.bin")
	x := input[2*512 : 3*512]
	var q [32]int
	for b := 0; b < 16; b++ {
		xs, ws := x[32*b:32*b+32], imat[32*b:32*b+32]
		d1, m1 := fastAffineScale(xs, ws, 31, &imatrixEffort, q[:])
		e1 := affineCodes(xs, ws, d1, m1, 31, q[:])
		d2, m2 := bestAffineScale(xs, ws, 31, false, q[:])
		e2 := affineCodes(xs, ws, d2, m2, 31, q[:])
		if e1 > e2*1.0001 {
			dc, mc := fastAffine(xs, ws, 31, false, &imatrixEffort)
			dr, mr := bestAffineCont(xs, ws, 31, false, q[:])
			t.Logf("block %d: fast %g (%g,%g) cont (%g,%g) %g; ref %g (%g,%g) cont (%g,%g) %g", b, e1, d1, m1, dc, mc, affineCodes(xs, ws, float32(dc), float32(mc), 31, q[:]), e2, d2, m2, dr, mr, affineCodes(xs, ws, float32(dr), float32(mr), 31, q[:]))
		}
	}
}
