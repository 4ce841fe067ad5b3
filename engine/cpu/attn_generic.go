package cpu

import "math"

// attnScoreGeneric sets s[r·64+j] = Σ_t q[r][t]·kp[t·64+j] for r < 4,
// j < 64, t < d: the scores of a micro-tile of 4 query rows against a
// packed block of 64 keys (kp: d rows of 64 keys).
func attnScoreGeneric(s []float32, q *[attnMR][]float32, kp []float32, d int) {
	s = s[:attnMR*attnKB]
	clear(s)
	for t := range d {
		k := kp[t*attnKB : (t+1)*attnKB]
		for r := range attnMR {
			qv := q[r][t]
			row := s[r*attnKB : (r+1)*attnKB]
			for j, kv := range k {
				row[j] += qv * kv
			}
		}
	}
}

// attnRowMaxGeneric multiplies the 64 scores s by scale and returns the
// largest of s[a:e] (a < e).
func attnRowMaxGeneric(s []float32, a, e int, scale float32) float32 {
	s = s[:attnKB]
	for j := range s {
		s[j] *= scale
	}
	m := float32(math.Inf(-1))
	for _, x := range s[a:e] {
		m = max(m, x)
	}
	return m
}

// attnRowExpGeneric replaces s[j] (64 scores) by e^(s[j]-m) for a <= j < e
// and by 0 elsewhere, and returns the sum of the new values.
func attnRowExpGeneric(s []float32, a, e int, m float32) float32 {
	s = s[:attnKB]
	var sum float32
	for j := range s {
		if j < a || j >= e {
			s[j] = 0
			continue
		}
		p := expf(s[j] - m)
		s[j] = p
		sum += p
	}
	return sum
}

// attnPVGeneric sets acc[r·dp+c] = acc[r·dp+c]·corr[r] + Σ_{j<n}
// p[r·64+j]·v[j·dp+c] for r < 4, c < dp: the softmax weights of a
// micro-tile folded into its rows' accumulators, rescaled first.
func attnPVGeneric(acc, p, v []float32, dp, n int, corr *[attnMR]float32) {
	for r := range attnMR {
		row := acc[r*dp : (r+1)*dp]
		for c := range row {
			row[c] *= corr[r]
		}
		for j, pj := range p[r*attnKB : r*attnKB+n] {
			for c, x := range v[j*dp : (j+1)*dp] {
				row[c] += pj * x
			}
		}
	}
}

// attnMask returns the bits a..e-1 of a 64-bit mask (0 <= a < e <= 64).
func attnMask(a, e int) uint64 {
	return ^uint64(0) >> (64 - (e - a)) << a
}
