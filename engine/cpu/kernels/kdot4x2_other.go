//go:build !arm64 || purego

package kernels

// hasKDot4x2 reports false: there is no kernel of four decoded rows × two
// activation rows here.
func hasKDot4x2() bool { return false }

func kDot4x2(tile []byte, nb int, x []byte, xstride int, r *[8]float32) {
	panic("unreachable: hasKDot4x2 is false")
}
