//go:build !(amd64 || arm64) || purego

package kernels

// hasQ8_0x2x4 reports false: there is no fast two-by-four q8_0 kernel here.
func hasQ8_0x2x4() bool { return false }

func dotQ8_0x2x4Fast(w []byte, stride int, wd []float32, x []byte, xstride int, xd []float32, nb, np, nq int, out []float32, ldOut int) {
	panic("unreachable: hasQ8_0x2x4 is false")
}

func dotQ8_0x4x1Fast(w []byte, stride int, wd []float32, x []byte, xd []float32, nb int, out []float32) {
	panic("unreachable: hasQ8_0x2x4 is false")
}
