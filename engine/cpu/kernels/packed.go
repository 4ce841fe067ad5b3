package kernels

import (
	"math"

	"github.com/clefrt/clef/quant"
)

//go:generate go run gen_packed.go

// Packed-weight K-format GEMM (q2_K, q3_K, q4_K, q5_K, q6_K). The kernels
// read the quantized blocks as they are stored and rebuild each chunk of 32
// codes in registers; only the scales of four weight rows are decoded in Go,
// into records of pkRec bytes per block:
//
//	[0, 32)  int16 scale per group of 16 codes
//	[32, 64) int16 correction coefficient per group of 16 (kScales)
//	[64, 68) fS, [68, 72) fB (float32)
//
// A block then contributes dx·(fS·Σ scale·u·a − fB·Σ coef·bsum) with u the
// unsigned codes (unpackKCodes) and bsum the q8_K group sums. Register
// blocking: each rebuilt chunk is used against four activation rows
// (pk…x2x4, two weight rows × four activation rows per step); the last
// m mod 4 activation rows go through pk…x4x1.
const pkRec = 72

// decodePkRecs fills the scale records of up to four rows (missing rows
// zeroed) of type typ, bb bytes per block. It runs for every four weight
// rows of every call, so with few activation rows it is a large part of the
// work: rows go to an assembly decoder where there is one (pkrec_amd64.s);
// here the 6-bit scales are unpacked four at a time in uint32 words.
func decodePkRecs(typ quant.Type, recs []byte, w []byte, rows, wRow, nb, bb int) {
	for r := 0; r < 4; r++ {
		rt := recs[r*nb*pkRec : (r+1)*nb*pkRec]
		if r >= rows {
			clear(rt)
			continue
		}
		if decodePkRowFast(typ, rt, w[r*wRow:r*wRow+nb*bb], nb, bb) {
			continue
		}
		for b := 0; b < nb; b++ {
			blk := w[r*wRow+b*bb : r*wRow+(b+1)*bb]
			rec := (*[pkRec]byte)(rt[b*pkRec:])
			switch typ {
			case quant.Q2_K:
				for q := 0; q < 4; q++ {
					t := spread4(le.Uint32(blk[4*q:]))
					le.PutUint64(rec[8*q:], t&lane4)
					le.PutUint64(rec[32+8*q:], t>>4&lane4)
				}
				putF32s(rec, f16(blk[80:]), f16(blk[82:]))
			case quant.Q3_K:
				s := (*[12]byte)(blk[96:])
				u0, u1, u2 := le.Uint32(s[0:]), le.Uint32(s[4:]), le.Uint32(s[8:])
				for q, v := range [4]uint32{u0, u1, u0 >> 4, u1 >> 4} {
					// 6-bit scales biased by 32: subtract lane-wise
					// without borrows crossing lanes.
					t := spread4(v&lo4w | (u2>>(2*q)&lo2w)<<4)
					t = (t | laneH) - 32*laneL ^ laneH
					le.PutUint64(rec[8*q:], t)
					le.PutUint64(rec[32+8*q:], t<<2&^(3*laneL))
				}
				d := f16(blk[108:])
				putF32s(rec, d, d)
			case quant.Q4_K, quant.Q5_K:
				s := (*[12]byte)(blk[4:])
				u0, u1, u2 := le.Uint32(s[0:]), le.Uint32(s[4:]), le.Uint32(s[8:])
				sc := uint64(u0&lo6w) | uint64(u2&lo4w|(u0>>6&lo2w)<<4)<<32
				mn := uint64(u1&lo6w) | uint64(u2>>4&lo4w|(u1>>6&lo2w)<<4)<<32
				for j := 0; j < 4; j++ {
					le.PutUint64(rec[8*j:], pairs(sc>>(16*j)))
					le.PutUint64(rec[32+8*j:], pairs(mn>>(16*j)))
				}
				putF32s(rec, f16(blk), f16(blk[2:]))
			case quant.Q6_K:
				s := (*[16]byte)(blk[192:])
				for q := 0; q < 4; q++ {
					t := spread4(le.Uint32(s[4*q:]))
					t |= (t >> 7 & laneL) * 0xff00 // sign-extend int8 lanes
					le.PutUint64(rec[8*q:], t)
					le.PutUint64(rec[32+8*q:], t<<5&^(31*laneL))
				}
				d := f16(blk[208:])
				putF32s(rec, d, d)
			}
		}
	}
}

const (
	laneL = 0x0001000100010001 // bit 0 of every int16 lane
	laneH = 0x8000800080008000 // bit 15 of every int16 lane
	lane4 = 0x000f000f000f000f // bits 0-3 of every lane
)

// spread4 moves the four bytes of v to the low bytes of four int16 lanes.
func spread4(v uint32) uint64 {
	t := uint64(v)
	t = (t | t<<16) & 0x0000ffff0000ffff
	return (t | t<<8) & 0x00ff00ff00ff00ff
}

// putF32s stores fS and fB in a scale record.
func putF32s(rec *[pkRec]byte, fS, fB float32) {
	le.PutUint32(rec[64:], math.Float32bits(fS))
	le.PutUint32(rec[68:], math.Float32bits(fB))
}

const (
	lo2w = 0x03030303 // bits 0-1 of every byte of a uint32
	lo4w = 0x0f0f0f0f // bits 0-3
	lo6w = 0x3f3f3f3f // bits 0-5
)

// pairs spreads the two low bytes b0, b1 of v to the int16 lanes
// b0, b0, b1, b1.
func pairs(v uint64) uint64 {
	t := v&0xff | (v&0xff00)<<24
	return t * 0x10001
}

// pkKernels are the assembly kernels of one format: x2x4 dots two weight
// rows with four activation rows, x4x1 four weight rows with one; both add
// 8 float32 partial sums per (weight row, activation row) pair to acc.
type pkKernels struct {
	x2x4 func(w *byte, stride int, recs *byte, nb int, x *byte, xstride int, acc *float32)
	x4x1 func(w *byte, stride int, recs *byte, nb int, x *byte, acc *float32)
}

// gemmPacked is the packed-weight GEMM over tiles of four weight rows,
// cache-blocked as gemmQ8_0 (gemmWeightBlock weight rows, their scale
// records decoded once, against gemmActPanel activation rows at a time).
func gemmPacked(typ quant.Type, kern *pkKernels, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 256
	bb := wRow / nb
	tileRecs := 4 * nb * pkRec
	sc := gemmScratchPool.Get().(*gemmScratch)
	defer gemmScratchPool.Put(sc)
	recs := bytesOf(&sc.b, gemmWeightBlock/4*tileRecs)
	var pad []byte
	var acc [64]float32 // the kernels add to it: zero between calls
	m4 := m &^ 3
	wb := gemmWeightBlock
	if m4 == 0 {
		wb = 4 // no panels to share the records: decode each tile just before its use
	}
	for jb := 0; jb < n; jb += wb {
		je := min(n, jb+wb)
		for j0 := jb; j0 < je; j0 += 4 {
			rows := min(4, n-j0)
			wt := w[j0*wRow:]
			if rows < 4 {
				pad = padTile(pad, w[j0*wRow:(j0+rows)*wRow], wRow)
				wt = pad
			}
			decodePkRecs(typ, recs[(j0-jb)/4*tileRecs:], wt, rows, wRow, nb, bb)
		}
		for ib := 0; ib < m4; ib += gemmActPanel {
			ie := min(m4, ib+gemmActPanel)
			for j0 := jb; j0 < je; j0 += 4 {
				rows := min(4, n-j0)
				wt := w[j0*wRow:]
				if rows < 4 {
					wt = pad
				}
				rt := recs[(j0-jb)/4*tileRecs:]
				for i := ib; i < ie; i += 4 {
					for r0 := 0; r0 < rows; r0 += 2 {
						pkDot2x4(typ, kern, wt[r0*wRow:], wRow, rt[r0*nb*pkRec:], nb, bb, xq[i*xRow:], xRow, &acc)
						if r0+2 <= rows && flush2x4(&acc, out[i*ldOut+j0+r0:], ldOut) {
							continue
						}
						for r := r0; r < min(r0+2, rows); r++ {
							for a := 0; a < 4; a++ {
								out[(i+a)*ldOut+j0+r] = hsum8(acc[8*(4*(r-r0)+a):])
							}
						}
						clear(acc[:])
					}
				}
			}
		}
		for j0 := jb; j0 < je; j0 += 4 {
			rows := min(4, n-j0)
			wt := w[j0*wRow:]
			if rows < 4 {
				wt = pad
			}
			rt := recs[(j0-jb)/4*tileRecs:]
			for i := m4; i < m; i++ {
				pkDot4x1(typ, kern, wt, wRow, rt, nb, bb, xq[i*xRow:], &acc)
				for r := 0; r < rows; r++ {
					out[i*ldOut+j0+r] = hsum8(acc[8*r:])
				}
				clear(acc[:32])
			}
		}
	}
}

// padTile returns the rows of a partial tile (fewer than four rows of wRow
// bytes) in a zeroed four-row buffer, reusing pad's storage.
func padTile(pad, rows []byte, wRow int) []byte {
	if cap(pad) < 4*wRow {
		pad = make([]byte, 4*wRow)
	}
	pad = pad[:4*wRow]
	clear(pad)
	copy(pad, rows)
	return pad
}

// hsum8 adds 8 partial sums pairwise.
func hsum8(a []float32) float32 {
	a = a[:8]
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

// pkDot2x4 runs the two-row × four-activation kernel (or its generic twin
// when kern is nil).
func pkDot2x4(typ quant.Type, kern *pkKernels, w []byte, stride int, recs []byte, nb, bb int, x []byte, xstride int, acc *[64]float32) {
	_ = w[stride+nb*bb-1]
	_ = recs[2*nb*pkRec-1]
	_ = x[3*xstride+292*nb-1]
	if kern == nil {
		pkDotGeneric(typ, w, stride, recs, nb, bb, x, xstride, 2, 4, acc[:])
		return
	}
	kern.x2x4(&w[0], stride, &recs[0], nb, &x[0], xstride, &acc[0])
}

// pkDot4x1 runs the four-row × one-activation kernel (or its generic twin).
func pkDot4x1(typ quant.Type, kern *pkKernels, w []byte, stride int, recs []byte, nb, bb int, x []byte, acc *[64]float32) {
	_ = w[3*stride+nb*bb-1]
	_ = recs[4*nb*pkRec-1]
	_ = x[292*nb-1]
	if kern == nil {
		pkDotGeneric(typ, w, stride, recs, nb, bb, x, 0, 4, 1, acc[:])
		return
	}
	kern.x4x1(&w[0], stride, &recs[0], nb, &x[0], &acc[0])
}

// pkDotGeneric is the generic twin of the packed kernels: rows weight rows
// (stride bytes apart) against acts activation rows (xstride apart), adding
// each pair's blocks to lane 0 of its 8 partial sums acc[8·(acts·r+a):].
func pkDotGeneric(typ quant.Type, w []byte, stride int, recs []byte, nb, bb int, x []byte, xstride, rows, acts int, acc []float32) {
	var u [256]byte
	for r := 0; r < rows; r++ {
		for b := 0; b < nb; b++ {
			unpackKCodes(typ, u[:], w[r*stride+b*bb:r*stride+(b+1)*bb])
			rec := recs[(r*nb+b)*pkRec : (r*nb+b+1)*pkRec]
			fS := math.Float32frombits(le.Uint32(rec[64:]))
			fB := math.Float32frombits(le.Uint32(rec[68:]))
			for a := 0; a < acts; a++ {
				xa := x[a*xstride+292*b : a*xstride+292*(b+1)]
				var s, c int32
				for g := 0; g < 16; g++ {
					var t int32
					for l := 0; l < 16; l++ {
						t += int32(u[16*g+l]) * int32(int8(xa[4+16*g+l]))
					}
					s += int32(int16(le.Uint16(rec[2*g:]))) * t
					c += int32(int16(le.Uint16(rec[32+2*g:]))) * int32(int16(le.Uint16(xa[260+2*g:])))
				}
				dx := math.Float32frombits(le.Uint32(xa))
				acc[8*(acts*r+a)] += dx*fS*float32(s) - dx*fB*float32(c)
			}
		}
	}
}
