//go:build !purego

package kernels

import "github.com/clefrt/clef/quant"

//go:noescape
func decodeQ4_0AVX2(src *byte, nb int, dst *byte)

//go:noescape
func decodeQ4_1AVX2(src *byte, nb int, dst *byte)

//go:noescape
func decodeQ5_0AVX2(src *byte, nb int, dst *byte)

//go:noescape
func decodeQ5_1AVX2(src *byte, nb int, dst *byte)

// decodeLegacyRowFast decodes nb blocks of a q4_0/q4_1/q5_0/q5_1 row into
// q8_0-shaped blocks of 34 bytes (scale, codes as decodeLegacy writes
// them), reporting false when there is no fast decoder.
func decodeLegacyRowFast(typ quant.Type, dst, src []byte, nb int) bool {
	if !fast || nb == 0 {
		return false
	}
	f, _ := quant.FormatOf(typ)
	_ = src[nb*f.BlockBytes-1]
	_ = dst[34*nb-1]
	switch typ {
	case quant.Q4_0:
		decodeQ4_0AVX2(&src[0], nb, &dst[0])
	case quant.Q4_1:
		decodeQ4_1AVX2(&src[0], nb, &dst[0])
	case quant.Q5_0:
		decodeQ5_0AVX2(&src[0], nb, &dst[0])
	case quant.Q5_1:
		decodeQ5_1AVX2(&src[0], nb, &dst[0])
	default:
		return false
	}
	return true
}
