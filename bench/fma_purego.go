//go:build !amd64 || purego

package bench

// fmaProbe is the pure-Go FMA probe (-tags purego, or no assembly for this
// architecture).
func fmaProbe(n int, out *[8]float32) { fmaProbeGeneric(n, out) }

// dotProbe is the pure-Go int8 dot probe.
func dotProbe(n int, out *[8]int32) { dotProbeGeneric(n, out) }
