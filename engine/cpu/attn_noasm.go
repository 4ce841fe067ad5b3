//go:build !amd64 || purego

package cpu

// attnTiles: the tile path runs its pure-Go kernels unless the row path
// has vector kernels here (arm64's NEON ones).
var attnTiles = !attnRowKernels

// The attention tile kernels have one level here: the pure-Go twins.
const attnGeneric = 0

// attnCPU and attnLevel: only the generic level.
var attnCPU, attnLevel = attnGeneric, attnGeneric

func attnScore(s []float32, q *[attnMR][]float32, kp []float32, d int) {
	attnScoreGeneric(s, q, kp, d)
}

func attnRowMax(s []float32, a, e int, scale float32) float32 {
	return attnRowMaxGeneric(s, a, e, scale)
}

func attnRowExp(s []float32, a, e int, m float32) float32 {
	return attnRowExpGeneric(s, a, e, m)
}

func attnPV(acc, p, v []float32, dp, n int, corr *[attnMR]float32) {
	attnPVGeneric(acc, p, v, dp, n, corr)
}
