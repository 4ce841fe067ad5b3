//go:build !purego

package kernels

// The I8MM (SMMLA) kernels of level i8mm (i8mm_arm64.s): two weight rows
// × two activation rows per instruction, so they take several activation
// rows per call. Each has a generic twin, and each wrapper checks its
// operands' lengths and falls back to the twin below level i8mm.

//go:noescape
func dotQ8_0x2x4I8MM(w *byte, stride int, wd *float32, x *byte, xstride int, xd *float32, nb int, r *[8]float32)

//go:noescape
func kDot4x2I8MM(tile *byte, rowStride int, x *byte, xstride int, nb int, r *[8]float32)

// hasQ8_0x2x4I8MM reports whether q8_0TilesI8MM runs its SMMLA kernel.
func hasQ8_0x2x4I8MM() bool { return hasISA(isaI8MM) }

// q8_0TilesI8MM dots np pairs of q8_0 weight rows (2·np rows stride bytes
// apart; block scales widened in wd, nb per row) with nq quads of q8_0
// activation rows (xstride bytes apart; block scales widened in xd, qf
// floats per quad, xd[qf·q+4·b+act]) into out[(4·q+act)·ldOut+2·p+row],
// one dotQ8_0x2x4I8MM call (one pass over the nb blocks) per pair and
// quad, so that a result's bits depend on neither np nor nq. Below level
// i8mm it runs the generic twin, dotQ8_0x2x4Generic, which reads the
// scales from the blocks.
func q8_0TilesI8MM(w []byte, stride int, wd []float32, x []byte, xstride int, xd []float32, qf, nb, np, nq int, out []float32, ldOut int) {
	if np < 1 || nq < 1 || nb < 1 {
		return
	}
	_ = w[(2*np-1)*stride+34*nb-1]
	_ = wd[2*np*nb-1]
	_ = x[(4*nq-1)*xstride+34*nb-1]
	_ = xd[(nq-1)*qf+4*nb-1]
	_ = out[(4*nq-1)*ldOut+2*np-1]
	i8mm := hasQ8_0x2x4I8MM()
	var r [8]float32
	for q := 0; q < nq; q++ {
		for p := 0; p < np; p++ {
			if i8mm {
				dotQ8_0x2x4I8MM(&w[2*p*stride], stride, &wd[2*p*nb], &x[4*q*xstride], xstride, &xd[q*qf], nb, &r)
			} else {
				dotQ8_0x2x4Generic(w[2*p*stride:], stride, x[4*q*xstride:], xstride, nb, &r)
			}
			for a := 0; a < 4; a++ {
				o := out[(4*q+a)*ldOut+2*p:]
				o[0], o[1] = r[a], r[4+a]
			}
		}
	}
}

// hasKDot4x2 reports whether kDot4x2 runs its SMMLA kernel; below level
// i8mm a driver does better with kDot4 per activation row.
func hasKDot4x2() bool { return hasISA(isaI8MM) }

// kDot4x2 dots the four decoded rows of tile (see decodeKTile) with two
// q8_K activation rows (xstride bytes apart) into r[4·act+row].
func kDot4x2(tile []byte, nb int, x []byte, xstride int, r *[8]float32) {
	if nb == 0 {
		clear(r[:])
		return
	}
	_ = tile[4*nb*kRec-1]
	_ = x[xstride+292*nb-1]
	if !hasKDot4x2() {
		kDot4x2Generic(tile, nb, x, xstride, r)
		return
	}
	kDot4x2I8MM(&tile[0], nb*kRec, &x[0], xstride, nb, r)
}

// kDot4x2Generic is the generic twin of kDot4x2.
func kDot4x2Generic(tile []byte, nb int, x []byte, xstride int, r *[8]float32) {
	var r4 [4]float32
	for a := 0; a < 2; a++ {
		kDot4Generic(tile, nb, x[a*xstride:], &r4)
		copy(r[4*a:4*a+4], r4[:])
	}
}
