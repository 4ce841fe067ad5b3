//go:build !purego

package kernels

import (
	"encoding/binary"
	"testing"

	"github.com/clefrt/clef/quant"
)

// TestPackedEachISA runs the packed kernels' checks at every kernel level
// this CPU runs, and checks that each level dispatches to its own kernels.
func TestPackedEachISA(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		for _, typ := range kTypes {
			var want *pkKernels
			switch level {
			case isaAVX2:
				want = pkTable[typ]
			case isaAVX512:
				want = pkTableAVX512[typ]
			}
			if got := packedKernels(typ); got != want {
				t.Fatalf("%v at level %s: packedKernels gives another level's kernels", typ, level)
			}
		}
		TestPackedMatchesGeneric(t)
		pkRecsCheck(t)
	})
}

// TestPackedExact checks the packed kernels where their float arithmetic
// is exact: block scales d = dmin = 1 and activation scales 1 make every
// block's contribution the integer Σ scale·u·a − Σ coef·bsum, and all
// partial sums stay below 2^24, so each kernel, at every level, must give
// exactly the integer the test computes, as the generic twin does (a
// wrong group scale, code or lane is then an exact mismatch, not a
// tolerance question). Weight codes and scales are random (every value),
// weight row 1 all 0x80 bytes; the activation codes are shrunk to
// [-4, 3] to keep the sums exact, except one code per 64 of row 1, which
// stay at -128 or +127.
func TestPackedExact(t *testing.T) {
	const k = 512
	nb := k / 256
	forEachISA(t, func(t *testing.T) {
		for _, typ := range kTypes {
			w, x, _, _ := operands(t, typ, 4, 4, k, 23)
			wRow, _ := quant.RowBytes(typ, k)
			xRow, _ := ActivationRowBytes(typ, k)
			bb := wRow / nb
			for r := 0; r < 4; r++ {
				for b := 0; b < nb; b++ {
					for _, o := range scaleOffsets[typ] {
						binary.LittleEndian.PutUint16(w[r*wRow+b*bb+o:], quant.Float32ToFloat16(1))
					}
				}
			}
			for a := 0; a < 4; a++ {
				for b := 0; b < nb; b++ {
					xb := x[a*xRow+292*b:]
					binary.LittleEndian.PutUint32(xb, 0x3f800000) // 1.0
					for g := 0; g < 16; g++ {
						sum := 0
						for l := 0; l < 16; l++ {
							q := &xb[4+16*g+l]
							if a != 1 || g%4 != 0 || l != 0 {
								*q = byte(int8(*q) >> 5)
							}
							sum += int(int8(*q))
						}
						binary.LittleEndian.PutUint16(xb[260+2*g:], uint16(int16(sum)))
					}
				}
			}
			recs := make([]byte, 4*nb*pkRec)
			decodePkRecs(typ, recs, w, 4, wRow, nb, bb)
			// exact is Σ over blocks of S − C for weight row r and
			// activation row a, in integers.
			var u [256]byte
			exact := func(r, a int) float32 {
				var sum, abs int64
				for b := 0; b < nb; b++ {
					unpackKCodes(typ, u[:], w[r*wRow+b*bb:r*wRow+(b+1)*bb])
					sc, co, _, _ := kScales(typ, w[r*wRow+b*bb:])
					xa := x[a*xRow+292*b:]
					for g := 0; g < 16; g++ {
						for l := 0; l < 16; l++ {
							p := int64(sc[g]) * int64(u[16*g+l]) * int64(int8(xa[4+16*g+l]))
							sum += p
							abs += max(p, -p)
						}
						c := int64(co[g]) * int64(int16(binary.LittleEndian.Uint16(xa[260+2*g:])))
						sum -= c
						abs += max(c, -c)
					}
				}
				// abs bounds every partial sum, in any order.
				if abs >= 1<<24 {
					t.Fatalf("%v w%d·x%d: operands too large for exact float32 sums (%d)", typ, r, a, abs)
				}
				return float32(sum)
			}
			kern := packedKernels(typ)
			for _, kn := range []*pkKernels{nil, kern} {
				name := "generic"
				if kn != nil {
					name = level.String()
				} else if kern == nil && level != isaGeneric {
					continue
				}
				var acc [64]float32
				for r0 := 0; r0 < 4; r0 += 2 {
					clear(acc[:])
					pkDot2x4(typ, kn, w[r0*wRow:], wRow, recs[r0*nb*pkRec:], nb, bb, x, xRow, &acc)
					for r := 0; r < 2; r++ {
						for a := 0; a < 4; a++ {
							if got, want := hsum8(acc[8*(4*r+a):]), exact(r0+r, a); got != want {
								t.Errorf("%v %s 2x4 w%d·x%d: %g, want exactly %g", typ, name, r0+r, a, got, want)
							}
						}
					}
				}
				for a := 0; a < 4; a++ {
					clear(acc[:])
					pkDot4x1(typ, kn, w, wRow, recs, nb, bb, x[a*xRow:], &acc)
					for r := 0; r < 4; r++ {
						if got, want := hsum8(acc[8*r:]), exact(r, a); got != want {
							t.Errorf("%v %s 4x1 w%d·x%d: %g, want exactly %g", typ, name, r, a, got, want)
						}
					}
				}
			}
		}
	})
}
