//go:build !amd64 || purego

package cpu

// siluMul sets g[i] = silu(g[i])·u[i] (the gate of an expert FFN times its
// up projection).
func siluMul(g, u []float32) { siluMulGeneric(g, u[:len(g)]) }
