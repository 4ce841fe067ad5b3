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
func decodeKTile(typ quant.Type, tile []byte, w []byte, rows, wRow, nb, bb int) {
	var kb quant.KBlock
	off := 0
	switch typ {
	case quant.Q3_K:
		off = 4
	case quant.Q6_K:
		off = 32
	}
	for r := 0; r < 4; r++ {
		rt := tile[r*nb*kRec : (r+1)*nb*kRec]
		if r >= rows {
			clear(rt)
			continue
		}
		for b := 0; b < nb; b++ {
			rec := rt[b*kRec : (b+1)*kRec]
			kb.Decode(typ, w[r*wRow+b*bb:r*wRow+(b+1)*bb])
			for i, q := range kb.Q {
				rec[i] = byte(int(q) + off)
			}
			for g := 0; g < 16; g++ {
				s := uint16(int16(kb.Scale[g]))
				for l := 0; l < 8; l++ {
					binary.LittleEndian.PutUint16(rec[256+16*g+2*l:], s)
				}
				c := int16(kb.Min[g])
				if off != 0 {
					c = int16(off) * int16(kb.Scale[g])
				}
				binary.LittleEndian.PutUint16(rec[512+2*g:], uint16(c))
			}
			fB := kb.DMin
			if off != 0 {
				fB = kb.D
			}
			binary.LittleEndian.PutUint32(rec[544:], math.Float32bits(kb.D))
			binary.LittleEndian.PutUint32(rec[548:], math.Float32bits(fB))
		}
	}
}

// gemmK is the K-format GEMM over tiles of four weight rows.
func gemmK(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 256
	bb := wRow / max(nb, 1)
	tile := make([]byte, 4*nb*kRec)
	var r [4]float32
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		decodeKTile(typ, tile, w[j0*wRow:], rows, wRow, nb, bb)
		for i := 0; i < m; i++ {
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
