//go:build !purego

package kernels

import "github.com/clefrt/clef/quant"

//go:noescape
func dotQ8_0x2x4AVX2(w *byte, stride int, wd *float32, x *byte, xstride int, xd *float32, nb, np, nq int, out *float32, ldo int)

// hasQ8_0x2x4 reports whether dotQ8_0x2x4Scaled has a fast kernel.
func hasQ8_0x2x4() bool { return fast }

// dotQ8_0x2x4Fast runs the 2×4 kernel of the chosen level (see
// dotQ8_0x2x4Scaled; generic twin dotQ8_0x2x4Generic).
func dotQ8_0x2x4Fast(w []byte, stride int, wd []float32, x []byte, xstride int, xd []float32, nb, np, nq int, out []float32, ldOut int) {
	if hasISA(isaAVX512) {
		_ = x[(4*nq-1)*xstride+32*nb-1] // the rows of q8ActsAVX512
		dotQ8_0x2x4AVX512(&w[0], stride, &wd[0], &x[0], xstride, &xd[0], nb, np, nq, &out[0], ldOut)
		return
	}
	_ = x[(4*nq-1)*xstride+34*nb-1]
	dotQ8_0x2x4AVX2(&w[0], stride, &wd[0], &x[0], xstride, &xd[0], nb, np, nq, &out[0], ldOut)
}

// q8ActRow is the row stride of the activations that q8PrepActs writes
// for the AVX-512 kernel (64 bytes per two blocks).
func q8ActRow(nb int) int { return 64 * ((nb + 1) / 2) }

// q8PrepActs returns rows q8_0 activation rows (xRow bytes apart in xq)
// as dotQ8_0x2x4Fast reads them at the chosen level, and their stride:
// xq itself at avx2, at avx512 each block's codes + 128 without the
// scale (q8ActsAVX512), written to *buf.
func q8PrepActs(buf *[]byte, xq []byte, xRow, rows, nb int) ([]byte, int) {
	if !hasISA(isaAVX512) || rows == 0 || nb == 0 {
		return xq, xRow
	}
	ar := q8ActRow(nb)
	dst := bytesOf(buf, rows*ar)
	_ = xq[(rows-1)*xRow+34*nb-1]
	q8ActsAVX512(&dst[0], &xq[0], xRow, nb, rows)
	return dst, ar
}

//go:noescape
func dotQ8_0x4x1AVX2(w *byte, stride int, wd *float32, x *byte, xd *float32, nb int, out *float32)

// dotQ8_0x4x1Fast is dotQ8_0x4 with the weight and activation block scales
// widened (wd: four rows of nb, xd: nb), writing out[0:4], with the same
// bits (generic twin dotQ8_0x4Generic); the AVX-512 kernel reads the
// scales from the blocks.
func dotQ8_0x4x1Fast(w []byte, stride int, wd []float32, x []byte, xd []float32, nb int, out []float32) {
	if hasISA(isaAVX512) {
		dotQ8_0x4AVX512(&w[0], stride, &x[0], nb, (*[4]float32)(out))
		return
	}
	_ = wd[4*nb-1]
	_ = xd[nb-1]
	dotQ8_0x4x1AVX2(&w[0], stride, &wd[0], &x[0], &xd[0], nb, &out[0])
}

//go:noescape
func f16StridedAVX2(dst *float32, src *byte, stride int, n int)

// f16Strided widens n fp16 values stride bytes apart in src to dst.
func f16Strided(dst []float32, src []byte, stride, n int) {
	if n == 0 {
		return
	}
	_ = dst[n-1]
	_ = src[(n-1)*stride+1]
	if !fast {
		f16StridedGeneric(dst, src, stride, n)
		return
	}
	f16StridedAVX2(&dst[0], &src[0], stride, n)
}

//go:noescape
func q8ScalesQuadAVX2(dst *float32, src *byte, xstride int, nb int, pairs bool)

// q8ScalesPairs reports whether dotQ8_0x2x4Fast reads the activation
// scales pair-interleaved (see q8ScalesQuad).
func q8ScalesPairs() bool { return hasISA(isaAVX512) }

// q8ScalesQuad widens the block scales of four q8_0 rows of nb blocks
// (xstride bytes apart in src) to dst[4·b+row], or with pairs to
// dst[8·(b/2)+2·row+b%2] (the odd last block's other slots zeroed);
// dst holds q8QuadFloats(nb) values.
func q8ScalesQuad(dst []float32, src []byte, xstride, nb int, pairs bool) {
	if nb == 0 {
		return
	}
	_ = dst[q8QuadFloats(nb)-1]
	_ = src[3*xstride+34*nb-1]
	if !fast {
		q8ScalesQuadGeneric(dst, src, xstride, nb, pairs)
		return
	}
	q8ScalesQuadAVX2(&dst[0], &src[0], xstride, nb, pairs)
}

//go:noescape
func quantQ8_0AVX2(dst *byte, src *float32, nb int) int

// quantizeQ8_0Row quantizes one row of activations (a multiple of 32) to
// q8_0 with the bits of quant.QuantizeQ8_0Activations: in assembly, a
// block holding a NaN or an infinity in Go.
func quantizeQ8_0Row(dst []byte, src []float32) {
	nb := len(src) / 32
	if !fast || nb == 0 {
		quant.QuantizeQ8_0Activations(dst, src)
		return
	}
	_ = dst[34*nb-1]
	for done := 0; done < nb; {
		done += quantQ8_0AVX2(&dst[34*done], &src[32*done], nb-done)
		if done < nb {
			quant.QuantizeQ8_0Activations(dst[34*done:34*done+34], src[32*done:32*done+32])
			done++
		}
	}
}

//go:noescape
func quantQ8_KAVX2(dst *byte, src *float32, nb int) int

// quantizeQ8_KRow quantizes one row of activations (a multiple of 256) to
// q8_K with the bits of quant.QuantizeActivations: in assembly, a block
// holding a NaN or an infinity in Go.
func quantizeQ8_KRow(dst []byte, src []float32) error {
	nb := len(src) / 256
	if !fast || nb == 0 {
		return quant.QuantizeActivations(quant.Q8_K, dst, src)
	}
	_ = dst[292*nb-1]
	for done := 0; done < nb; {
		done += quantQ8_KAVX2(&dst[292*done], &src[256*done], nb-done)
		if done < nb {
			if err := quant.QuantizeActivations(quant.Q8_K, dst[292*done:292*done+292], src[256*done:256*done+256]); err != nil {
				return err
			}
			done++
		}
	}
	return nil
}
