//go:build !amd64 || purego

package kernels

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	dotQ8_0x4Generic(w, stride, x, nb, r)
}

// accelerated names the fast kernels in use.
const accelerated = "generic"

func kSums(r *kRow, x []byte) { kSumsGeneric(r, x) }
