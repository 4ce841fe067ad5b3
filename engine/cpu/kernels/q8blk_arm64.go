//go:build !purego

package kernels

// The q8_0 driver hooks on arm64 (see q8blk_amd64.go for what each does):
// the 2×4 kernel is the SMMLA one of level i8mm (i8mm_arm64.s), which
// reads the block scales widened (weights per row, activations four to a
// block, xd[4·b+act]); the 4×1 kernel for the leftover activation rows is
// the SDOT one of dotQ8_0x4, so that those rows have the bits they get
// when a call has fewer than four rows. The rest is the generic code.

// hasQ8_0x2x4 reports whether dotQ8_0x2x4Scaled has a fast kernel: at
// level i8mm only (there is no SDOT 2×4 kernel: at level neon the driver
// runs dotQ8_0x4 against each activation row).
func hasQ8_0x2x4() bool { return hasQ8_0x2x4I8MM() }

// dotQ8_0x2x4Fast runs the SMMLA 2×4 kernel over the panel (see
// dotQ8_0x2x4Scaled; generic twin dotQ8_0x2x4Generic).
func dotQ8_0x2x4Fast(w []byte, stride int, wd []float32, x []byte, xstride int, xd []float32, nb, np, nq int, out []float32, ldOut int) {
	q8_0TilesI8MM(w, stride, wd, x, xstride, xd, q8QuadFloats(nb), nb, np, nq, out, ldOut)
}

// dotQ8_0x4x1Fast is dotQ8_0x4 (the SDOT kernel at level neon and above)
// writing out[0:4]; the widened scales are not used.
func dotQ8_0x4x1Fast(w []byte, stride int, wd []float32, x []byte, xd []float32, nb int, out []float32) {
	var r [4]float32
	dotQ8_0x4(w, stride, x, nb, &r)
	copy(out[:4], r[:])
}
