//go:build !amd64 || purego

package kernels

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	dotQ8_0x4Generic(w, stride, x, nb, r)
}

// accelerated names the fast kernels in use.
const accelerated = "generic"

func kDot4(tile []byte, nb int, x []byte, r *[4]float32) { kDot4Generic(tile, nb, x, r) }
