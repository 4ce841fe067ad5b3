package kernels

import (
	"encoding/binary"

	"github.com/clefrt/clef/quant"
)

// dotQ8_0x4Generic computes the dot products of four q8_0 weight rows (w,
// rows stride bytes apart) with one q8_0 activation row of nb blocks.
func dotQ8_0x4Generic(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	for j := range r {
		r[j] = dotQ8_0Generic(w[j*stride:], x, nb)
	}
}

// dotQ8_0Generic is the q8_0 × q8_0 dot product of nb blocks.
func dotQ8_0Generic(w, x []byte, nb int) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb, xb := w[34*b:34*b+34], x[34*b:34*b+34]
		var s int32
		for j := 2; j < 34; j++ {
			s += int32(int8(wb[j])) * int32(int8(xb[j]))
		}
		d := quant.Float16ToFloat32(binary.LittleEndian.Uint16(wb)) * quant.Float16ToFloat32(binary.LittleEndian.Uint16(xb))
		sum += float32(s) * d
	}
	return sum
}
