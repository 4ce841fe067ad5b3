//go:build !amd64 || purego

package bench

// fmaProbe is the pure-Go FMA probe (-tags purego, or no assembly for this
// architecture).
func fmaProbe(n int, out *[8]float32) { fmaProbeGeneric(n, out) }
