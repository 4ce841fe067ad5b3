package processor

import "math"

// A discrete Fourier transform of any length, in float64: a self-sorting
// (Stockham) mixed-radix decimation in frequency. Radices 4, 2, 3 and 5
// have their own butterflies; any other prime factor uses a direct DFT of
// that size, so every length works (Whisper's n_fft 400 = 4·4·5·5; its
// real transform runs as a complex transform of 200 = 4·2·5·5).
//
// A stage of length n = p·m over s interleaved sequences reads element
// j + t·m (t < p) of sequence q at q + s·(j + t·m), takes the p-point DFT
// b_u = Σ_t a_t·ω_p^(t·u), multiplies by ω_n^(j·u) and writes it to
// q + s·(p·j + u); the next stage then treats those as s·p sequences of
// length m. After the last stage frequency k of the input sits at index k.

// fftStage is one pass: radix p over sequences of length n = p·m, stride s.
type fftStage struct {
	p, m, s int
	tw      []complex128 // [m·p]: ω_n^(j·u) at j·p + u
}

// fftPlan is a complex DFT of one length, with its scratch buffer; a plan is
// not safe for concurrent use.
type fftPlan struct {
	n      int
	stages []fftStage
	rootsP map[int][]complex128 // ω_p^k for the generic radices
	buf    []complex128
}

// newFFTPlan prepares the DFT of length n ≥ 1.
func newFFTPlan(n int) *fftPlan {
	pl := &fftPlan{n: n, rootsP: map[int][]complex128{}, buf: make([]complex128, n)}
	ln, s := n, 1
	for _, p := range factorize(n) {
		m := ln / p
		tw := make([]complex128, m*p)
		for j := range m {
			for u := range p {
				tw[j*p+u] = unitRoot(j*u, ln)
			}
		}
		pl.stages = append(pl.stages, fftStage{p: p, m: m, s: s, tw: tw})
		if p != 2 && p != 3 && p != 4 && p != 5 && pl.rootsP[p] == nil {
			r := make([]complex128, p)
			for k := range p {
				r[k] = unitRoot(k, p)
			}
			pl.rootsP[p] = r
		}
		ln, s = m, s*p
	}
	return pl
}

// factorize splits n into radices, fours first, then 2, 3, 5 and any other
// primes.
func factorize(n int) []int {
	var f []int
	for n%4 == 0 {
		f = append(f, 4)
		n /= 4
	}
	for _, p := range []int{2, 3, 5} {
		for n%p == 0 {
			f = append(f, p)
			n /= p
		}
	}
	for p := 7; p*p <= n; p += 2 {
		for n%p == 0 {
			f = append(f, p)
			n /= p
		}
	}
	if n > 1 {
		f = append(f, n)
	}
	return f
}

// unitRoot is exp(−2πi·k/n), with k reduced modulo n first so that large
// products keep full accuracy.
func unitRoot(k, n int) complex128 {
	k %= n
	s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
	return complex(c, s)
}

// transform computes the DFT of x in place.
func (pl *fftPlan) transform(x []complex128) {
	in, out := x, pl.buf
	for i := range pl.stages {
		pl.stage(&pl.stages[i], in, out)
		in, out = out, in
	}
	if len(pl.stages)%2 == 1 {
		copy(x, in)
	}
}

// stage runs one radix pass from in to out.
func (pl *fftPlan) stage(st *fftStage, in, out []complex128) {
	p, m, s := st.p, st.m, st.s
	switch p {
	case 2:
		for j := range m {
			w1 := st.tw[j*2+1]
			for q := range s {
				a0, a1 := in[q+s*j], in[q+s*(j+m)]
				out[q+s*(2*j)] = a0 + a1
				out[q+s*(2*j+1)] = (a0 - a1) * w1
			}
		}
	case 4:
		for j := range m {
			w := st.tw[j*4 : j*4+4]
			for q := range s {
				a0, a1, a2, a3 := in[q+s*j], in[q+s*(j+m)], in[q+s*(j+2*m)], in[q+s*(j+3*m)]
				t0, t1 := a0+a2, a0-a2
				t2, t3 := a1+a3, mulNegI(a1-a3)
				o := q + s*4*j
				out[o] = t0 + t2
				out[o+s] = (t1 + t3) * w[1]
				out[o+2*s] = (t0 - t2) * w[2]
				out[o+3*s] = (t1 - t3) * w[3]
			}
		}
	case 3:
		// ω_3 = −1/2 − i·√3/2
		const c1, s1 = -0.5, -0.86602540378443864676
		for j := range m {
			w := st.tw[j*3 : j*3+3]
			for q := range s {
				a0, a1, a2 := in[q+s*j], in[q+s*(j+m)], in[q+s*(j+2*m)]
				sum, dif := a1+a2, a1-a2
				re := a0 + complex(c1*real(sum), c1*imag(sum))
				im := complex(-s1*imag(dif), s1*real(dif)) // i·s1·dif
				o := q + s*3*j
				out[o] = a0 + sum
				out[o+s] = (re + im) * w[1]
				out[o+2*s] = (re - im) * w[2]
			}
		}
	case 5:
		// ω_5^k = cos(2πk/5) − i·sin(2πk/5)
		const (
			c1 = 0.30901699437494742410  // cos(2π/5)
			c2 = -0.80901699437494742410 // cos(4π/5)
			s1 = -0.95105651629515357212 // −sin(2π/5)
			s2 = -0.58778525229247312917 // −sin(4π/5)
		)
		for j := range m {
			w := st.tw[j*5 : j*5+5]
			for q := range s {
				a0 := in[q+s*j]
				a1, a2 := in[q+s*(j+m)], in[q+s*(j+2*m)]
				a3, a4 := in[q+s*(j+3*m)], in[q+s*(j+4*m)]
				p1, m1 := a1+a4, a1-a4
				p2, m2 := a2+a3, a2-a3
				r1 := a0 + complex(c1*real(p1)+c2*real(p2), c1*imag(p1)+c2*imag(p2))
				r2 := a0 + complex(c2*real(p1)+c1*real(p2), c2*imag(p1)+c1*imag(p2))
				// i·(s1·m1 + s2·m2) and i·(s2·m1 − s1·m2)
				v1 := complex(s1*real(m1)+s2*real(m2), s1*imag(m1)+s2*imag(m2))
				v2 := complex(s2*real(m1)-s1*real(m2), s2*imag(m1)-s1*imag(m2))
				i1 := complex(-imag(v1), real(v1))
				i2 := complex(-imag(v2), real(v2))
				o := q + s*5*j
				out[o] = a0 + p1 + p2
				out[o+s] = (r1 + i1) * w[1]
				out[o+2*s] = (r2 + i2) * w[2]
				out[o+3*s] = (r2 - i2) * w[3]
				out[o+4*s] = (r1 - i1) * w[4]
			}
		}
	default:
		roots := pl.rootsP[p]
		for j := range m {
			w := st.tw[j*p : j*p+p]
			for q := range s {
				o := q + s*p*j
				for u := range p {
					var b complex128
					for t := range p {
						b += in[q+s*(j+t*m)] * roots[(t*u)%p]
					}
					out[o+s*u] = b * w[u]
				}
			}
		}
	}
}

// mulNegI returns −i·z.
func mulNegI(z complex128) complex128 { return complex(imag(z), -real(z)) }

// realPower computes |X[k]|² for k = 0..n/2 of the DFT X of n real samples.
// An even n runs as one complex transform of n/2 (even samples as real
// parts, odd as imaginary) and a split into the two half spectra.
type realPower struct {
	n     int
	plan  *fftPlan
	z     []complex128
	twist []complex128 // ω_n^k, k = 0..n/2
}

func newRealPower(n int) *realPower {
	rp := &realPower{n: n}
	if n%2 == 0 {
		rp.plan = newFFTPlan(n / 2)
		rp.z = make([]complex128, n/2)
		rp.twist = make([]complex128, n/2+1)
		for k := range rp.twist {
			rp.twist[k] = unitRoot(k, n)
		}
	} else {
		rp.plan = newFFTPlan(n)
		rp.z = make([]complex128, n)
	}
	return rp
}

// power writes |X[k]|², k = 0..n/2, of the real frame x (len n) into out.
func (rp *realPower) power(x, out []float64) {
	n := rp.n
	if n%2 == 1 {
		for i, v := range x[:n] {
			rp.z[i] = complex(v, 0)
		}
		rp.plan.transform(rp.z)
		for k := range n/2 + 1 {
			z := rp.z[k]
			out[k] = real(z)*real(z) + imag(z)*imag(z)
		}
		return
	}
	h := n / 2
	for j := range h {
		rp.z[j] = complex(x[2*j], x[2*j+1])
	}
	rp.plan.transform(rp.z)
	for k := range h + 1 {
		zk := rp.z[k%h]
		zc := rp.z[(h-k)%h]
		zc = complex(real(zc), -imag(zc))
		even := (zk + zc) * 0.5
		odd := mulNegI(zk-zc) * 0.5
		xk := even + rp.twist[k]*odd
		out[k] = real(xk)*real(xk) + imag(xk)*imag(xk)
	}
}
