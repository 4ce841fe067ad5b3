package cpu

import (
	"encoding/binary"
	"math"

	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// decoder turns one stored row of a weight into float32.
type decoder struct {
	blockElems, blockBytes int
	rowBytes               int
	fn                     func(dst []float32, src []byte)
	// q8 is set for block formats whose dot product reads 8-bit block
	// activations (q8_0, q8_1, q8_K): their matmul can run on the integer
	// kernels of engine/cpu/kernels.
	q8 bool
}

// decodeRow writes row r of w into dst (len cols).
func (w *weight) decodeRow(dst []float32, r int) {
	rb := w.dec.rowBytes
	if w.mlx != nil {
		w.mlx.decodeRow(dst, w.t.Data[r*rb:(r+1)*rb], r)
		return
	}
	w.dec.fn(dst, w.t.Data[r*rb:(r+1)*rb])
}

// decoderFor picks the row decoder for a weight's storage type.
func decoderFor(t *weights.Tensor) (decoder, error) {
	switch t.Type {
	case quant.F32:
		return decoder{blockElems: 1, blockBytes: 4, fn: decodeF32}, nil
	case quant.F16:
		return decoder{blockElems: 1, blockBytes: 2, fn: decodeF16}, nil
	case quant.BF16:
		return decoder{blockElems: 1, blockBytes: 2, fn: decodeBF16}, nil
	}
	return formatDecoder(t.Type)
}

func decodeF32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func decodeBF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

func decodeF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}
