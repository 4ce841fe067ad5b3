package kernels

import (
	"encoding/binary"
	"math"

	"github.com/clefrt/clef/quant"
)

// K-format GEMM. Weight rows are decoded once, four at a time, into a tile
// of per-super-block records (kRec bytes each):
//
//	[0, 256)   u: unsigned codes, u = q + off (off 4 for q3_K, 32 for q6_K)
//	[256, 512) int16 sub-block scales, each group-of-16 scale repeated over
//	           the 8 int16 lanes its 16 codes fill after pairwise products
//	[512, 544) int16 coef per group: off·scale, or the minimum (q2/q4/q5_K)
//	[544, 548) fS float32: D
//	[548, 552) fB float32: D (offset types) or DMin
//
// so that a super-block contributes dx·(fS·Σ scale·u·a − fB·Σ coef·bsum),
// with a the q8_K activation codes and bsum their sums per 16. The integer
// part is exact; every activation block is read once per four weight rows.
const kRec = 552

// decodeKTile decodes up to four rows of w (wRow bytes each, nb blocks of
// bb bytes) into tile (4 rows of nb·kRec bytes); missing rows are zeroed.
// The codes are unpacked eight at a time in uint64 words: this runs once
// per four weight rows but for every GEMM call, so with few activation
// rows (the tokens routed to one expert) it is a large part of the work.
func decodeKTile(typ quant.Type, tile []byte, w []byte, rows, wRow, nb, bb int) {
	for r := 0; r < 4; r++ {
		rt := tile[r*nb*kRec : (r+1)*nb*kRec]
		if r >= rows {
			clear(rt)
			continue
		}
		for b := 0; b < nb; b++ {
			decodeKRec(typ, rt[b*kRec:(b+1)*kRec], w[r*wRow+b*bb:r*wRow+(b+1)*bb])
		}
	}
}

const (
	lo1 = 0x0101010101010101 // bit 0 of every byte
	lo2 = 0x0303030303030303 // bits 0-1
	lo4 = 0x0f0f0f0f0f0f0f0f // bits 0-3
	rep = 0x0001000100010001 // an int16 in every lane
)

var le = binary.LittleEndian

// decodeKRec fills one super-block record from block b of type typ.
func decodeKRec(typ quant.Type, rec, b []byte) {
	unpackKCodes(typ, rec[:256], b)
	sc, co, fS, fB := kScales(typ, b)
	for g := range sc {
		v := uint64(uint16(sc[g])) * rep
		le.PutUint64(rec[256+16*g:], v)
		le.PutUint64(rec[256+16*g+8:], v)
		le.PutUint16(rec[512+2*g:], uint16(co[g]))
	}
	le.PutUint32(rec[544:], math.Float32bits(fS))
	le.PutUint32(rec[548:], math.Float32bits(fB))
}

// unpackKCodes writes the 256 unsigned codes u of block b (in activation
// order) to u: u = q + off, off 4 for q3_K and 32 for q6_K, 0 otherwise.
// The codes are unpacked eight at a time in uint64 words.
func unpackKCodes(typ quant.Type, u, b []byte) {
	_ = u[255]
	switch typ {
	case quant.Q2_K:
		qs := b[16:80]
		for h := 0; h < 2; h++ {
			for s := 0; s < 4; s++ {
				for t := 0; t < 32; t += 8 {
					le.PutUint64(u[128*h+32*s+t:], le.Uint64(qs[32*h+t:])>>(2*s)&lo2)
				}
			}
		}
	case quant.Q3_K:
		hm, qs := b[0:32], b[32:96]
		for h := 0; h < 2; h++ {
			for s := 0; s < 4; s++ {
				for t := 0; t < 32; t += 8 {
					v := le.Uint64(qs[32*h+t:])>>(2*s)&lo2 | (le.Uint64(hm[t:])>>(4*h+s)&lo1)<<2
					le.PutUint64(u[128*h+32*s+t:], v)
				}
			}
		}
	case quant.Q4_K, quant.Q5_K:
		qs, qh := b[16:144], b[0:0]
		if typ == quant.Q5_K {
			qs, qh = b[48:176], b[16:48]
		}
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l += 8 {
				v := le.Uint64(qs[32*c+l:])
				lo, hi := v&lo4, v>>4&lo4
				if len(qh) > 0 {
					h := le.Uint64(qh[l:])
					lo |= (h >> (2 * c) & lo1) << 4
					hi |= (h >> (2*c + 1) & lo1) << 4
				}
				le.PutUint64(u[64*c+l:], lo)
				le.PutUint64(u[64*c+32+l:], hi)
			}
		}
	case quant.Q6_K:
		for h := 0; h < 2; h++ {
			ql, qh := b[64*h:], b[128+32*h:]
			for l := 0; l < 32; l += 8 {
				a, c, q := le.Uint64(ql[l:]), le.Uint64(ql[32+l:]), le.Uint64(qh[l:])
				le.PutUint64(u[128*h+l:], a&lo4|(q&lo2)<<4)
				le.PutUint64(u[128*h+32+l:], c&lo4|(q>>2&lo2)<<4)
				le.PutUint64(u[128*h+64+l:], a>>4&lo4|(q>>4&lo2)<<4)
				le.PutUint64(u[128*h+96+l:], c>>4&lo4|(q>>6&lo2)<<4)
			}
		}
	}
}

// kScales decodes the scales of block b of type typ: the integer scale and
// correction coefficient of each group of 16 codes (off·scale, or the
// minimum for q2_K/q4_K/q5_K) and the float factors fS (D) and fB (D for
// the offset types, DMin otherwise), so that the block dotted with q8_K
// activations a (group sums bsum) is dx·(fS·Σ sc·u·a − fB·Σ co·bsum).
func kScales(typ quant.Type, b []byte) (sc, co [16]int16, fS, fB float32) {
	switch typ {
	case quant.Q2_K:
		for g := range sc {
			sc[g], co[g] = int16(b[g]&15), int16(b[g]>>4)
		}
		fS, fB = f16(b[80:]), f16(b[82:])
	case quant.Q3_K:
		for g := range sc {
			sc[g] = int16(scaleQ3K(g, b[96:108]) - 32)
			co[g] = 4 * sc[g]
		}
		fS = f16(b[108:])
		fB = fS
	case quant.Q4_K, quant.Q5_K:
		for j := 0; j < 8; j++ {
			s, m := scaleMin(j, b[4:16])
			sc[2*j], sc[2*j+1] = int16(s), int16(s)
			co[2*j], co[2*j+1] = int16(m), int16(m)
		}
		fS, fB = f16(b), f16(b[2:])
	case quant.Q6_K:
		for g := range sc {
			sc[g] = int16(int8(b[192+g]))
			co[g] = 32 * sc[g]
		}
		fS = f16(b[208:])
		fB = fS
	}
	return sc, co, fS, fB
}

// scaleMin decodes the 6-bit scale and minimum of sub-block j of q4_K/q5_K.
func scaleMin(j int, s []byte) (sc, m int) {
	if j < 4 {
		return int(s[j] & 63), int(s[j+4] & 63)
	}
	return int(s[j+4]&15) | int(s[j-4]>>6)<<4, int(s[j+4]>>4) | int(s[j]>>6)<<4
}

// scaleQ3K decodes the 6-bit (biased by 32) scale i of q3_K.
func scaleQ3K(i int, sc []byte) int {
	var lo int
	if i < 8 {
		lo = int(sc[i] & 15)
	} else {
		lo = int(sc[i-8] >> 4)
	}
	return lo | int(sc[8+i%4]>>(2*(i/4))&3)<<4
}

// f16 reads the binary16 value at b[0:2].
func f16(b []byte) float32 { return quant.Float16ToFloat32(le.Uint16(b)) }

// gemmK is the K-format GEMM over tiles of four weight rows: against each
// tile the activation rows two at a time through kDot4x2 where it has a
// fast kernel (SMMLA), the rest (every row, or the last of an odd count)
// one at a time through kDot4. A row's result is one kernel call over the
// whole of k either way, so it does not depend on n or on how the weight
// rows are split.
func gemmK(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 256
	bb := wRow / max(nb, 1)
	tile := make([]byte, 4*nb*kRec)
	pairs := 0
	if hasKDot4x2() && nb > 0 {
		pairs = m / 2
	}
	var r [4]float32
	var r8 [8]float32
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		decodeKTile(typ, tile, w[j0*wRow:], rows, wRow, nb, bb)
		for i := 0; i < 2*pairs; i += 2 {
			kDot4x2(tile, nb, xq[i*xRow:(i+2)*xRow], xRow, &r8)
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r8[:rows])
			copy(out[(i+1)*ldOut+j0:(i+1)*ldOut+j0+rows], r8[4:4+rows])
		}
		for i := 2 * pairs; i < m; i++ {
			kDot4(tile, nb, xq[i*xRow:(i+1)*xRow], &r)
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

// kDot4Generic dots the four decoded rows of tile with one q8_K row.
func kDot4Generic(tile []byte, nb int, x []byte, r *[4]float32) {
	for row := 0; row < 4; row++ {
		var sum float32
		for b := 0; b < nb; b++ {
			rec := tile[(row*nb+b)*kRec : (row*nb+b+1)*kRec]
			a := x[292*b : 292*b+292]
			dx := math.Float32frombits(binary.LittleEndian.Uint32(a))
			var s, c int32
			for g := 0; g < 16; g++ {
				var t int32
				for l := 0; l < 16; l++ {
					t += int32(rec[16*g+l]) * int32(int8(a[4+16*g+l]))
				}
				s += int32(int16(binary.LittleEndian.Uint16(rec[256+16*g:]))) * t
				c += int32(int16(binary.LittleEndian.Uint16(rec[512+2*g:]))) * int32(int16(binary.LittleEndian.Uint16(a[260+2*g:])))
			}
			fS := math.Float32frombits(binary.LittleEndian.Uint32(rec[544:]))
			fB := math.Float32frombits(binary.LittleEndian.Uint32(rec[548:]))
			sum += dx*fS*float32(s) - dx*fB*float32(c)
		}
		r[row] = sum
	}
}
