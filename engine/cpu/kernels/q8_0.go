package kernels

import "github.com/clefrt/clef/quant"

// gemmQ8_0 is the q8_0 × q8_0 GEMM: two weight rows × four activation rows
// per step where there is such a kernel (dotQ8_0x2x4, with the activation
// scales widened to float32 once per call), then four weight rows at a time
// against each remaining activation row (dotQ8_0x4), the last rows one by
// one.
func gemmQ8_0(w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 32
	var r [4]float32
	var r8 [8]float32
	n4 := n &^ 3
	m4 := 0
	var xd []float32
	if hasQ8_0x2x4() && m >= 4 && nb > 0 {
		m4 = m &^ 3
		xd = make([]float32, m4*nb)
		for i := 0; i < m4; i++ {
			f16Strided(xd[i*nb:], xq[i*xRow:], 34, nb)
		}
	}
	for j0 := 0; j0 < n4; j0 += 4 {
		wt := w[j0*wRow : (j0+4)*wRow]
		for i := 0; i < m4; i += 4 {
			for r0 := 0; r0 < 4; r0 += 2 {
				dotQ8_0x2x4(wt[r0*wRow:], wRow, xq[i*xRow:], xRow, xd[i*nb:], nb, &r8)
				for a := 0; a < 4; a++ {
					out[(i+a)*ldOut+j0+r0] = r8[a]
					out[(i+a)*ldOut+j0+r0+1] = r8[4+a]
				}
			}
		}
		for i := m4; i < m; i++ {
			dotQ8_0x4(wt, wRow, xq[i*xRow:(i+1)*xRow], nb, &r)
			copy(out[i*ldOut+j0:i*ldOut+j0+4], r[:])
		}
	}
	for j := n4; j < n; j++ {
		wt := w[j*wRow : (j+1)*wRow]
		for i := 0; i < m; i++ {
			out[i*ldOut+j] = dotQ8_0Generic(wt, xq[i*xRow:(i+1)*xRow], nb)
		}
	}
}

// dotQ8_0x2x4 dots two q8_0 weight rows (stride bytes apart) with four
// q8_0 activation rows (xstride apart, block scales widened in xd, nb per
// row) into r[4·row+act]; callers check hasQ8_0x2x4 first.
func dotQ8_0x2x4(w []byte, stride int, x []byte, xstride int, xd []float32, nb int, r *[8]float32) {
	_ = w[stride+34*nb-1]
	_ = x[3*xstride+34*nb-1]
	_ = xd[4*nb-1]
	dotQ8_0x2x4Fast(w, stride, x, xstride, xd, nb, r)
}

// dotQ8_0x2x4Generic is the generic twin of dotQ8_0x2x4 (the scales are
// read from the blocks).
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
