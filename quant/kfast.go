package quant

import "math"

// Fast searches, the default (the exhaustive ones of search.go and
// kquantize.go remain as references for tests and benchmarks). Like those
// they minimise the weighted squared error of the stored values, but they
// visit a fixed, small number of candidates:
//
//  1. every sub-block gets a continuous scale (and minimum) from about ten
//     (with an importance matrix, about thirty) inverse scales around the
//     range-based one, each scored in O(1) by its least-squares fit
//     (closed-form error), the best refined by alternating least squares and
//     nearest codes (fastAffine, fastSymSub);
//  2. K formats: the super-block scales map the largest sub-block scale onto
//     the integer range (and, for the signed formats, clipping alternatives
//     ranked by an error model), and the integer sub-block scales are
//     rounded against them; a short coordinate descent then tries the
//     integer sub-block scales (and minimums) next to the current ones with
//     the codes re-chosen, and the fp16 super-block scales are re-fitted by
//     least squares for the chosen integers; the best super-block seen is
//     kept;
//  3. legacy formats (q4_0, q5_0, q4_1, q5_1): the fit and the range-based
//     scale are rounded to fp16 with their neighbours and the best kept
//     (fastSymScale, fastAffineScale).
//
// All inner loops run over fixed-size arrays without allocation, on float32
// with two accumulators and integer clamps (conditional moves: rounding
// outcomes are unpredictable branches).

// effort sets how many candidates the fast search visits. With an
// importance matrix the search does more: outliers of high importance make
// clipping choices matter more.
type effort struct {
	affineSteps  int  // inverse scales fastAffineSub scores
	affineRounds int  // descent rounds of quantizeKAffineFast
	affineReach  int  // how far from the current integers the descent looks
	affineClip   int  // clipping inverse scales fastAffineSub scores (at most 16)
	affinePhases int  // grid shifts tried with a free minimum (at most 2)
	affineTop    int  // candidates fastAffineSub refines (at most 8; 1: the best)
	affineProbe  int  // neighbours the descent evaluates in full (0: all)
	symSteps     int  // inverse scales either side of the qmin-end one (fastSymSub)
	symStepsMax  int  // the same for the qmax end
	symFull      int  // candidate super-block scales descended from (quantizeKSymFast)
	symNeigh     int  // fp16 neighbours on either side tried last
	unit         bool // all weights are 1
}

var (
	plainEffort   = effort{affineSteps: 10, affineRounds: 2, affineReach: 1, affineTop: 1, affineProbe: 3, symSteps: 2, symStepsMax: 1, symFull: 1, symNeigh: 0, unit: true}
	imatrixEffort = effort{affineSteps: 20, affineRounds: 3, affineReach: 1, affineClip: 8, affinePhases: 2, affineTop: 6, symSteps: 6, symStepsMax: 6, symFull: 3, symNeigh: 2}
)

// effortFor returns the search effort for a row with or without an
// importance matrix.
func effortFor(imatrix []float32) *effort {
	if imatrix != nil {
		return &imatrixEffort
	}
	return &plainEffort
}

// affCand is a candidate (d, m) of fastAffineSub and its error.
type affCand struct{ d, m, e float64 }

// fastAffineSub returns a continuous scale d >= 0 and offset mn >= 0 for
// y = d·q − mn with codes q in [0, nmax] that fit x (weights w) well.
func fastAffineSub(x, w []float32, nmax int, ef *effort) (d, mn float64) {
	d, m := fastAffine(x, w, nmax, true, ef)
	return d, -m
}

// fastAffine returns a continuous scale d >= 0 and minimum m for y = d·q + m
// with codes q in [0, nmax] that fit x (weights w) well; with nonPosMin the
// minimum stays <= 0 (the K formats store −m as an unsigned multiple of
// dmin).
func fastAffine(x, w []float32, nmax int, nonPosMin bool, ef *effort) (d, m float64) {
	lo, hi := x[0], x[0]
	var sw, sx, sxx float64
	for j, v := range x {
		lo, hi = min(lo, v), max(hi, v)
		wv := float64(w[j]) * float64(v)
		sw += float64(w[j])
		sx += wv
		sxx += wv * float64(v)
	}
	if nonPosMin {
		lo = min(lo, 0)
	}
	if hi <= lo {
		return 0, float64(lo)
	}
	if sw == 0 {
		return float64(hi-lo) / float64(nmax), float64(lo)
	}
	span := hi - lo
	fmax, n := float32(nmax), int32(nmax)
	w = w[:len(x)]
	// fit returns the least-squares (d, m <= 0) for codes with sums
	// Σw·l, Σw·l², Σw·x·l, and its error in closed form.
	fit := func(sl, sll, sxl float64) (affCand, bool) {
		det := sw*sll - sl*sl
		var d, m float64
		// All codes equal (or nearly, by weight: the float32 sums are
		// good to about 1e-7): the minimum is not determined, so it
		// stays 0.
		singular := !(det > 1e-5*sw*sll)
		if !singular {
			d = (sw*sxl - sl*sx) / det
			m = (sll*sx - sl*sxl) / det
		}
		if singular && !nonPosMin {
			return affCand{}, false
		}
		if singular || (nonPosMin && m > 0) {
			if sll == 0 {
				return affCand{}, false
			}
			m, d = 0, sxl/sll
		}
		if !(d > 0) {
			return affCand{}, false
		}
		return affCand{d, m, sxx - 2*d*sxl - 2*m*sx + d*d*sll + 2*d*m*sl + m*m*sw}, true
	}
	// Errors closer than tie are rounding noise of the float32 sums: among
	// them the finer scale wins (a constant sub-block fits every code
	// exactly, and the finest fit leaves the super-block scale room).
	tie := 1e-6 * sxx
	better := func(a, b affCand) bool { return a.e < b.e-tie || (a.e <= b.e+tie && a.d < b.d) }
	best := affCand{float64(span) / float64(nmax), float64(lo), math.Inf(1)}
	// The runners-up are kept for the refinement below.
	var tops [8]affCand
	ntop := min(max(ef.affineTop, 1), len(tops))
	for i := range tops {
		tops[i].e = math.Inf(1)
	}
	// Few codes (q2_K) need fewer steps.
	nsteps := min(ef.affineSteps, 2*nmax)
	steps := float32(nsteps)
	// Candidates: nmax−1 .. nmax+1 codes over the range; when the minimum
	// is free, the same with the code grid shifted down by fractions of a
	// code (with an outlier pinning the scale, where the grid falls on the
	// bulk matters); then ranges clipped by factors of 1.25, 1.5, 1.75, …
	// at the top (and, when the minimum is free, at both ends): an outlier
	// of low importance may be worth sacrificing.
	type seed struct{ iscale, lo float32 }
	var seeds [128]seed
	ns := 0
	phases := 0
	if !nonPosMin {
		phases = ef.affinePhases
	}
	for ph := 0; ph <= phases; ph++ {
		for is := 0; is <= nsteps; is++ {
			it := (fmax - 1 + 2*float32(is)/steps) / span
			seeds[ns] = seed{it, lo - float32(ph)/float32(phases+1)/it}
			ns++
		}
	}
	for k := 1; k <= ef.affineClip; k++ {
		c := 1 + 0.25*float32(k)
		seeds[ns] = seed{fmax * c / span, lo}
		ns++
		if !nonPosMin {
			seeds[ns] = seed{fmax * c / span, lo + 0.5*(span-span/c)}
			ns++
		}
	}
	for _, sd := range seeds[:ns] {
		iscale, lo := sd.iscale, sd.lo
		var sl0, sll0, sxl0, sl1, sll1, sxl1 float32
		if ef.unit {
			for j := 0; j+1 < len(x); j += 2 {
				v0, v1 := x[j], x[j+1]
				l0, l1 := affCode((v0-lo)*iscale, n), affCode((v1-lo)*iscale, n)
				sl0 += l0
				sl1 += l1
				sll0 += l0 * l0
				sll1 += l1 * l1
				sxl0 += l0 * v0
				sxl1 += l1 * v1
			}
		} else {
			for j := 0; j+1 < len(x); j += 2 {
				v0, v1 := x[j], x[j+1]
				l0, l1 := affCode((v0-lo)*iscale, n), affCode((v1-lo)*iscale, n)
				wl0, wl1 := w[j]*l0, w[j+1]*l1
				sl0 += wl0
				sl1 += wl1
				sll0 += wl0 * l0
				sll1 += wl1 * l1
				sxl0 += wl0 * v0
				sxl1 += wl1 * v1
			}
		}
		c, ok := fit(float64(sl0)+float64(sl1), float64(sll0)+float64(sll1), float64(sxl0)+float64(sxl1))
		if !ok {
			continue
		}
		if better(c, best) {
			best = c
		}
		if k := ntop - 1; ntop > 1 && c.e < tops[k].e {
			for k > 0 && c.e < tops[k-1].e {
				tops[k] = tops[k-1]
				k--
			}
			tops[k] = c
		}
	}
	if best.e == math.Inf(1) {
		return best.d, best.m
	}
	if ntop == 1 {
		tops[0] = best
	}
	// Alternate nearest codes and least squares from the best candidates.
	for _, c := range tops[:ntop] {
		if c.e == math.Inf(1) {
			break
		}
		for round := 0; round < 2; round++ {
			id, m := float32(1/c.d), float32(c.m)
			var sl, sll, sxl float64
			for j, v := range x {
				l := affCode((v-m)*id, n)
				wl := float64(w[j]) * float64(l)
				sl += wl
				sll += wl * float64(l)
				sxl += wl * float64(v)
			}
			nc, ok := fit(sl, sll, sxl)
			if !ok || !better(nc, c) {
				break
			}
			c = nc
			if better(c, best) {
				best = c
			}
		}
	}
	return best.d, best.m
}

// affineErrK chooses the nearest codes in [0, nmax] for y = dl·q − ml and
// returns the weighted squared error of the stored values, stopping early
// (with a value >= limit) once it exceeds limit. q may be nil.
func affineErrK(x, w []float32, unit bool, dl, ml float32, nmax int, q []int, limit float64) float64 {
	var id float32
	if dl != 0 {
		id = 1 / dl
	}
	n := int32(nmax)
	w = w[:len(x)]
	if q == nil {
		// Two accumulators halve the dependency chain.
		var e0, e1 float32
		lim := float32(min(limit, math.MaxFloat32))
		if unit {
			for c := 0; c+8 <= len(x); c += 8 {
				xc := x[c : c+8 : c+8]
				for j := 0; j < 8; j += 2 {
					l0, l1 := affCode((xc[j]+ml)*id, n), affCode((xc[j+1]+ml)*id, n)
					r0, r1 := xc[j]-(dl*l0-ml), xc[j+1]-(dl*l1-ml)
					e0 += r0 * r0
					e1 += r1 * r1
				}
				if e0+e1 >= lim {
					break
				}
			}
			return float64(e0 + e1)
		}
		for c := 0; c+8 <= len(x); c += 8 {
			xc, wc := x[c:c+8:c+8], w[c:c+8:c+8]
			for j := 0; j < 8; j += 2 {
				l0, l1 := affCode((xc[j]+ml)*id, n), affCode((xc[j+1]+ml)*id, n)
				r0, r1 := xc[j]-(dl*l0-ml), xc[j+1]-(dl*l1-ml)
				e0 += wc[j] * r0 * r0
				e1 += wc[j+1] * r1 * r1
			}
			if e0+e1 >= lim {
				break
			}
		}
		return float64(e0 + e1)
	}
	q = q[:len(x)]
	var e float64
	for j, v := range x {
		l := affCode((v+ml)*id, n)
		r := v - (dl*l - ml)
		e += float64(w[j] * r * r)
		q[j] = int(l)
	}
	return e
}

// quantizeKAffineFast is the fast counterpart of quantizeKAffine.
func quantizeKAffineFast(x, w []float32, sub, nmax, smax int, ef *effort, r *kAffine) {
	nsub := 256 / sub
	var ds, ms [16]float64
	var maxD, maxM float64
	for j := 0; j < nsub; j++ {
		ds[j], ms[j] = fastAffineSub(x[j*sub:(j+1)*sub], w[j*sub:(j+1)*sub], nmax, ef)
		maxD, maxM = max(maxD, ds[j]), max(maxM, ms[j])
	}
	best := math.Inf(1)
	var cur kAffine
	cur.d = superScale(maxD, smax)
	cur.dmin = superScale(maxM, smax)
	if math.IsInf(float64(cur.d), 0) || math.IsInf(float64(cur.dmin), 0) {
		*r = kAffine{}
		return
	}
	for j := 0; j < nsub; j++ {
		cur.sc[j] = roundRatio(ds[j], cur.d, 0, smax)
		cur.m[j] = roundRatio(ms[j], cur.dmin, 0, smax)
	}
	// Per sub-block Σw, Σw·x, Σw·x² for the error model below.
	var subW, subX, subXX [16]float64
	for i := 0; i < 256; i++ {
		wi, xi := float64(w[i]), float64(x[i])
		subW[i/sub] += wi
		subX[i/sub] += wi * xi
		subXX[i/sub] += wi * xi * xi
	}
	type probe struct {
		s, m int
		e    float64
	}
	for round := 0; round < ef.affineRounds; round++ {
		var total float64
		for j := 0; j < nsub; j++ {
			xs, ws, qs := x[j*sub:(j+1)*sub], w[j*sub:(j+1)*sub], cur.q[j*sub:(j+1)*sub]
			s0, m0 := cur.sc[j], cur.m[j]
			be := affineErrK(xs, ws, ef.unit, cur.d*float32(s0), cur.dmin*float32(m0), nmax, qs, 0)
			bs, bm := s0, m0
			// The neighbours are ranked by their error with the current
			// codes kept (closed form, an upper bound of the error with
			// the codes re-chosen); the best ef.affineProbe get the full
			// evaluation.
			var sq, sqq, sxq float64
			for i, q := range qs {
				wq := float64(ws[i]) * float64(q)
				sq += wq
				sqq += wq * float64(q)
				sxq += wq * float64(xs[i])
			}
			var probes [25]probe
			np := 0
			for s := max(0, s0-ef.affineReach); s <= min(smax, s0+ef.affineReach); s++ {
				for m := max(0, m0-ef.affineReach); m <= min(smax, m0+ef.affineReach); m++ {
					if s == s0 && m == m0 {
						continue
					}
					dl, ml := float64(cur.d*float32(s)), float64(cur.dmin*float32(m))
					e := subXX[j] - 2*dl*sxq + 2*ml*subX[j] + dl*dl*sqq - 2*dl*ml*sq + ml*ml*subW[j]
					k := np
					for k > 0 && e < probes[k-1].e {
						probes[k] = probes[k-1]
						k--
					}
					probes[k] = probe{s, m, e}
					np++
				}
			}
			if ef.affineProbe > 0 {
				np = min(np, ef.affineProbe)
			}
			for _, p := range probes[:np] {
				if e := affineErrK(xs, ws, ef.unit, cur.d*float32(p.s), cur.dmin*float32(p.m), nmax, nil, be); e < be {
					be, bs, bm = e, p.s, p.m
				}
			}
			cur.sc[j], cur.m[j] = bs, bm
			if bs != s0 || bm != m0 {
				be = affineErrK(xs, ws, ef.unit, cur.d*float32(bs), cur.dmin*float32(bm), nmax, qs, 0)
			}
			total += be
		}
		if total < best {
			best = total
			*r = cur
		} else if round > 0 {
			break
		}
		// Least-squares super-block scales for the chosen integers:
		// x ≈ d·a − dmin·b with a = sc·q, b = m.
		var saa, sab, sbb, sxa, sxb float64
		for j := 0; j < nsub; j++ {
			var sa, swq, swqq, sxq, swx float64
			for i := j * sub; i < (j+1)*sub; i++ {
				wi, qi := float64(w[i]), float64(cur.q[i])
				sa += wi
				swq += wi * qi
				swqq += wi * qi * qi
				sxq += wi * float64(x[i]) * qi
				swx += wi * float64(x[i])
			}
			s, m := float64(cur.sc[j]), float64(cur.m[j])
			saa += s * s * swqq
			sab += s * m * swq
			sbb += m * m * sa
			sxa += s * sxq
			sxb += m * swx
		}
		det := saa*sbb - sab*sab
		var d, dmin float64
		switch {
		case det > 0:
			d = (sxa*sbb - sxb*sab) / det
			dmin = (sxa*sab - sxb*saa) / det
		case saa > 0 && sbb == 0:
			d, dmin = sxa/saa, float64(cur.dmin)
		default:
			d, dmin = -1, -1
		}
		if !(d > 0) || !(dmin >= 0) {
			break
		}
		nd, nm := roundF16(float32(d)), roundF16(float32(dmin))
		if math.IsInf(float64(nd), 0) || math.IsInf(float64(nm), 0) || (nd == cur.d && nm == cur.dmin) {
			break
		}
		cur.d, cur.dmin = nd, nm
	}
	if best == math.Inf(1) || math.IsNaN(best) {
		*r = kAffine{} // nothing representable: all zero
	}
}

// symStarts is the number of integers at either end of the sub-block scale
// range that quantizeKSymFast maps the largest sub-block scale onto.
const symStarts = 6

// fastSymSub returns a continuous signed scale d for y = d·q with codes q in
// [qmin, qmax] that fits x (weights w) well: the value of largest magnitude
// is mapped near either end of the code range, each candidate scored by its
// least-squares scale, the best refined by alternating least squares and
// nearest codes.
func fastSymSub(x, w []float32, qmin, qmax int, ef *effort) float64 {
	var amax, vmax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, vmax = a, v
		}
	}
	if amax == 0 {
		return 0
	}
	w = w[:len(x)]
	fmin, fmax := float32(qmin), float32(qmax)
	best, bd := 0.0, 0.0
	score := func(sxl, sll float64) {
		if !(sll > 0) {
			return
		}
		// Ties (a constant sub-block fits every code exactly) go to the
		// finer scale, as every sub-block then agrees.
		// (within the rounding noise of the float32 sums).
		if sc, d := sxl*sxl/sll, sxl/sll; sc > best*(1+1e-6) || (sc >= best*(1-1e-6) && math.Abs(d) < math.Abs(bd)) {
			best, bd = max(best, sc), d
		}
	}
	// Steps of 2.5% of the range; the end with more codes (qmin) gets
	// more of them.
	step := -0.025 * fmin
	for e, end := range [2]float32{fmin, fmax} {
		steps := ef.symSteps
		if e == 1 {
			steps = ef.symStepsMax
		}
		for is := -steps; is <= steps; is++ {
			// (end ± small)/vmax: vmax maps near code end.
			id := (end + step*float32(is)*sign32(end)) / vmax
			var sxl0, sll0, sxl1, sll1 float32
			if ef.unit {
				for j := 0; j+1 < len(x); j += 2 {
					l0, l1 := symCode(x[j]*id, fmin, fmax), symCode(x[j+1]*id, fmin, fmax)
					sxl0 += l0 * x[j]
					sxl1 += l1 * x[j+1]
					sll0 += l0 * l0
					sll1 += l1 * l1
				}
			} else {
				for j := 0; j+1 < len(x); j += 2 {
					l0, l1 := symCode(x[j]*id, fmin, fmax), symCode(x[j+1]*id, fmin, fmax)
					wl0, wl1 := w[j]*l0, w[j+1]*l1
					sxl0 += wl0 * x[j]
					sxl1 += wl1 * x[j+1]
					sll0 += wl0 * l0
					sll1 += wl1 * l1
				}
			}
			score(float64(sxl0)+float64(sxl1), float64(sll0)+float64(sll1))
		}
	}
	for round := 0; round < 2 && bd != 0; round++ {
		id := float32(1 / bd)
		var sxl, sll float64
		for j, v := range x {
			l := symCode(v*id, fmin, fmax)
			sxl += float64(w[j] * l * v)
			sll += float64(w[j] * l * l)
		}
		prev := best
		score(sxl, sll)
		if best <= prev {
			break
		}
	}
	return bd
}

// symCode returns t rounded to the nearest integer (halves away from −∞)
// and clamped to [fmin, fmax], fmin <= 0. The clamps are done on integers
// (conditional moves: rounding outcomes are not predictable branches).
func symCode(t, fmin, fmax float32) float32 {
	if t > 1e9 { // rare: keeps the conversion in range
		t = 1e9
	}
	i := int32(t - fmin + 0.5) // out of range below: 0 or minInt32
	i = min(max(i, 0), int32(fmax-fmin))
	return float32(i) + fmin
}

// affCode returns t rounded to the nearest integer and clamped to [0, nmax]
// (see symCode).
func affCode(t float32, nmax int32) float32 {
	if t > 1e9 {
		t = 1e9
	}
	return float32(min(max(int32(t+0.5), 0), nmax))
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func sign32(v float32) float32 {
	if v < 0 {
		return -1
	}
	return 1
}

// symErrK chooses the nearest codes in [qmin, qmax] for y = dl·q and returns
// the weighted squared error of the stored values, stopping early (with a
// value >= limit) once it exceeds limit. q may be nil.
func symErrK(x, w []float32, unit bool, dl float32, qmin, qmax int, q []int, limit float64) float64 {
	var id float32
	if dl != 0 {
		id = 1 / dl
	}
	fmin, fmax := float32(qmin), float32(qmax)
	w = w[:len(x)]
	if q == nil {
		var e0, e1 float32
		lim := float32(min(limit, math.MaxFloat32))
		if unit {
			for c := 0; c+8 <= len(x); c += 8 {
				xc := x[c : c+8 : c+8]
				for j := 0; j < 8; j += 2 {
					r0 := xc[j] - dl*symCode(xc[j]*id, fmin, fmax)
					r1 := xc[j+1] - dl*symCode(xc[j+1]*id, fmin, fmax)
					e0 += r0 * r0
					e1 += r1 * r1
				}
				if e0+e1 >= lim {
					break
				}
			}
			return float64(e0 + e1)
		}
		for c := 0; c+8 <= len(x); c += 8 {
			xc, wc := x[c:c+8:c+8], w[c:c+8:c+8]
			for j := 0; j < 8; j += 2 {
				r0 := xc[j] - dl*symCode(xc[j]*id, fmin, fmax)
				r1 := xc[j+1] - dl*symCode(xc[j+1]*id, fmin, fmax)
				e0 += wc[j] * r0 * r0
				e1 += wc[j+1] * r1 * r1
			}
			if e0+e1 >= lim {
				break
			}
		}
		return float64(e0 + e1)
	}
	q = q[:len(x)]
	var e float64
	for j, v := range x {
		l := symCode(v*id, fmin, fmax)
		r := v - dl*l
		e += float64(w[j] * r * r)
		q[j] = int(l)
	}
	return e
}

// quantizeKSymFast is the fast counterpart of quantizeKSym.
func quantizeKSymFast(x, w []float32, qmin, qmax, smin, smax int, ef *effort, r *kSym) {
	var ds [16]float64
	var amax, smaxD float64
	for j := 0; j < 16; j++ {
		ds[j] = fastSymSub(x[16*j:16*j+16], w[16*j:16*j+16], qmin, qmax, ef)
		if math.Abs(ds[j]) > amax {
			amax, smaxD = math.Abs(ds[j]), ds[j]
		}
	}
	*r = kSym{}
	if amax == 0 {
		return
	}
	var cur kSym
	best := math.Inf(1)
	// descend sets every sub-block's integer scale for super-block scale d
	// to the best of the integers next to its own continuous scale (and,
	// unless init, next to its current one) and returns the total error,
	// stopping early past limit.
	descend := func(d float32, init bool, limit float64) float64 {
		cur.d = d
		var total float64
		for j := 0; j < 16; j++ {
			xs, ws := x[16*j:16*j+16], w[16*j:16*j+16]
			c := roundRatio(ds[j], d, smin, smax)
			lo, hi := max(smin, c-1), min(smax, c+1)
			if !init {
				lo, hi = min(lo, max(smin, cur.sc[j]-1)), max(hi, min(smax, cur.sc[j]+1))
			}
			// The likely best first, so that the others stop early.
			first := c
			if !init {
				first = min(max(cur.sc[j], lo), hi)
			}
			be, bs := symErrK(xs, ws, ef.unit, d*float32(first), qmin, qmax, nil, math.Inf(1)), first
			for s := lo; s <= hi; s++ {
				if s == first {
					continue
				}
				if e := symErrK(xs, ws, ef.unit, d*float32(s), qmin, qmax, nil, be); e < be {
					be, bs = e, s
				}
			}
			cur.sc[j] = bs
			total += be // exact: the best one ran to the end
			if total >= limit {
				return total
			}
		}
		return total
	}
	// codes sets cur.q for cur.d and cur.sc.
	codes := func() {
		for j := 0; j < 16; j++ {
			symErrK(x[16*j:16*j+16], w[16*j:16*j+16], ef.unit, cur.d*float32(cur.sc[j]), qmin, qmax, cur.q[16*j:16*j+16], 0)
		}
	}
	keep := func(total float64) bool {
		if total < best {
			best = total
			codes()
			*r = cur
			return true
		}
		return false
	}
	// refit re-fits the super-block scale by least squares for the chosen
	// integers and codes, while that helps.
	refit := func() {
		for round := 0; round < 2; round++ {
			var saa, sxa float64
			for i := 0; i < 256; i++ {
				a := float64(cur.sc[i/16] * cur.q[i])
				saa += float64(w[i]) * a * a
				sxa += float64(w[i]) * float64(x[i]) * a
			}
			if saa == 0 {
				return
			}
			nd := roundF16(float32(sxa / saa))
			if nd == cur.d || nd == 0 || math.IsInf(float64(nd), 0) || !keep(descend(nd, false, best)) {
				return
			}
		}
	}
	// Candidate super-block scales: the largest sub-block scale mapped onto
	// the integers at either end of the range, and onto smaller ones by
	// factors of 2^(−1/3) (clipping it in favour of the others). They are
	// ranked by a model that keeps every sub-block's codes at those of its
	// continuous optimum (an upper bound of the error with the codes
	// re-chosen, O(1) per sub-block and integer), and the best few get the
	// full descent.
	var cands [2*symStarts + 8]float32
	nc := 0
	addCand := func(d0 float64) {
		if d := roundF16(float32(d0)); d != 0 && !math.IsInf(float64(d), 0) {
			cands[nc] = d
			nc++
		}
	}
	for k := 0; k < symStarts; k++ {
		addCand(smaxD / float64(smin+k))
		addCand(smaxD / float64(smax-k))
	}
	for k := 1; k <= 4; k++ {
		f := math.Pow(2, -float64(k)/3)
		addCand(smaxD * f / float64(smin))
		addCand(smaxD * f / float64(smax))
	}
	var e0, sxq, sqq [16]float64
	for j := 0; j < 16; j++ {
		xs, ws := x[16*j:16*j+16], w[16*j:16*j+16]
		var qs [16]int
		symErrK(xs, ws, ef.unit, float32(ds[j]), qmin, qmax, qs[:], 0)
		for i, v := range xs {
			wi, qi := float64(ws[i]), float64(qs[i])
			e0[j] += wi * float64(v) * float64(v)
			sxq[j] += wi * float64(v) * qi
			sqq[j] += wi * qi * qi
		}
	}
	var model [len(cands)]float64
	for c := 0; c < nc; c++ {
		d := float64(cands[c])
		for j := 0; j < 16; j++ {
			k := roundRatio(ds[j], cands[c], smin, smax)
			be := math.Inf(1)
			for s := max(smin, k-1); s <= min(smax, k+1); s++ {
				dl := d * float64(s)
				be = min(be, e0[j]-2*dl*sxq[j]+dl*dl*sqq[j])
			}
			model[c] += be
		}
	}
	for range ef.symFull {
		bc := -1
		for c := 0; c < nc; c++ {
			if model[c] < math.Inf(1) && (bc < 0 || model[c] < model[bc]) {
				bc = c
			}
		}
		if bc < 0 {
			break
		}
		model[bc] = math.Inf(1)
		if keep(descend(cands[bc], true, best)) {
			refit()
		}
	}
	if best == math.Inf(1) {
		*r = kSym{} // all zero
		return
	}
	// Finally the fp16 neighbours of the best super-block scale.
	h := Float32ToFloat16(r.d)
	for k := -ef.symNeigh; k <= ef.symNeigh; k++ {
		if k == 0 {
			continue
		}
		cur = *r
		if d := Float16ToFloat32(h + uint16(k)); !math.IsInf(float64(d), 0) && !math.IsNaN(float64(d)) && d != 0 {
			keep(descend(d, false, best))
		}
	}
}

// fastAffineScale is the fast counterpart of bestAffineScale for the legacy
// formats (y = d·q + m, fp16 d and m, codes in [0, nmax], q gets the codes):
// the continuous fit of fastAffine and the range-based one, each with its
// fp16 neighbours.
func fastAffineScale(x, w []float32, nmax int, ef *effort, q []int) (float32, float32) {
	d0, m0 := fastAffine(x, w, nmax, false, ef)
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	type dm struct{ d, m float32 }
	cands := [...]dm{{float32(d0), float32(m0)}, {(hi - lo) / float32(nmax), lo}, {0, lo}, {0, (hi + lo) / 2}}
	best, bd, bm := math.Inf(1), float32(0), float32(0)
	for i, c := range cands {
		if i > 0 && c.d == cands[0].d && c.m == cands[0].m {
			continue
		}
		for _, d := range f16Neighbours(c.d) {
			if d < 0 || math.IsInf(float64(d), 0) || math.IsNaN(float64(d)) {
				continue
			}
			for _, m := range f16Neighbours(c.m) {
				if math.IsInf(float64(m), 0) || math.IsNaN(float64(m)) {
					continue
				}
				if e := affineErrK(x, w, ef.unit, d, -m, nmax, nil, best); e < best {
					best, bd, bm = e, d, m
				}
			}
		}
	}
	affineErrK(x, w, ef.unit, bd, -bm, nmax, q, 0)
	return bd, bm
}

// legacySymEffort is the search of fastSymScale: nine inverse scales either
// side of the max-based one at both ends of the code range.
var legacySymEffort = effort{symSteps: 9, symStepsMax: 9}

// fastSymScale is the fast counterpart of bestSymScale for q4_0 and q5_0
// (one fp16 scale, codes in [qmin, qmax] go to q): the continuous fit of
// fastSymSub and the max-based scales, each with its fp16 neighbours.
func fastSymScale(x, w []float32, qmin, qmax int, unit bool, q []int) float32 {
	var amax, smax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, smax = a, v
		}
	}
	ef := legacySymEffort
	ef.unit = unit
	cands := [...]float32{float32(fastSymSub(x, w, qmin, qmax, &ef)), amax / float32(qmax), smax / float32(qmin)}
	// d = 0 stores zeros: the bound every candidate must beat.
	best, bestD := 0.0, float32(0)
	for j, v := range x {
		best += float64(w[j] * v * v)
	}
	for i, c := range cands {
		if c == 0 || (i > 0 && c == cands[0]) {
			continue
		}
		for _, d := range f16Neighbours(c) {
			if d == 0 || math.IsInf(float64(d), 0) || math.IsNaN(float64(d)) {
				continue
			}
			if e := symErrK(x, w, unit, d, qmin, qmax, nil, best); e < best {
				best, bestD = e, d
			}
		}
	}
	symErrK(x, w, unit, bestD, qmin, qmax, q, 0)
	return bestD
}
