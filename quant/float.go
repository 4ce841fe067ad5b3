package quant

import (
	"encoding/binary"
	"math"
)

func dequantF32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func quantizeF32(dst []byte, src []float32, _ []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func dequantF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = Float16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func quantizeF16(dst []byte, src []float32, _ []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], Float32ToFloat16(v))
	}
}

func dequantBF16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func quantizeBF16(dst []byte, src []float32, _ []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], Float32ToBF16(v))
	}
}

func dequantF64(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
	}
}

func quantizeF64(dst []byte, src []float32, _ []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(float64(v)))
	}
}

func dequantI8(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = float32(int8(src[i]))
	}
}

func dequantI16(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = float32(int16(binary.LittleEndian.Uint16(src[2*i:])))
	}
}

func dequantI32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = float32(int32(binary.LittleEndian.Uint32(src[4*i:])))
	}
}

// f16 reads the binary16 value at b[0:2].
func f16(b []byte) float32 { return Float16ToFloat32(binary.LittleEndian.Uint16(b)) }

// putF16 stores v, already a binary16 value, at b[0:2].
func putF16(b []byte, v float32) { binary.LittleEndian.PutUint16(b, Float32ToFloat16(v)) }
