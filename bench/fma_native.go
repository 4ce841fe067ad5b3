//go:build amd64 && !purego

package bench

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2+FMA probe.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func fmaProbeAVX2(n int, out *[8]float32)

// fmaProbe runs n iterations of the FMA probe (fmaProbeGeneric's
// arithmetic) with AVX2 when the CPU has it.
func fmaProbe(n int, out *[8]float32) {
	if useAVX2 {
		fmaProbeAVX2(n, out)
		return
	}
	fmaProbeGeneric(n, out)
}

//go:noescape
func dotProbeAVX2(n int, out *[8]int32)

// dotProbe runs n iterations of the int8 dot probe (dotProbeGeneric's
// arithmetic) with AVX2 when the CPU has it.
func dotProbe(n int, out *[8]int32) {
	if useAVX2 {
		dotProbeAVX2(n, out)
		return
	}
	dotProbeGeneric(n, out)
}
