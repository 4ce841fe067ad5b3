package kernels

import "math"

// q6_K GEMM on the packed blocks, like gemmQ4K: only the scales are decoded
// (four rows at a time) into records of k6ScaleRec bytes per block:
//
//	[0, 256)   int16 scale lanes per 32-code chunk (as kRec's [256, 512))
//	[256, 288) int16 coef per group of 16: 32·scale (the codes are stored
//	           with +32; the kernel uses them unsigned and subtracts
//	           32·scale·bsum)
//	[288, 292) d, [292, 296) d again (float32)
const k6ScaleRec = 296

// decodeQ6KScales fills the scale records of up to four rows (missing rows
// zeroed).
func decodeQ6KScales(recs []byte, w []byte, rows, wRow, nb int) {
	for r := 0; r < 4; r++ {
		rt := recs[r*nb*k6ScaleRec : (r+1)*nb*k6ScaleRec]
		if r >= rows {
			clear(rt)
			continue
		}
		for b := 0; b < nb; b++ {
			blk := w[r*wRow+210*b : r*wRow+210*(b+1)]
			rec := rt[b*k6ScaleRec : (b+1)*k6ScaleRec]
			for g := 0; g < 16; g++ {
				sc := int16(int8(blk[192+g]))
				v := uint64(uint16(sc)) * rep
				le.PutUint64(rec[16*g:], v)
				le.PutUint64(rec[16*g+8:], v)
				le.PutUint16(rec[256+2*g:], uint16(32*sc))
			}
			d := math.Float32bits(f16(blk[208:]))
			le.PutUint32(rec[288:], d)
			le.PutUint32(rec[292:], d)
		}
	}
}

// gemmQ6K is the q6_K GEMM over tiles of four weight rows.
func gemmQ6K(w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 256
	recs := make([]byte, 4*nb*k6ScaleRec)
	var r [4]float32
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		wt := w[j0*wRow:]
		if rows < 4 {
			wt = make([]byte, 4*wRow)
			copy(wt, w[j0*wRow:(j0+rows)*wRow])
		}
		decodeQ6KScales(recs, wt, rows, wRow, nb)
		for i := 0; i < m; i++ {
			q6kDot4(wt, wRow, recs, nb, xq[i*xRow:(i+1)*xRow], &r)
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

// q6kDot4Generic dots four q6_K rows (stride bytes apart) with one q8_K
// row, using the scale records.
func q6kDot4Generic(w []byte, stride int, recs []byte, nb int, x []byte, r *[4]float32) {
	var u [256]byte
	for row := 0; row < 4; row++ {
		var sum float32
		for b := 0; b < nb; b++ {
			blk := w[row*stride+210*b : row*stride+210*(b+1)]
			rec := recs[(row*nb+b)*k6ScaleRec : (row*nb+b+1)*k6ScaleRec]
			a := x[292*b : 292*b+292]
			for h := 0; h < 2; h++ {
				ql, qh := blk[64*h:], blk[128+32*h:]
				for l := 0; l < 32; l++ {
					u[128*h+l] = ql[l]&15 | (qh[l]&3)<<4
					u[128*h+32+l] = ql[32+l]&15 | (qh[l]>>2&3)<<4
					u[128*h+64+l] = ql[l]>>4 | (qh[l]>>4&3)<<4
					u[128*h+96+l] = ql[32+l]>>4 | (qh[l]>>6&3)<<4
				}
			}
			var s, c int32
			for g := 0; g < 16; g++ {
				var t int32
				for l := 0; l < 16; l++ {
					t += int32(u[16*g+l]) * int32(int8(a[4+16*g+l]))
				}
				s += int32(int16(le.Uint16(rec[16*g:]))) * t
				c += int32(int16(le.Uint16(rec[256+2*g:]))) * int32(int16(le.Uint16(a[260+2*g:])))
			}
			dx := math.Float32frombits(le.Uint32(a))
			d := math.Float32frombits(le.Uint32(rec[288:]))
			sum += dx*d*float32(s) - dx*d*float32(c)
		}
		r[row] = sum
	}
}
