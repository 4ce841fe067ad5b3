//go:build !(amd64 || arm64) || purego

package kernels

// Without assembly every kernel is its generic twin.

const accelerated = "generic"

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	dotQ8_0x4Generic(w, stride, x, nb, r)
}

func kDot4(tile []byte, nb int, x []byte, r *[4]float32) { kDot4Generic(tile, nb, x, r) }

func dotF32x4(w []float32, k int, x []float32, r *[4]float32) { dotF32x4Generic(w, k, x, r) }

func dotHalfx4(bf16 bool, w []byte, stride, k int, x []float32, r *[4]float32) bool { return false }

func useQ4K() bool { return false }

func q4kDot4(w []byte, stride int, recs []byte, nb int, x []byte, r *[4]float32) {
	q4kDot4Generic(w, stride, recs, nb, x, r)
}

func q6kDot4(w []byte, stride int, recs []byte, nb int, x []byte, r *[4]float32) {
	q6kDot4Generic(w, stride, recs, nb, x, r)
}
