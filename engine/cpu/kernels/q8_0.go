package kernels

import (
	"sync"

	"github.com/clefrt/clef/quant"
)

// Cache blocking of the GEMM drivers that run a two-by-four kernel (q8_0
// and the packed K formats): the weight rows of a call are taken
// gemmWeightBlock at a time and, against each such block, the activation
// rows gemmActPanel at a time, so that a long prompt's activations (m =
// 512 rows of k = 2048 are about 1.1 MB as q8_0) are read from beyond L2
// once per block of weight rows instead of once per four. Every output is
// still one kernel call over the whole of k, so the blocking changes no
// bits.
const (
	gemmWeightBlock = 64 // weight rows per block, a multiple of 4
	gemmActPanel    = 64 // activation rows per panel, a multiple of 4
)

// gemmScratch is a driver's reusable per-call scratch (pooled: the
// kernels run on many goroutines at once).
type gemmScratch struct {
	xd, wd []float32
	b      []byte
}

var gemmScratchPool = sync.Pool{New: func() any { return new(gemmScratch) }}

// floats returns (*s)[:n], reallocating when its capacity is short.
func floats(s *[]float32, n int) []float32 {
	if cap(*s) < n {
		*s = make([]float32, n)
	}
	return (*s)[:n]
}

// bytesOf returns (*s)[:n], reallocating when its capacity is short.
func bytesOf(s *[]byte, n int) []byte {
	if cap(*s) < n {
		*s = make([]byte, n)
	}
	return (*s)[:n]
}

// gemmQ8_0 is the q8_0 × q8_0 GEMM: where there are fast kernels and at
// least four activation rows, four weight rows at a time through
// gemmQ8_0Tiles (cache-blocked as above), else four weight rows at a time
// against each activation row (dotQ8_0x4: with fewer than four rows
// widening the scales first does not pay); the last n mod 4 weight rows
// one by one.
func gemmQ8_0(w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 32
	n4 := n &^ 3
	if hasQ8_0x2x4() && m >= 4 && nb > 0 && n4 > 0 {
		gemmQ8_0Tiles(w, wRow, n4, nb, xq, xRow, m, out, ldOut)
	} else {
		var r [4]float32
		for j0 := 0; j0 < n4; j0 += 4 {
			wt := w[j0*wRow : (j0+4)*wRow]
			for i := 0; i < m; i++ {
				dotQ8_0x4(wt, wRow, xq[i*xRow:(i+1)*xRow], nb, &r)
				copy(out[i*ldOut+j0:i*ldOut+j0+4], r[:])
			}
		}
	}
	for j := n4; j < n; j++ {
		wt := w[j*wRow : (j+1)*wRow]
		for i := 0; i < m; i++ {
			out[i*ldOut+j] = dotQ8_0Generic(wt, xq[i*xRow:(i+1)*xRow], nb)
		}
	}
}

// gemmQ8_0Tiles runs the fast kernels on the first n4 (a multiple of 4)
// weight rows and m >= 4 activation rows: the weight rows in blocks of
// gemmWeightBlock, their scales widened once per block; against each
// block the activation rows in panels of gemmActPanel through the 2×4
// kernel, then the last m mod 4 rows through the 4×1 kernel.
func gemmQ8_0Tiles(w []byte, wRow, n4, nb int, xq []byte, xRow, m int, out []float32, ldOut int) {
	sc := gemmScratchPool.Get().(*gemmScratch)
	defer gemmScratchPool.Put(sc)
	m4 := m &^ 3
	qf, pairs := q8QuadFloats(nb), q8ScalesPairs()
	xd := floats(&sc.xd, m4/4*qf+(m-m4)*nb)
	for i := 0; i < m4; i += 4 {
		q8ScalesQuad(xd[i/4*qf:(i/4+1)*qf], xq[i*xRow:], xRow, nb, pairs)
	}
	xl := xd[m4/4*qf:] // the scales of the last rows, nb each
	for i := m4; i < m; i++ {
		f16Strided(xl[(i-m4)*nb:], xq[i*xRow:], 34, nb)
	}
	xa, xs := q8PrepActs(&sc.b, xq, xRow, m4, nb)
	wd := floats(&sc.wd, gemmWeightBlock*nb)
	for jb := 0; jb < n4; jb += gemmWeightBlock {
		je := min(n4, jb+gemmWeightBlock)
		for j := jb; j < je; j++ {
			f16Strided(wd[(j-jb)*nb:], w[j*wRow:], 34, nb)
		}
		for ib := 0; ib < m4; ib += gemmActPanel {
			ie := min(m4, ib+gemmActPanel)
			for j0 := jb; j0 < je; j0 += 4 {
				dotQ8_0x2x4Scaled(w[j0*wRow:], wRow, wd[(j0-jb)*nb:], 2, xa[ib*xs:], xs, xd[ib/4*qf:], (ie-ib)/4, nb, out[ib*ldOut+j0:], ldOut)
			}
		}
		for j0 := jb; j0 < je && m4 < m; j0 += 4 {
			_ = w[j0*wRow+3*wRow+34*nb-1]
			for i := m4; i < m; i++ {
				_ = xq[i*xRow+34*nb-1]
				dotQ8_0x4x1Fast(w[j0*wRow:], wRow, wd[(j0-jb)*nb:], xq[i*xRow:], xl[(i-m4)*nb:], nb, out[i*ldOut+j0:i*ldOut+j0+4])
			}
		}
	}
}

// dotQ8_0x2x4Scaled dots np pairs of q8_0 weight rows (2·np rows, stride
// bytes apart, block scales widened in wd, nb per row) with nq quads of
// q8_0 activation rows (as q8PrepActs returns them, xstride apart; block
// scales widened in xd as q8ScalesQuad writes them with q8ScalesPairs(),
// q8QuadFloats(nb) per quad) into out[(4·q+act)·ldOut+2·p+row] for quad q
// and pair p. Every result is one pass over the nb blocks, the same
// whatever np and nq. Callers check hasQ8_0x2x4 first.
func dotQ8_0x2x4Scaled(w []byte, stride int, wd []float32, np int, x []byte, xstride int, xd []float32, nq, nb int, out []float32, ldOut int) {
	if np < 1 || nq < 1 || nb < 1 {
		return
	}
	_ = w[(2*np-1)*stride+34*nb-1]
	_ = wd[2*np*nb-1]
	_ = xd[nq*q8QuadFloats(nb)-1]
	_ = out[(4*nq-1)*ldOut+2*np-1]
	dotQ8_0x2x4Fast(w, stride, wd, x, xstride, xd, nb, np, nq, out, ldOut)
}

// dotQ8_0x2x4Generic is the generic twin of dotQ8_0x2x4Scaled (the scales
// are read from the blocks).
func dotQ8_0x2x4Generic(w []byte, stride int, x []byte, xstride int, nb int, r *[8]float32) {
	for row := 0; row < 2; row++ {
		for a := 0; a < 4; a++ {
			r[4*row+a] = dotQ8_0Generic(w[row*stride:], x[a*xstride:], nb)
		}
	}
}

// f16StridedGeneric is the generic twin of f16Strided.
func f16StridedGeneric(dst []float32, src []byte, stride, n int) {
	for i := 0; i < n; i++ {
		dst[i] = quant.Float16ToFloat32(le.Uint16(src[i*stride:]))
	}
}

// q8QuadFloats is the size of q8ScalesQuad's output for nb blocks.
func q8QuadFloats(nb int) int { return 8 * ((nb + 1) / 2) }

// q8ScalesQuadGeneric is the generic twin of q8ScalesQuad.
func q8ScalesQuadGeneric(dst []float32, src []byte, xstride, nb int, pairs bool) {
	for row := 0; row < 4; row++ {
		for b := 0; b < nb; b++ {
			d := quant.Float16ToFloat32(le.Uint16(src[row*xstride+34*b:]))
			if pairs {
				dst[8*(b/2)+2*row+b%2] = d
				if b%2 == 0 && b == nb-1 {
					dst[8*(b/2)+2*row+1] = 0
				}
			} else {
				dst[4*b+row] = d
			}
		}
	}
}
