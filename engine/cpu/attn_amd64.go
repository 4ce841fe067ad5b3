//go:build amd64 && !purego

package cpu

import (
	"github.com/clefrt/clef/engine/cpu/kernels"
	"golang.org/x/sys/cpu"
)

// attnTiles: amd64 runs Attention over tiles at every level.
var attnTiles = true

// The levels of the attention tile kernels, ordered as engine/cpu/kernels
// orders its kernel sets.
const (
	attnGeneric = iota // the pure-Go twins (attn_generic.go)
	attnAVX2           // AVX2 + FMA, 8 lanes (attn_amd64.s)
	attnAVX512         // AVX-512 F, 16 lanes (attn_amd64.s)
)

// attnCPU is the highest level this CPU runs.
var attnCPU = func() int {
	x := &cpu.X86
	switch {
	case !(x.HasAVX2 && x.HasFMA):
		return attnGeneric
	case !x.HasAVX512F:
		return attnAVX2
	}
	return attnAVX512
}()

// attnLevel is the level in use: never above the kernel set the kernels
// package chose, so CLEF_CPU_ISA forces it too. Tests set it.
var attnLevel = min(attnCPU, map[string]int{"avx512": attnAVX512, "avx2": attnAVX2}[kernels.Accelerated()])

//go:noescape
func attnScoreAVX512(s, q0, q1, q2, q3, kp *float32, d int)

//go:noescape
func attnScoreAVX2(s, q0, q1, q2, q3, kp *float32, d int)

//go:noescape
func attnRowMaxAVX512(s *float32, mask uint64, scale float32) float32

//go:noescape
func attnRowMaxAVX2(s *float32, mask uint64, scale float32) float32

//go:noescape
func attnRowExpAVX512(s *float32, mask uint64, m float32) float32

//go:noescape
func attnRowExpAVX2(s *float32, mask uint64, m float32) float32

//go:noescape
func attnPVAVX512(acc, p, v *float32, dp, n int, corr *[attnMR]float32)

//go:noescape
func attnPVAVX2(acc, p, v *float32, dp, n int, corr *[attnMR]float32)

// attnScore is attnScoreGeneric at attnLevel.
func attnScore(s []float32, q *[attnMR][]float32, kp []float32, d int) {
	if attnLevel == attnGeneric || d <= 0 {
		attnScoreGeneric(s, q, kp, d)
		return
	}
	_, _ = s[attnMR*attnKB-1], kp[attnKB*d-1]
	_, _, _, _ = q[0][d-1], q[1][d-1], q[2][d-1], q[3][d-1]
	if attnLevel >= attnAVX512 {
		attnScoreAVX512(&s[0], &q[0][0], &q[1][0], &q[2][0], &q[3][0], &kp[0], d)
	} else {
		attnScoreAVX2(&s[0], &q[0][0], &q[1][0], &q[2][0], &q[3][0], &kp[0], d)
	}
}

// attnRowMax is attnRowMaxGeneric at attnLevel.
func attnRowMax(s []float32, a, e int, scale float32) float32 {
	if attnLevel == attnGeneric {
		return attnRowMaxGeneric(s, a, e, scale)
	}
	_ = s[attnKB-1]
	if attnLevel >= attnAVX512 {
		return attnRowMaxAVX512(&s[0], attnMask(a, e), scale)
	}
	return attnRowMaxAVX2(&s[0], attnMask(a, e), scale)
}

// attnRowExp is attnRowExpGeneric at attnLevel: e^x by the polynomial of
// expf in vector lanes (with fused multiply-adds and n rounded to even,
// so a value may differ from expf's in the last bit).
func attnRowExp(s []float32, a, e int, m float32) float32 {
	if attnLevel == attnGeneric {
		return attnRowExpGeneric(s, a, e, m)
	}
	_ = s[attnKB-1]
	if attnLevel >= attnAVX512 {
		return attnRowExpAVX512(&s[0], attnMask(a, e), m)
	}
	return attnRowExpAVX2(&s[0], attnMask(a, e), m)
}

// attnPV is attnPVGeneric at attnLevel (dp a multiple of 16, n >= 1).
func attnPV(acc, p, v []float32, dp, n int, corr *[attnMR]float32) {
	if attnLevel == attnGeneric || dp%16 != 0 || n <= 0 {
		attnPVGeneric(acc, p, v, dp, n, corr)
		return
	}
	_, _, _ = acc[attnMR*dp-1], p[(attnMR-1)*attnKB+n-1], v[n*dp-1]
	if attnLevel >= attnAVX512 {
		attnPVAVX512(&acc[0], &p[0], &v[0], dp, n, corr)
	} else {
		attnPVAVX2(&acc[0], &p[0], &v[0], dp, n, corr)
	}
}
