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
	tile := make([]byte, 4*x8Row)
	mins := make([]float32, 4*nb)
	var codes [32]int8
	var r [4]float32
	for j0 := 0; j0 < n; j0 += 4 {
		rows := min(4, n-j0)
		clear(tile)
		clear(mins)
		for row := 0; row < rows; row++ {
			for b := 0; b < nb; b++ {
				src := w[(j0+row)*wRow+b*bb : (j0+row)*wRow+(b+1)*bb]
				dst := tile[row*x8Row+34*b : row*x8Row+34*b+34]
				decodeLegacy(typ, src, &codes)
				copy(dst[:2], src[:2])
				for l, q := range codes {
					dst[2+l] = byte(q)
				}
				if withMin {
					mins[row*nb+b] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(src[2:]))
				}
			}
		}
		for i := 0; i < m; i++ {
			dotQ8_0x4(tile, x8Row, x8[i*x8Row:(i+1)*x8Row], nb, &r)
			if withMin {
				for row := 0; row < rows; row++ {
					var t float32
					for b := 0; b < nb; b++ {
						t += mins[row*nb+b] * s[i*nb+b]
					}
					r[row] += t
				}
			}
			copy(out[i*ldOut+j0:i*ldOut+j0+rows], r[:rows])
		}
	}
}

// decodeLegacy writes the 32 codes of one block: signed for q4_0/q5_0,
// unsigned (without the minimum) for q4_1/q5_1.
func decodeLegacy(typ quant.Type, b []byte, q *[32]int8) {
	switch typ {
	case quant.Q4_0:
		for j := 0; j < 16; j++ {
			q[j], q[j+16] = int8(b[2+j]&15)-8, int8(b[2+j]>>4)-8
		}
	case quant.Q4_1:
		for j := 0; j < 16; j++ {
			q[j], q[j+16] = int8(b[4+j]&15), int8(b[4+j]>>4)
		}
	case quant.Q5_0:
		qh := binary.LittleEndian.Uint32(b[2:])
		for j := 0; j < 16; j++ {
			q[j] = int8(b[6+j]&15|byte(qh>>j&1)<<4) - 16
			q[j+16] = int8(b[6+j]>>4|byte(qh>>(j+16)&1)<<4) - 16
		}
	case quant.Q5_1:
		qh := binary.LittleEndian.Uint32(b[4:])
		for j := 0; j < 16; j++ {
			q[j] = int8(b[8+j]&15 | byte(qh>>j&1)<<4)
			q[j+16] = int8(b[8+j]>>4 | byte(qh>>(j+16)&1)<<4)
		}
	}
}
