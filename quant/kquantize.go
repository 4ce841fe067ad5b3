package quant

import "math"

// K-format quantizers. Each sub-block first gets its own best continuous
// scale (and minimum); the super-block scales are then chosen, the integer
// sub-block scales rounded against them, and the whole super-block refined
// by coordinate descent: every sub-block tries the integer scales (and
// minimums) around its current ones with the codes re-chosen each time,
// then the fp16 super-block scales are re-fitted by least squares for the
// chosen integers. The best super-block seen (by weighted squared error of
// the stored values) is kept.

// kAffine holds the result of quantizeKAffine.
type kAffine struct {
	d, dmin float32 // fp16 values
	sc, m   [16]int
	q       [256]int
}

// quantizeKAffine quantizes 256 values in sub-blocks of sub values as
// y = (d·sc)·q − dmin·m with codes in [0, nmax] and sc, m in [0, smax].
func quantizeKAffine(x, w []float32, sub, nmax, smax int, r *kAffine) {
	nsub := 256 / sub
	var ds, ms [16]float64
	var tmp [256]int
	var maxD, maxM float64
	for j := 0; j < nsub; j++ {
		d, m := bestAffineCont(x[j*sub:(j+1)*sub], w[j*sub:(j+1)*sub], nmax, true, tmp[:sub])
		ds[j], ms[j] = d, -m
		maxD, maxM = max(maxD, d), max(maxM, -m)
	}
	best := math.Inf(1)
	var cur kAffine
	cur.d = superScale(maxD, smax)
	cur.dmin = superScale(maxM, smax)
	for j := 0; j < nsub; j++ {
		cur.sc[j] = roundRatio(ds[j], cur.d, 0, smax)
		cur.m[j] = roundRatio(ms[j], cur.dmin, 0, smax)
	}
	for round := 0; round < 3; round++ {
		var total float64
		for j := 0; j < nsub; j++ {
			xs, ws := x[j*sub:(j+1)*sub], w[j*sub:(j+1)*sub]
			be, bs, bm := math.Inf(1), cur.sc[j], cur.m[j]
			for s := max(0, cur.sc[j]-2); s <= min(smax, cur.sc[j]+2); s++ {
				for m := max(0, cur.m[j]-2); m <= min(smax, cur.m[j]+2); m++ {
					e := affineCodesK(xs, ws, cur.d*float32(s), cur.dmin*float32(m), nmax, tmp[:sub])
					if e < be {
						be, bs, bm = e, s, m
					}
				}
			}
			cur.sc[j], cur.m[j] = bs, bm
			total += affineCodesK(xs, ws, cur.d*float32(bs), cur.dmin*float32(bm), nmax, cur.q[j*sub:(j+1)*sub])
		}
		if total < best {
			best = total
			*r = cur
		}
		// Least-squares super-block scales for the chosen integers:
		// x ≈ d·a − dmin·b with a = sc·q, b = m.
		var saa, sab, sbb, sxa, sxb float64
		for i := 0; i < 256; i++ {
			j := i / sub
			wi := float64(w[i])
			a, b := float64(cur.sc[j]*cur.q[i]), float64(cur.m[j])
			saa += wi * a * a
			sab += wi * a * b
			sbb += wi * b * b
			sxa += wi * float64(x[i]) * a
			sxb += wi * float64(x[i]) * b
		}
		det := saa*sbb - sab*sab
		if det <= 0 {
			break
		}
		d := (sxa*sbb - sxb*sab) / det
		dmin := (sxa*sab - sxb*saa) / det
		if !(d > 0) || !(dmin >= 0) {
			break
		}
		cur.d, cur.dmin = roundF16(float32(d)), roundF16(float32(dmin))
		if math.IsInf(float64(cur.d), 0) || math.IsInf(float64(cur.dmin), 0) {
			break
		}
	}
	if best == math.Inf(1) || math.IsNaN(best) {
		*r = kAffine{} // nothing representable: all zero
	}
}

// roundRatio returns v/d rounded and clamped to [lo, hi] (lo when d is 0).
func roundRatio(v float64, d float32, lo, hi int) int {
	if d == 0 {
		return lo
	}
	r := math.Round(v / float64(d))
	return int(max(float64(lo), min(float64(hi), r)))
}

// kSym holds the result of quantizeKSym.
type kSym struct {
	d  float32 // fp16 value
	sc [16]int
	q  [256]int
}

// quantizeKSym quantizes 256 values in 16 sub-blocks of 16 as y = (d·sc)·q
// with codes in [qmin, qmax] and sc in [smin, smax].
func quantizeKSym(x, w []float32, qmin, qmax, smin, smax int, r *kSym) {
	var tops [16]topScales
	var ev [16 * 64]uint64
	var tmp [256]int
	var amax, smaxD float64
	for j := 0; j < 16; j++ {
		xs, ws := x[16*j:16*j+16], w[16*j:16*j+16]
		var t topScales
		d1, s1 := bestSymCont(xs, ws, qmin, qmax, 1, ev[:0], tmp[:16], &t)
		if qmin != -qmax {
			if d2, s2 := bestSymCont(xs, ws, qmin, qmax, -1, ev[:0], tmp[:16], &t); s2 > s1 {
				d1, s1 = d2, s2
			}
		}
		if t[0].score < s1 {
			t.add(d1, s1)
		}
		tops[j] = t
		if d := t[0].d; math.Abs(d) > amax {
			amax, smaxD = math.Abs(d), d
		}
	}
	var cur kSym
	best := math.Inf(1)
	// descend chooses every sub-block's integer scale for super-block scale
	// d among the neighbours of its current one and of its sweep optima,
	// and returns the total error (stopping early past limit).
	descend := func(d float32, init bool, limit float64) float64 {
		cur.d = d
		var total float64
		for j := 0; j < 16; j++ {
			xs, ws := x[16*j:16*j+16], w[16*j:16*j+16]
			be, bs := math.Inf(1), cur.sc[j]
			var seen [256]bool // integer scales tried, offset by -smin
			try := func(c int) {
				for s := max(smin, c-1); s <= min(smax, c+1); s++ {
					if seen[s-smin] {
						continue
					}
					seen[s-smin] = true
					if e := symError(xs, ws, d*float32(s), qmin, qmax, tmp[:16]); e < be {
						be, bs = e, s
					}
				}
			}
			if !init {
				try(cur.sc[j])
			}
			for _, t := range tops[j] {
				if t.d != 0 {
					try(roundRatio(t.d, d, smin, smax))
				}
			}
			cur.sc[j] = bs
			total += symError(xs, ws, d*float32(bs), qmin, qmax, cur.q[16*j:16*j+16])
			if total >= limit {
				return total
			}
		}
		return total
	}
	keep := func(total float64) bool {
		if total < best {
			best = total
			*r = cur
			return true
		}
		return false
	}
	// Super-block scales to start from: the largest sub-block scale mapped
	// to either end of the integer range and then to smaller ones, so that
	// sub-blocks with outliers can be clipped in favour of the others.
	// The largest sub-block scale is also mapped exactly onto each of the
	// sixteen integers at either end: their fp16 roundings differ.
	var starts []float64
	for k := 0; k < 12; k++ {
		f := math.Pow(2, -float64(k)/3)
		starts = append(starts, smaxD*f/float64(smin), smaxD*f/float64(smax))
	}
	for k := 1; k < 8; k++ {
		starts = append(starts, smaxD/float64(smin+k), smaxD/float64(smax-k))
	}
	for _, d0 := range starts {
		{
			d := roundF16(float32(d0))
			if d == 0 || math.IsInf(float64(d), 0) {
				continue
			}
			if !keep(descend(d, true, best)) {
				continue
			}
			// Refit the super-block scale by least squares for the chosen
			// integers, while that helps.
			for round := 0; round < 2; round++ {
				var saa, sxa float64
				for i := 0; i < 256; i++ {
					a := float64(cur.sc[i/16] * cur.q[i])
					saa += float64(w[i]) * a * a
					sxa += float64(w[i]) * float64(x[i]) * a
				}
				nd := roundF16(float32(sxa / saa))
				if saa == 0 || nd == cur.d || math.IsInf(float64(nd), 0) || !keep(descend(nd, false, best)) {
					break
				}
			}
		}
	}
	if best == math.Inf(1) {
		*r = kSym{} // all zero
		return
	}
	// Finally try the fp16 neighbours of the best super-block scale.
	h := Float32ToFloat16(r.d)
	for k := -4; k <= 4; k++ {
		if k != 0 {
			cur = *r
			if d := Float16ToFloat32(h + uint16(k)); !math.IsInf(float64(d), 0) && !math.IsNaN(float64(d)) && d != 0 {
				keep(descend(d, false, best))
			}
		}
	}
}

// kAffineSearch returns the affine K-format search of the given mode.
func kAffineSearch(exhaustive bool, imatrix []float32) func(x, w []float32, sub, nmax, smax int, r *kAffine) {
	if exhaustive {
		return quantizeKAffine
	}
	ef := effortFor(imatrix)
	return func(x, w []float32, sub, nmax, smax int, r *kAffine) {
		quantizeKAffineFast(x, w, sub, nmax, smax, ef, r)
	}
}

// kSymSearch returns the signed K-format search of the given mode.
func kSymSearch(exhaustive bool, imatrix []float32) func(x, w []float32, qmin, qmax, smin, smax int, r *kSym) {
	if exhaustive {
		return quantizeKSym
	}
	ef := effortFor(imatrix)
	return func(x, w []float32, qmin, qmax, smin, smax int, r *kSym) {
		quantizeKSymFast(x, w, qmin, qmax, smin, smax, ef, r)
	}
}

func quantizeQ2_K(dst []byte, src []float32, imatrix []float32) { encodeQ2_K(dst, src, imatrix, false) }

// encodeQ2_K quantizes src to q2_K with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ2_K(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [256]float32
	var r kAffine
	for i := 0; i < len(src)/256; i++ {
		x := flushTiny(xb[:], src[256*i:256*i+256])
		kAffineSearch(exhaustive, imatrix)(x, weightsOf(imatrix, 256*i, 256, wb[:]), 16, 3, 15, &r)
		b := dst[84*i : 84*i+84]
		clear(b)
		for j := 0; j < 16; j++ {
			b[j] = byte(r.sc[j]) | byte(r.m[j])<<4
		}
		// Value 128h + 32s + 16sub + l lives in qs[32h + 16sub + l], bits 2s.
		for v := 0; v < 256; v++ {
			h, s, sl := v/128, v%128/32, v%32
			b[16+32*h+sl] |= byte(r.q[v]) << (2 * s)
		}
		putF16(b[80:], r.d)
		putF16(b[82:], r.dmin)
	}
}

func quantizeQ4_K(dst []byte, src []float32, imatrix []float32) { encodeQ4_K(dst, src, imatrix, false) }

// encodeQ4_K quantizes src to q4_K with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ4_K(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [256]float32
	var r kAffine
	for i := 0; i < len(src)/256; i++ {
		x := flushTiny(xb[:], src[256*i:256*i+256])
		kAffineSearch(exhaustive, imatrix)(x, weightsOf(imatrix, 256*i, 256, wb[:]), 32, 15, 63, &r)
		b := dst[144*i : 144*i+144]
		putF16(b, r.d)
		putF16(b[2:], r.dmin)
		var sc, m [8]int
		copy(sc[:], r.sc[:8])
		copy(m[:], r.m[:8])
		putScaleMinK4(b[4:16], &sc, &m)
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				b[16+32*c+l] = byte(r.q[64*c+l]) | byte(r.q[64*c+32+l])<<4
			}
		}
	}
}

func quantizeQ5_K(dst []byte, src []float32, imatrix []float32) { encodeQ5_K(dst, src, imatrix, false) }

// encodeQ5_K quantizes src to q5_K with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ5_K(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [256]float32
	var r kAffine
	for i := 0; i < len(src)/256; i++ {
		x := flushTiny(xb[:], src[256*i:256*i+256])
		kAffineSearch(exhaustive, imatrix)(x, weightsOf(imatrix, 256*i, 256, wb[:]), 32, 31, 63, &r)
		b := dst[176*i : 176*i+176]
		putF16(b, r.d)
		putF16(b[2:], r.dmin)
		var sc, m [8]int
		copy(sc[:], r.sc[:8])
		copy(m[:], r.m[:8])
		putScaleMinK4(b[4:16], &sc, &m)
		clear(b[16:48])
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				lo, hi := r.q[64*c+l], r.q[64*c+32+l]
				b[48+32*c+l] = byte(lo&15) | byte(hi&15)<<4
				b[16+l] |= byte(lo>>4)<<(2*c) | byte(hi>>4)<<(2*c+1)
			}
		}
	}
}

func quantizeQ3_K(dst []byte, src []float32, imatrix []float32) { encodeQ3_K(dst, src, imatrix, false) }

// encodeQ3_K quantizes src to q3_K with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ3_K(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [256]float32
	var r kSym
	for i := 0; i < len(src)/256; i++ {
		x := flushTiny(xb[:], src[256*i:256*i+256])
		kSymSearch(exhaustive, imatrix)(x, weightsOf(imatrix, 256*i, 256, wb[:]), -4, 3, -32, 31, &r)
		b := dst[110*i : 110*i+110]
		clear(b)
		for j := 0; j < 16; j++ {
			s := r.sc[j] + 32
			if j < 8 {
				b[96+j] |= byte(s & 15)
			} else {
				b[96+j-8] |= byte(s&15) << 4
			}
			b[104+j%4] |= byte(s>>4) << (2 * (j / 4))
		}
		for v := 0; v < 256; v++ {
			h, s, sl := v/128, v%128/32, v%32
			q := r.q[v] + 4 // 0..7: low 2 bits in qs, bit 2 in hmask
			b[32+32*h+sl] |= byte(q&3) << (2 * s)
			if q >= 4 {
				b[sl] |= 1 << (4*h + s)
			}
		}
		putF16(b[108:], r.d)
	}
}

func quantizeQ6_K(dst []byte, src []float32, imatrix []float32) { encodeQ6_K(dst, src, imatrix, false) }

// encodeQ6_K quantizes src to q6_K with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ6_K(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [256]float32
	var r kSym
	for i := 0; i < len(src)/256; i++ {
		x := flushTiny(xb[:], src[256*i:256*i+256])
		kSymSearch(exhaustive, imatrix)(x, weightsOf(imatrix, 256*i, 256, wb[:]), -32, 31, -128, 127, &r)
		b := dst[210*i : 210*i+210]
		clear(b)
		for j := 0; j < 16; j++ {
			b[192+j] = byte(int8(r.sc[j]))
		}
		for h := 0; h < 2; h++ {
			for l := 0; l < 32; l++ {
				v := 128*h + l
				q1, q2 := r.q[v]+32, r.q[v+32]+32
				q3, q4 := r.q[v+64]+32, r.q[v+96]+32
				b[64*h+l] = byte(q1&15) | byte(q3&15)<<4
				b[64*h+l+32] = byte(q2&15) | byte(q4&15)<<4
				b[128+32*h+l] = byte(q1>>4) | byte(q2>>4)<<2 | byte(q3>>4)<<4 | byte(q4>>4)<<6
			}
		}
		putF16(b[208:], r.d)
	}
}
