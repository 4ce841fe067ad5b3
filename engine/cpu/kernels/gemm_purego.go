//go:build !(amd64 || arm64) || purego

package kernels

import "github.com/clefrt/clef/quant"

// Without assembly every kernel is its generic twin.

const accelerated = "generic"

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	dotQ8_0x4Generic(w, stride, x, nb, r)
}

func kDot4(tile []byte, nb int, x []byte, r *[4]float32) { kDot4Generic(tile, nb, x, r) }

func dotF32x4(w []float32, k int, x []float32, r *[4]float32) { dotF32x4Generic(w, k, x, r) }

// fastHalf reports whether dotHalfx4 has a fast version.
const fastHalf = false

func hasFloat2x4() bool { return false }

func dotFloat2x4(typ quant.Type, w []byte, stride, k int, x []float32, r *[8]float32) {
	panic("unreachable: hasFloat2x4 is false")
}

func dotHalfx4(bf16 bool, w []byte, stride, k int, x []float32, r *[4]float32) bool { return false }

func widen(f *quant.Format, dst []float32, src []byte) { f.Dequantize(dst, src) }
