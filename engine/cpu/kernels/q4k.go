package kernels

import "math"

// q4_K GEMM on the packed blocks. Decoding whole K blocks (gemmK) costs
// more than the dot products when few activation rows share a weight row
// (an expert sees a handful of tokens), so for q4_K only the scales are
// decoded, four rows at a time, into records of kScaleRec bytes per block:
//
//	[0, 32)   int16 scale per group of 16 (each sub-block's twice)
//	[32, 64)  int16 minimum per group of 16
//	[64, 68)  d, [68, 72) dmin (float32)
//
// and the kernel unpacks the nibbles itself (q4kDot4).
const kScaleRec = 72

// decodeQ4KScales fills the scale records of up to four rows (missing rows
// zeroed).
func decodeQ4KScales(recs []byte, w []byte, rows, wRow, nb int) {
	for r := 0; r < 4; r++ {
		rt := recs[r*nb*kScaleRec : (r+1)*nb*kScaleRec]
		if r >= rows {
			clear(rt)
			continue
		}
		for b := 0; b < nb; b++ {
			blk := w[r*wRow+144*b : r*wRow+144*(b+1)]
			rec := rt[b*kScaleRec : (b+1)*kScaleRec]
			for j := 0; j < 8; j++ {
				s, m := scaleMin(j, blk[4:16])
				v := uint32(s) * 0x00010001
				le.PutUint32(rec[4*j:], v)
				le.PutUint32(rec[32+4*j:], uint32(m)*0x00010001)
			}
			le.PutUint32(rec[64:], math.Float32bits(f16(blk)))
			le.PutUint32(rec[68:], math.Float32bits(f16(blk[2:])))
		}
	}
}

// gemmQ4K is the q4_K GEMM over tiles of four weight rows.
func gemmQ4K(w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 256
	recs := make([]byte, 4*nb*kScaleRec)
	var r [4]float32
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		wt := w[j0*wRow:]
		if rows < 4 {
			// A partial tile reads rows it does not have: copy it out.
			wt = make([]byte, 4*wRow)
			copy(wt, w[j0*wRow:(j0+rows)*wRow])
		}
		decodeQ4KScales(recs, wt, rows, wRow, nb)
		for i := 0; i < m; i++ {
			q4kDot4(wt, wRow, recs, nb, xq[i*xRow:(i+1)*xRow], &r)
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

// q4kDot4Generic dots four q4_K rows (stride bytes apart) with one q8_K
// row, using the scale records.
func q4kDot4Generic(w []byte, stride int, recs []byte, nb int, x []byte, r *[4]float32) {
	for row := 0; row < 4; row++ {
		var sum float32
		for b := 0; b < nb; b++ {
			blk := w[row*stride+144*b : row*stride+144*(b+1)]
			rec := recs[(row*nb+b)*kScaleRec : (row*nb+b+1)*kScaleRec]
			a := x[292*b : 292*b+292]
			var s, c int32
			for g := 0; g < 16; g++ {
				ch, hi := g/4, g/2%2 // 64-value chunk, high nibbles
				var t int32
				for l := 0; l < 16; l++ {
					q := blk[16+32*ch+16*(g%2)+l]
					if hi == 1 {
						q >>= 4
					}
					t += int32(q&15) * int32(int8(a[4+16*g+l]))
				}
				s += int32(int16(le.Uint16(rec[2*g:]))) * t
				c += int32(int16(le.Uint16(rec[32+2*g:]))) * int32(int16(le.Uint16(a[260+2*g:])))
			}
			dx := math.Float32frombits(le.Uint32(a))
			d := math.Float32frombits(le.Uint32(rec[64:]))
			dmin := math.Float32frombits(le.Uint32(rec[68:]))
			sum += dx*d*float32(s) - dx*dmin*float32(c)
		}
		r[row] = sum
	}
}
