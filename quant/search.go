package quant

import (
	"math"
	"slices"
)

// Scale search. Every quantizer here minimises the (importance-)weighted
// squared error Σ w·(x − y)² of the values it actually stores, fp16 rounding
// of the scales included: without an importance matrix w = 1, so the plain
// RMSE is what is minimised.
//
// For one scale d and codes q in [qmin, qmax] (y = d·q), every assignment of
// codes that rounding x/d can produce is visited by sweeping 1/d from 0 to
// ∞: code j changes by one at 1/d = (k+½)/|x_j|. Keeping Σw·x·q and Σw·q²
// up to date makes each assignment's least-squares scale and error O(1), so
// the sweep finds the best assignment exactly (bestSymCont). The scale is
// then rounded to fp16 (its neighbours tried too) and the codes re-chosen
// for the rounded scale.

// bestSymCont returns the least-squares scale of the best assignment of
// codes in [qmin, qmax] to x (weights w, at most 32 values), over scales of
// the given sign. ev is scratch space. Wide code ranges (q5_0, q6_K) start
// the sweep where the largest value takes half the range: coarser scales
// only waste codes.
//
// When tops is not nil it receives the scales of the best local optima along
// the sweep (best first, 0 where there are fewer): a sub-block of a K format
// whose scale gets clipped by the super-block scale can fall back on them.
func bestSymCont(x, w []float32, qmin, qmax int, sign float64, ev []uint64, q []int, tops *topScales) (d, score float64) {
	// An event is packed in a uint64 that sorts by inverse scale t: the
	// float64 bits of t (positive) with the low 6 bits replaced by the value
	// index and the direction of its step.
	const low = 0x3f
	var amax float64
	for _, v := range x {
		amax = max(amax, math.Abs(float64(v)))
	}
	t0 := 0.0
	if lim := min(qmax, -qmin); lim >= 15 && amax > 0 {
		t0 = 0.5 * float64(lim) / amax
	}
	var a, b float64
	ev = ev[:0]
	for j, v := range x {
		y := sign * float64(v)
		q[j] = code(y, t0, qmin, qmax)
		a += float64(w[j]) * y * float64(q[j])
		b += float64(w[j]) * float64(q[j]*q[j])
		if y > 0 {
			for k := q[j]; k < qmax; k++ {
				ev = append(ev, math.Float64bits((float64(k)+0.5)/y)&^low|uint64(j)<<1)
			}
		} else if y < 0 {
			for k := -q[j]; k < -qmin; k++ {
				ev = append(ev, math.Float64bits((float64(k)+0.5)/-y)&^low|uint64(j)<<1|1)
			}
		}
	}
	slices.Sort(ev)
	prev, prevD, rising := 0.0, 0.0, false
	for i := -1; i < len(ev); i++ {
		if i >= 0 {
			e := ev[i]
			j := int(e&low) >> 1
			delta := 1 - 2*int(e&1)
			old := q[j]
			q[j] += delta
			a += float64(w[j]) * sign * float64(x[j]) * float64(delta)
			b += float64(w[j]) * float64(2*old*delta+1)
			if i+1 < len(ev) && ev[i+1]&^low == e&^low {
				continue
			}
		}
		if !(a > 0 && b > 0) {
			continue
		}
		sc := a * a / b
		// Ties (a constant block scores the same for every code) go to
		// the finer scale, which leaves the super-block scale room.
		if sc >= score*(1-1e-12) {
			score = max(sc, score)
			d = sign * a / b
		}
		if tops != nil {
			if sc < prev*(1-1e-12) && rising {
				tops.add(prevD, prev)
			}
			rising = sc >= prev
			prev, prevD = sc, sign*a/b
		}
	}
	if tops != nil && rising {
		tops.add(prevD, prev)
	}
	return d, score
}

// topScale is one local optimum of a scale sweep.
type topScale struct{ d, score float64 }

// topScales holds the best four local optima, best first.
type topScales [4]topScale

// add inserts (d, score) if it is among the four best.
func (t *topScales) add(d, score float64) {
	i := len(t)
	for i > 0 && t[i-1].score < score {
		i--
	}
	if i == len(t) {
		return
	}
	copy(t[i+1:], t[i:len(t)-1])
	t[i] = topScale{d, score}
}

// nearest returns the code in [qmin, qmax] closest to v/d (0 when d is 0).
func nearest(v, d float32, qmin, qmax int) int {
	if d == 0 {
		return 0
	}
	return code(float64(v), 1/float64(d), qmin, qmax)
}

// code returns v·id rounded to the nearest integer and clamped to
// [qmin, qmax] (NaN gives qmin).
func code(v, id float64, qmin, qmax int) int {
	r := math.Floor(v*id + 0.5)
	if !(r >= float64(qmin)) {
		return qmin
	}
	if r > float64(qmax) {
		return qmax
	}
	return int(r)
}

// symError chooses the nearest codes for scale d and returns the weighted
// squared error of the stored values d·q.
func symError(x, w []float32, d float32, qmin, qmax int, q []int) float64 {
	var e float64
	if d == 0 {
		for j, v := range x {
			q[j] = 0
			e += float64(w[j]) * float64(v) * float64(v)
		}
		return e
	}
	id := 1 / float64(d)
	for j, v := range x {
		q[j] = code(float64(v), id, qmin, qmax)
		r := float64(v) - float64(float32(q[j])*d)
		e += float64(w[j]) * r * r
	}
	return e
}

// f16Neighbours returns d rounded to fp16 and the two fp16 values around it.
func f16Neighbours(d float32) [3]float32 {
	h := Float32ToFloat16(d)
	return [3]float32{Float16ToFloat32(h), Float16ToFloat32(h + 1), Float16ToFloat32(h - 1)}
}

// bestSymScale quantizes one block with one fp16 scale: codes in [qmin, qmax]
// go to q, the returned scale is exactly representable in fp16.
func bestSymScale(x, w []float32, qmin, qmax int, q []int) float32 {
	var evBuf [32 * 32]uint64
	tmp := make([]int, len(x))
	var amax, smax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, smax = a, v
		}
	}
	cands := []float32{0, amax / float32(qmax), smax / float32(qmin)}
	if qmax <= 31 {
		for _, s := range []float64{1, -1} {
			if s < 0 && qmin == -qmax {
				break
			}
			if d, _ := bestSymCont(x, w, qmin, qmax, s, evBuf[:0], tmp, nil); d != 0 {
				cands = append(cands, float32(d))
			}
		}
	} else {
		// Wide code ranges: refine the max-based scale by least squares.
		d := amax / float32(qmax)
		for it := 0; it < 3 && d != 0; it++ {
			var a, b float64
			for j, v := range x {
				t := float64(nearest(v, d, qmin, qmax))
				a += float64(w[j]) * float64(v) * t
				b += float64(w[j]) * t * t
			}
			if b == 0 {
				break
			}
			d = float32(a / b)
			cands = append(cands, d)
		}
	}
	best, bestD := math.Inf(1), float32(0)
	for _, c := range cands {
		for _, d := range f16Neighbours(c) {
			if math.IsInf(float64(d), 0) || math.IsNaN(float64(d)) {
				continue
			}
			if e := symError(x, w, d, qmin, qmax, tmp); e < best {
				best, bestD = e, d
			}
		}
	}
	symError(x, w, bestD, qmin, qmax, q)
	return bestD
}

// lsAffine solves min Σ w·(x − d·q − m)² for d and m given the codes; with
// nonPosMin the minimum is constrained to m <= 0. ok is false when the codes
// do not determine a scale.
func lsAffine(x, w []float32, q []int, nonPosMin bool) (d, m float64, ok bool) {
	var sw, sq, sqq, sx, sxq float64
	for j, v := range x {
		wj, t := float64(w[j]), float64(q[j])
		sw += wj
		sq += wj * t
		sqq += wj * t * t
		sx += wj * float64(v)
		sxq += wj * float64(v) * t
	}
	det := sw*sqq - sq*sq
	if det <= 0 || sqq == 0 {
		return 0, 0, false
	}
	d = (sw*sxq - sq*sx) / det
	m = (sqq*sx - sq*sxq) / det
	if nonPosMin && m > 0 {
		m = 0
		d = sxq / sqq
	}
	return d, m, d > 0
}

// affineCodes chooses the nearest codes in [0, nmax] for y = d·q + m and
// returns the weighted squared error, computing the stored values in float32
// as the dequantizers do.
func affineCodes(x, w []float32, d, m float32, nmax int, q []int) float64 {
	var e float64
	id := 0.0
	if d != 0 {
		id = 1 / float64(d)
	}
	for j, v := range x {
		q[j] = code(float64(v-m), id, 0, nmax)
		r := float64(v) - float64(float32(q[j])*d+m)
		e += float64(w[j]) * r * r
	}
	return e
}

// affineCodesK is affineCodes for the K formats' y = dl·q − ml.
func affineCodesK(x, w []float32, dl, ml float32, nmax int, q []int) float64 {
	var e float64
	id := 0.0
	if dl != 0 {
		id = 1 / float64(dl)
	}
	for j, v := range x {
		q[j] = code(float64(v+ml), id, 0, nmax)
		r := float64(v) - float64(float32(q[j])*dl-ml)
		e += float64(w[j]) * r * r
	}
	return e
}

// bestAffineCont searches a continuous (d, m) for codes in [0, nmax]:
// inverse scales around nmax/(max−min) seed code assignments, each refined by
// alternating least squares and nearest codes. With nonPosMin the minimum
// stays <= 0 (the K formats store −m as an unsigned multiple of dmin).
func bestAffineCont(x, w []float32, nmax int, nonPosMin bool, q []int) (bd, bm float64) {
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	if nonPosMin {
		lo = min(lo, 0)
	}
	if hi == lo {
		return 0, float64(lo)
	}
	best := math.Inf(1)
	try := func(d, m float64) {
		if !(d > 0) || math.IsInf(d, 0) {
			return
		}
		e := affineCodes(x, w, float32(d), float32(m), nmax, q)
		if e < best {
			best, bd, bm = e, d, m
		}
	}
	span := float64(hi) - float64(lo)
	try(span/float64(nmax), float64(lo))
	// Inverse scales that map the range onto about nmax codes, then
	// larger ones that clip the extremes (an outlier of low importance
	// may be worth sacrificing).
	const steps = 30
	var its []float64
	for s := 0; s <= steps; s++ {
		its = append(its, (float64(nmax)-1+1.5*float64(s)/steps)/span)
	}
	for _, f := range []float64{1.25, 1.5, 2, 3} {
		its = append(its, float64(nmax)*f/span)
	}
	// Minimum seeds: the lowest value, raised ones (clipping low outliers)
	// and, for the legacy formats, phases of the code grid against the
	// values (with an outlier pinning the scale, where the grid falls on
	// the bulk matters).
	type seed struct{ lift, phase float64 }
	seeds := []seed{{0, 0}}
	if !nonPosMin {
		seeds = append(seeds, seed{0.1, 0}, seed{0.2, 0}, seed{0, 1.0 / 3}, seed{0, 2.0 / 3})
	}
	for k := range len(its) * len(seeds) {
		it, sd := its[k%len(its)], seeds[k/len(its)]
		m0 := float64(lo) + sd.lift*span - sd.phase/it
		for j, v := range x {
			q[j] = code(float64(v)-m0, it, 0, nmax)
		}
		for r := 0; r < 3; r++ {
			d, m, ok := lsAffine(x, w, q, nonPosMin)
			if !ok {
				break
			}
			try(d, m)
			affineCodes(x, w, float32(d), float32(m), nmax, q)
		}
	}
	return bd, bm
}

// bestAffineScale quantizes one block with an fp16 scale and minimum (y =
// d·q + m, codes in [0, nmax]); d and m returned are fp16 values.
func bestAffineScale(x, w []float32, nmax int, nonPosMin bool, q []int) (float32, float32) {
	tmp := make([]int, len(x))
	d0, m0 := bestAffineCont(x, w, nmax, nonPosMin, tmp)
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	type dm struct{ d, m float32 }
	cands := []dm{{float32(d0), float32(m0)}, {(hi - lo) / float32(nmax), lo}, {0, lo}, {0, (hi + lo) / 2}}
	best, bd, bm := math.Inf(1), float32(0), float32(0)
	for _, c := range cands {
		for _, d := range f16Neighbours(c.d) {
			if d < 0 || math.IsInf(float64(d), 0) || math.IsNaN(float64(d)) {
				continue
			}
			for _, m := range f16Neighbours(c.m) {
				if math.IsInf(float64(m), 0) || math.IsNaN(float64(m)) {
					continue
				}
				if e := affineCodes(x, w, d, m, nmax, tmp); e < best {
					best, bd, bm = e, d, m
				}
			}
		}
	}
	affineCodes(x, w, bd, bm, nmax, q)
	return bd, bm
}

// flushTiny copies src to dst with values below 1e-30 in magnitude set to
// zero: no fp16 scale can make them matter, and arithmetic on subnormal
// floats is a hundred times slower on common CPUs.
func flushTiny(dst, src []float32) []float32 {
	dst = dst[:len(src)]
	for i, v := range src {
		if v > -1e-30 && v < 1e-30 {
			v = 0
		}
		dst[i] = v
	}
	return dst
}
