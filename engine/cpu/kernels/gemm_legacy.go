package kernels

import (
	"encoding/binary"

	"github.com/clefrt/clef/quant"
)

// gemmLegacy is the GEMM of q4_0, q5_0 (q8_0 activations) and q4_1, q5_1
// (q8_1 activations). Weight rows are decoded four at a time into q8_0
// blocks with the same fp16 scale (codes q−8 / q−16, or the unsigned codes
// of the _1 formats), so the q8_0 kernel computes Σ d_w·d_x·q·a exactly as
// for q8_0 weights; the _1 formats add Σ m·s per block afterwards, with the
// activation block's stored s as ggml does.
func gemmLegacy(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 32
	f, _ := quant.FormatOf(typ)
	bb := f.BlockBytes
	withMin := typ == quant.Q4_1 || typ == quant.Q5_1
	x8, s := xq, []float32(nil)
	x8Row := xRow
	if withMin {
		// Repack q8_1 activations as q8_0 blocks plus their s values.
		x8Row = nb * 34
		x8 = make([]byte, m*x8Row)
		s = make([]float32, m*nb)
		for i := 0; i < m; i++ {
			for b := 0; b < nb; b++ {
				src := xq[i*xRow+36*b : i*xRow+36*b+36]
				dst := x8[i*x8Row+34*b : i*x8Row+34*b+34]
				copy(dst[:2], src[:2])
				copy(dst[2:], src[4:])
				s[i*nb+b] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(src[2:]))
			}
		}
	}
	var xd, wd []float32
	qf := 0
	var xa []byte
	xs := 0
	if hasQ8_0x2x4() && m >= 4 && nb > 0 {
		// The activation scales widened once for the 2×4 kernel, the
		// weight scales per tile.
		sc := gemmScratchPool.Get().(*gemmScratch)
		defer gemmScratchPool.Put(sc)
		m4 := m &^ 3
		qf = q8QuadFloats(nb)
		xd = floats(&sc.xd, m4/4*qf)
		for i := 0; i < m4; i += 4 {
			q8ScalesQuad(xd[i/4*qf:(i/4+1)*qf], x8[i*x8Row:], x8Row, nb, q8ScalesPairs())
		}
		wd = floats(&sc.wd, 4*nb)
		xa, xs = q8PrepActs(&sc.b, x8, x8Row, m4, nb)
	}
	var r8 [8]float32
	tile := make([]byte, 4*x8Row)
	mins := make([]float32, 4*nb)
	var r [4]float32
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		clear(tile)
		clear(mins)
		for row := 0; row < rows; row++ {
			if decodeLegacyRowFast(typ, tile[row*x8Row:(row+1)*x8Row], w[(j0+row)*wRow:(j0+row+1)*wRow], nb) {
				if withMin {
					f16Strided(mins[row*nb:], w[(j0+row)*wRow+2:], bb, nb)
				}
				continue
			}
			for b := 0; b < nb; b++ {
				src := w[(j0+row)*wRow+b*bb : (j0+row)*wRow+(b+1)*bb]
				dst := tile[row*x8Row+34*b : row*x8Row+34*b+34]
				decodeLegacy(typ, dst[2:34], src)
				copy(dst[:2], src[:2])
				if withMin {
					mins[row*nb+b] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(src[2:]))
				}
			}
		}
		i := 0
		if xd != nil && rows == 4 {
			for row := 0; row < 4; row++ {
				f16Strided(wd[row*nb:], tile[row*x8Row:], 34, nb)
			}
			for ; i+4 <= m; i += 4 {
				var mt [4][4]float32 // Σ m·s per activation row and weight row
				if withMin {
					for a := 0; a < 4; a++ {
						dotF32x4(mins, nb, s[(i+a)*nb:(i+a+1)*nb], &mt[a])
					}
				}
				for r0 := 0; r0 < 4; r0 += 2 {
					dotQ8_0x2x4Scaled(tile[r0*x8Row:], x8Row, wd[r0*nb:], 1, xa[i*xs:], xs, xd[i/4*qf:], 1, nb, r8[:], 2)
					for a := 0; a < 4; a++ {
						out[(i+a)*ldOut+j0+r0] = r8[2*a] + mt[a][r0]
						out[(i+a)*ldOut+j0+r0+1] = r8[2*a+1] + mt[a][r0+1]
					}
				}
			}
		}
		for ; i < m; i++ {
			dotQ8_0x4(tile, x8Row, x8[i*x8Row:(i+1)*x8Row], nb, &r)
			if withMin {
				var mt [4]float32
				dotF32x4(mins, nb, s[i*nb:(i+1)*nb], &mt)
				for row := 0; row < rows; row++ {
					r[row] += mt[row]
				}
			}
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

// decodeLegacy writes the 32 codes of one block as bytes: signed for
// q4_0/q5_0, unsigned (without the minimum) for q4_1/q5_1; eight at a time
// in uint64 words.
func decodeLegacy(typ quant.Type, q []byte, b []byte) {
	var qs []byte
	var qh uint32
	var off uint64
	switch typ {
	case quant.Q4_0:
		qs, off = b[2:18], 8*lo1
	case quant.Q4_1:
		qs = b[4:20]
	case quant.Q5_0:
		qs, qh, off = b[6:22], le.Uint32(b[2:]), 16*lo1
	case quant.Q5_1:
		qs, qh = b[8:24], le.Uint32(b[4:])
	}
	for l := 0; l < 16; l += 8 {
		v := le.Uint64(qs[l:])
		lo, hi := v&lo4, v>>4&lo4
		if qh != 0 {
			lo |= spreadBits(uint8(qh>>l)) << 4
			hi |= spreadBits(uint8(qh>>(l+16))) << 4
		}
		// Codes are below 32: subtract the offset of q4_0/q5_0 per byte.
		le.PutUint64(q[l:], bytewiseSub(lo, off))
		le.PutUint64(q[16+l:], bytewiseSub(hi, off))
	}
}

// spreadBits moves bit i of b to bit 0 of byte i.
func spreadBits(b uint8) uint64 { return spread[b] }

var spread = func() (t [256]uint64) {
	for b := range t {
		for i := 0; i < 8; i++ {
			t[b] |= uint64(b>>i&1) << (8 * i)
		}
	}
	return t
}()

// bytewiseSub subtracts off (the same value in every byte, < 128) from each
// byte of v (each < 128), wrapping per byte.
func bytewiseSub(v, off uint64) uint64 {
	if off == 0 {
		return v
	}
	// (v | 0x80..) - off never borrows across bytes; flip the high bits back.
	return ((v | 0x8080808080808080) - off) ^ 0x8080808080808080
}
