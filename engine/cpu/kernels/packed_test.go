package kernels

import (
	"math"
	"testing"

	"github.com/clefrt/clef/quant"
)

var kTypes = []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// TestPackedMatchesGeneric checks both packed kernel shapes against their
// generic twin and the generic twin against float64 dot products of the
// dequantized operands, on random blocks with every code value.
func TestPackedMatchesGeneric(t *testing.T) {
	const k = 2048
	nb := k / 256
	for _, typ := range kTypes {
		w, x, wf, xf := operands(t, typ, 4, 4, k, 11)
		wRow, _ := quant.RowBytes(typ, k)
		xRow, _ := ActivationRowBytes(typ, k)
		bb := wRow / nb
		recs := make([]byte, 4*nb*pkRec)
		decodePkRecs(typ, recs, w, 4, wRow, nb, bb)
		want := func(r, a int) (ref, abs float64) {
			for c := 0; c < k; c++ {
				p := float64(wf[r*k+c]) * float64(xf[a*k+c])
				ref += p
				abs += math.Abs(p)
			}
			return ref, abs
		}
		check := func(name string, got float32, r, a int) {
			ref, abs := want(r, a)
			if d := math.Abs(float64(got) - ref); !(d <= 1e-6*abs) {
				t.Errorf("%v %s w%d·x%d: %g, want %g (Σ|w·x| %g)", typ, name, r, a, got, ref, abs)
			}
		}
		kern := packedKernels(typ)
		for _, kn := range []*pkKernels{nil, kern} {
			name := "generic"
			if kn != nil {
				name = "fast"
			} else if kern == nil {
				continue
			}
			var acc [64]float32
			for r0 := 0; r0 < 4; r0 += 2 {
				clear(acc[:])
				pkDot2x4(typ, kn, w[r0*wRow:], wRow, recs[r0*nb*pkRec:], nb, bb, x, xRow, &acc)
				for r := 0; r < 2; r++ {
					for a := 0; a < 4; a++ {
						check(name+" 2x4", hsum8(acc[8*(4*r+a):]), r0+r, a)
					}
				}
			}
			for a := 0; a < 4; a++ {
				clear(acc[:])
				pkDot4x1(typ, kn, w, wRow, recs, nb, bb, x[a*xRow:], &acc)
				for r := 0; r < 4; r++ {
					check(name+" 4x1", hsum8(acc[8*r:]), r, a)
				}
			}
		}
	}
}

// TestPkRecs checks the scale decoding against kScales on random blocks.
func TestPkRecs(t *testing.T) { pkRecsCheck(t) }

func pkRecsCheck(t *testing.T) {
	const k = 1024
	for _, typ := range kTypes {
		w, _, _, _ := operands(t, typ, 3, 1, k, 5)
		wRow, _ := quant.RowBytes(typ, k)
		nb := k / 256
		bb := wRow / nb
		recs := make([]byte, 4*nb*pkRec)
		for i := range recs {
			recs[i] = 0xa5
		}
		decodePkRecs(typ, recs, w, 3, wRow, nb, bb)
		for r := 0; r < 4; r++ {
			for b := 0; b < nb; b++ {
				rec := recs[(r*nb+b)*pkRec:]
				var sc, co [16]int16
				var fS, fB float32
				if r < 3 {
					sc, co, fS, fB = kScales(typ, w[r*wRow+b*bb:])
				}
				for g := 0; g < 16; g++ {
					if gs, gc := int16(le.Uint16(rec[2*g:])), int16(le.Uint16(rec[32+2*g:])); gs != sc[g] || gc != co[g] {
						t.Fatalf("%v row %d block %d group %d: scale %d coef %d, want %d %d", typ, r, b, g, gs, gc, sc[g], co[g])
					}
				}
				if gs, gb := math.Float32frombits(le.Uint32(rec[64:])), math.Float32frombits(le.Uint32(rec[68:])); gs != fS || gb != fB {
					t.Fatalf("%v row %d block %d: fS %g fB %g, want %g %g", typ, r, b, gs, gb, fS, fB)
				}
			}
		}
	}
}

// TestGEMMZeroK checks that an empty dot product gives zeros for every type.
func TestGEMMZeroK(t *testing.T) {
	for _, typ := range gemmTypes {
		out := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
		if err := GEMM(typ, nil, 5, 0, nil, 2, out, 5); err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		for i, v := range out {
			if v != 0 {
				t.Fatalf("%v: out[%d] = %g, want 0", typ, i, v)
			}
		}
	}
}
