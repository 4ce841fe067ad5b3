package quant

import (
	"encoding/binary"
	"testing"
)

func TestDequantizeMLXAffine(t *testing.T) {
	for _, bits := range []int{4, 8} {
		const n, gs = 128, 64
		codes := make([]uint32, n)
		packed := make([]byte, n*bits/8)
		for i := range codes {
			codes[i] = uint32(i*7+3) & (1<<bits - 1)
			bit := i * bits
			word := binary.LittleEndian.Uint32(packed[bit/32*4:])
			word |= codes[i] << (bit % 32)
			binary.LittleEndian.PutUint32(packed[bit/32*4:], word)
		}
		scales, biases := []float32{0.5, -0.25}, []float32{1, 2}
		dst := make([]float32, n)
		if err := DequantizeMLXAffine(dst, packed, scales, biases, bits, gs); err != nil {
			t.Fatal(err)
		}
		for i, v := range dst {
			if want := scales[i/gs]*float32(codes[i]) + biases[i/gs]; v != want {
				t.Fatalf("bits %d: value %d = %g, want %g", bits, i, v, want)
			}
		}
		if err := DequantizeMLXAffine(dst, packed[:len(packed)-1], scales, biases, bits, gs); err == nil {
			t.Errorf("bits %d: short packed data accepted", bits)
		}
	}
	if err := DequantizeMLXAffine(make([]float32, 10), nil, nil, nil, 4, 64); err == nil {
		t.Error("partial group accepted")
	}
}
