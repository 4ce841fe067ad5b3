package kernels

// gemmGeneric runs a row dot product over every (activation row, weight
// row) pair, weight rows outermost in tiles so that a tile stays in cache
// while every activation row passes over it.
func gemmGeneric(dot func(n int, w, x []byte) float32, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	const tile = 4
	for j0 := 0; j0 < n; j0 += tile {
		for i := 0; i < m; i++ {
			x := xq[i*xRow : (i+1)*xRow]
			for j := j0; j < min(j0+tile, n); j++ {
				out[i*ldOut+j] = dot(k, w[j*wRow:(j+1)*wRow], x)
			}
		}
	}
}
