package quant

import (
	"encoding/binary"
	"fmt"
)

// DequantizeMLXAffine decodes MLX affine-quantized values: codes of bits
// bits (4 or 8) packed into little-endian uint32 words along the row, lowest
// bits first, and per group of groupSize values w = scale·q + bias. len(dst)
// values are decoded; scales and biases hold one entry per group.
func DequantizeMLXAffine(dst []float32, packed []byte, scales, biases []float32, bits, groupSize int) error {
	if bits != 4 && bits != 8 && bits != 2 && bits != 3 && bits != 6 {
		return fmt.Errorf("quant: MLX affine: unsupported bits %d", bits)
	}
	if groupSize <= 0 || len(dst)%groupSize != 0 {
		return fmt.Errorf("quant: MLX affine: %d values are not whole groups of %d", len(dst), groupSize)
	}
	groups := len(dst) / groupSize
	if len(scales) < groups || len(biases) < groups {
		return fmt.Errorf("quant: MLX affine: %d groups need as many scales and biases, have %d and %d", groups, len(scales), len(biases))
	}
	if need := (len(dst)*bits + 31) / 32 * 4; len(packed) < need {
		return fmt.Errorf("quant: MLX affine: %d values of %d bits need %d bytes, have %d", len(dst), bits, need, len(packed))
	}
	mask := uint64(1)<<bits - 1
	for i := range dst {
		bit := i * bits
		w := bit / 32
		v := uint64(binary.LittleEndian.Uint32(packed[4*w:]))
		if off := bit % 32; off+bits > 32 {
			v |= uint64(binary.LittleEndian.Uint32(packed[4*w+4:])) << 32
		}
		q := v >> (bit % 32) & mask
		g := i / groupSize
		dst[i] = scales[g]*float32(q) + biases[g]
	}
	return nil
}
