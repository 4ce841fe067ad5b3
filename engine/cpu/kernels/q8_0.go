package kernels

// gemmQ8_0 is the q8_0 × q8_0 GEMM: four weight rows at a time against each
// activation row (dotQ8_0x4), the rest one by one.
func gemmQ8_0(w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 32
	var r [4]float32
	n4 := n &^ 3
	for j0 := 0; j0 < n4; j0 += 4 {
		wt := w[j0*wRow : (j0+4)*wRow]
		for i := 0; i < m; i++ {
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
