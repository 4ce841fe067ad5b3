//go:build amd64 && !purego

package cpu

//go:noescape
func siluMulAVX2(gate, up *float32, n8 int)

// siluMul sets g[i] = silu(g[i])·u[i] (the gate of an expert FFN times its
// up projection): eight lanes at a time with AVX2+FMA in blocks of siluBlock whose
// gates are all >= -80 (the vector e^-g would leave the normal range below),
// the rest by silu.
func siluMul(g, u []float32) {
	u = u[:len(g)]
	i := 0
	if useAVX2 {
		for ; i+siluBlock <= len(g); i += siluBlock {
			if siluInRange(g[i : i+siluBlock]) {
				siluMulAVX2(&g[i], &u[i], siluBlock/8)
			} else {
				siluMulGeneric(g[i:i+siluBlock], u[i:i+siluBlock])
			}
		}
	}
	siluMulGeneric(g[i:], u[i:])
}

// siluInRange reports whether every gate is >= -80 (false for a NaN).
func siluInRange(g []float32) bool {
	for _, v := range g {
		if !(v >= -80) {
			return false
		}
	}
	return true
}
