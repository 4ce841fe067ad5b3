//go:build (amd64 || arm64) && !purego

package kernels

// The dispatch of the fast kernels: each runs its assembly version when the
// CPU has the instructions it needs (fast, set in cpu_<arch>.go), its
// generic twin otherwise.

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	if !fast || nb == 0 {
		dotQ8_0x4Generic(w, stride, x, nb, r)
		return
	}
	_ = w[3*stride+34*nb-1]
	_ = x[34*nb-1]
	dotQ8_0x4Fast(&w[0], stride, &x[0], nb, r)
}

func kDot4(tile []byte, nb int, x []byte, r *[4]float32) {
	if !fast || nb == 0 {
		kDot4Generic(tile, nb, x, r)
		return
	}
	_ = tile[4*nb*kRec-1]
	_ = x[292*nb-1]
	kDot4Fast(&tile[0], nb*kRec, &x[0], nb, r)
}

func dotF32x4(w []float32, k int, x []float32, r *[4]float32) {
	n8 := k / 8
	if !fast || !fastF32 || n8 == 0 {
		dotF32x4Generic(w, k, x, r)
		return
	}
	_ = w[4*k-1]
	_ = x[k-1]
	dotF32x4Fast(&w[0], k, &x[0], n8, r)
	for row := range r {
		for i := 8 * n8; i < k; i++ {
			r[row] += w[row*k+i] * x[i]
		}
	}
}
