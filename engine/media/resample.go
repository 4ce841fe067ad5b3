package media

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// This file turns decoded sound into a Clip the way the reference does:
// PyAV 10's AudioResampler(format="flt", layout="mono", rate=16000) builds
// an abuffer → aformat → abuffersink graph, for which FFmpeg 5.1 inserts one
// aresample filter, that is one libswresample context with its default
// options, and the reference pushes every decoded frame through it and then
// flushes it. For a mono mix at a new rate libswresample converts the
// samples to planar float (double for 8-byte input formats), resamples each
// channel, then applies its mixing matrix (resampling comes first whenever
// the channel count drops), and converts to float.
//
// The resampler is libswresample's: a polyphase bank of Kaiser-windowed
// sinc filters (filter_size 32, phase_shift 10, cutoff 0.97, beta 9,
// exact_rational and linear_interp on), its output clock started half a
// filter before the first input sample with the missing history mirrored
// about that sample, and at the flush the pending input extended by
// mirroring its last samples. The dot products are summed as FFmpeg's x86
// FMA3/AVX2 kernel sums them (eight lanes of fused multiply-adds, then a
// fixed pairwise reduction), which makes the output bit for bit the
// reference's on such machines.

// sample is the precision libswresample works in: float for sample formats
// of up to four bytes, double for wider ones.
type sample interface{ float32 | float64 }

// libswresample's defaults, as aresample uses them.
const (
	swrFilterSize = 32   // taps per phase at full bandwidth
	swrPhaseShift = 10   // 1024 phases unless the rate ratio is exact
	swrCutoff     = 0.97 // of the lower Nyquist frequency
	swrKaiserBeta = 9
)

// maxSourceRate is the highest sample rate accepted. Up to it the resampler's
// increments reduce exactly (av_reduce's bound is 2^30).
const maxSourceRate = 1<<20 - 1

// resampler is one rate pair's filter bank and output clock.
type resampler struct {
	phases int // filters in the bank (phase_count)
	taps   int // taps per filter (filter_length), even
	stride int // distance between filters: taps rounded up to 8
	// bank holds phases+1 filters; the last is the first delayed by one tap,
	// for interpolating past the last phase. Single-precision banks hold
	// float32 values.
	bank []float64
	// The output clock advances by step/srcIncr phases per output sample.
	step, srcIncr int64
	linear        bool // the ratio is not exact: interpolate between phases
}

// resamplers caches the resamplers of the common rates (they are immutable
// once built).
var resamplers sync.Map // resamplerKey → *resampler

type resamplerKey struct {
	rate   int
	single bool
}

// getResampler returns the resampler from inRate, cached for common rates.
func getResampler(inRate int, single bool) *resampler {
	switch inRate {
	case 8000, 11025, 12000, 22050, 24000, 32000, 44100, 48000, 88200, 96000:
	default:
		return newResampler(inRate, single)
	}
	key := resamplerKey{inRate, single}
	if r, ok := resamplers.Load(key); ok {
		return r.(*resampler)
	}
	r, _ := resamplers.LoadOrStore(key, newResampler(inRate, single))
	return r.(*resampler)
}

// newResampler builds libswresample's resampler from inRate to SampleRate
// (single is the float pipeline, else double).
func newResampler(inRate int, single bool) *resampler {
	out := int64(SampleRate)
	factor := math.Min(float64(out)*swrCutoff/float64(inRate), 1)
	taps := int(math.Ceil(swrFilterSize / factor))
	taps += taps & 1
	phases := int64(1) << swrPhaseShift
	// exact_rational: as many phases as the reduced ratio's numerator, if
	// that is no more than 1024; then every output lands on a phase.
	if exact := out / gcd(out, int64(inRate)); exact <= phases {
		phases = exact
	}
	r := &resampler{phases: int(phases), taps: taps, stride: (taps + 7) &^ 7}
	r.build(factor, single)
	// The output step in phases is inRate·phases/out; FFmpeg keeps it as a
	// reduced fraction dst/src, both scaled up to at least 2^20.
	num, den := out, int64(inRate)*phases
	g := gcd(num, den)
	src, dst := num/g, den/g
	for dst < 1<<20 && src < 1<<20 {
		dst *= 2
		src *= 2
	}
	r.step, r.srcIncr = dst, src
	r.linear = dst%src != 0
	return r
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// build fills the bank: phase ph's tap i is sinc(π·(i − c − ph/P)·factor)
// under a Kaiser window, all phases scaled by the sum of phase 0, where c is
// the centre tap (taps/2 − 1).
func (r *resampler) build(factor float64, single bool) {
	P, L, A := r.phases, r.taps, r.stride
	r.bank = make([]float64, A*(P+1))
	// Phases P−ph mirror phases ph, so only half are computed.
	half := P
	if P%2 == 0 {
		half = P/2 + 1
	}
	center := (L - 1) / 2
	// With no band limit (upsampling) the sines come from a table, with the
	// sign flipping from tap to tap, as FFmpeg computes them.
	var sinTab []float64
	if factor == 1 {
		sinTab = make([]float64, half)
		sign := -1.0
		if center&1 != 0 {
			sign = 1
		}
		for ph := range sinTab {
			sinTab[ph] = math.Sin(math.Pi*float64(ph)/float64(P)) * sign
		}
	}
	tab := make([]float64, L)
	norm := 0.0
	for ph := range half {
		s := 0.0
		if sinTab != nil {
			s = sinTab[ph]
		}
		for i := range L {
			x := math.Pi * (float64(i-center) - float64(ph)/float64(P)) * factor
			var y float64
			switch {
			case x == 0:
				y = 1
			case factor == 1:
				y = s / x
			default:
				y = math.Sin(x) / x
			}
			// (Explicit conversions keep products from fusing into
			// multiply-adds on machines that have them.)
			w := 2 * x / (factor * float64(L) * math.Pi)
			y = float64(y * besselI0(swrKaiserBeta*math.Sqrt(math.Max(1-float64(w*w), 0))))
			tab[i] = y
			s = -s
			if ph == 0 {
				norm += y
			}
		}
		row := r.bank[ph*A : ph*A+L]
		for i, y := range tab {
			v := y / norm
			if single {
				v = float64(float32(v))
			}
			row[i] = v
		}
		if P%2 == 0 {
			mirror := r.bank[(P-ph)*A : (P-ph)*A+L]
			for i, v := range row {
				mirror[L-1-i] = v
			}
		}
	}
	copy(r.bank[P*A+1:], r.bank[:A-1])
	r.bank[P*A] = r.bank[A-1]
}

// besselI0 is the modified Bessel function of the first kind, order 0, by
// its power series.
func besselI0(x float64) float64 {
	x = x * x / 4
	v, t := 1.0, 1.0
	for k := 1.0; k < 500; k++ {
		t = float64(t * (x / (k * k)))
		if v+t == v {
			break
		}
		v += t
	}
	return v
}

// kernel is one precision's dot products, summed as FFmpeg's x86 kernels
// sum them.
type kernel[T sample] interface {
	// dot is Σ x[i]·f[i] over len(f) taps.
	dot(x []T, f []float64) T
	// interp is dot over f, moved towards dot over g by frac/srcIncr.
	interp(x []T, f, g []float64, frac, srcIncr int64) T
}

// kernel32 sums as resample_common_float_fma3 does: lane i%8 accumulates
// tap i by a single-precision fused multiply-add, then the lanes are added
// pairwise ((0+4)+(2+6)) + ((1+5)+(3+7)).
type kernel32 struct{}

// fma32 is a single-precision fused multiply-add of float32 values held in
// float64s. The product of two float32s is exact in float64, so x·f+acc is
// rounded once to float64 and then to float32; that double rounding differs
// from the single rounding of a hardware FMA only when the float64 result
// falls exactly halfway between two float32s, about once in 2^29 operations.
func fma32(x float32, f, acc float64) float64 {
	return float64(float32(float64(x)*f + acc))
}

// lanes8 accumulates x·f (len(f) even) into eight lanes.
func lanes8(x []float32, f []float64) [8]float64 {
	n := len(f)
	x = x[:n]
	var a0, a1, a2, a3, a4, a5, a6, a7 float64
	i := 0
	for ; i+8 <= n; i += 8 {
		xs, fs := x[i:i+8:i+8], f[i:i+8:i+8]
		a0 = fma32(xs[0], fs[0], a0)
		a1 = fma32(xs[1], fs[1], a1)
		a2 = fma32(xs[2], fs[2], a2)
		a3 = fma32(xs[3], fs[3], a3)
		a4 = fma32(xs[4], fs[4], a4)
		a5 = fma32(xs[5], fs[5], a5)
		a6 = fma32(xs[6], fs[6], a6)
		a7 = fma32(xs[7], fs[7], a7)
	}
	// The tail (taps is even) falls in the first lanes; the bank's zero
	// padding leaves the others as they are.
	if i+2 <= n {
		a0 = fma32(x[i], f[i], a0)
		a1 = fma32(x[i+1], f[i+1], a1)
		i += 2
	}
	if i+2 <= n {
		a2 = fma32(x[i], f[i], a2)
		a3 = fma32(x[i+1], f[i+1], a3)
		i += 2
	}
	if i+2 <= n {
		a4 = fma32(x[i], f[i], a4)
		a5 = fma32(x[i+1], f[i+1], a5)
	}
	return [8]float64{a0, a1, a2, a3, a4, a5, a6, a7}
}

// halve adds the upper four lanes onto the lower four.
func halve(a [8]float64) [4]float32 {
	return [4]float32{
		float32(a[0]) + float32(a[4]), float32(a[1]) + float32(a[5]),
		float32(a[2]) + float32(a[6]), float32(a[3]) + float32(a[7]),
	}
}

func (kernel32) dot(x []float32, f []float64) float32 {
	c := halve(lanes8(x, f))
	return (c[0] + c[2]) + (c[1] + c[3])
}

// interp follows resample_linear_float_fma3: both sums are halved to four
// lanes, each lane interpolated with t = frac·(1/srcIncr) by a fused
// multiply-add, then reduced.
func (kernel32) interp(x []float32, f, g []float64, frac, srcIncr int64) float32 {
	c := halve(lanes8(x, f))
	d := halve(lanes8(x, g))
	t := float64(float32(frac) * (1 / float32(srcIncr)))
	var e [4]float32
	for k := range e {
		e[k] = float32(float64(d[k]-c[k])*t + float64(c[k])) // exact product: a fused multiply-add
	}
	return (e[0] + e[2]) + (e[1] + e[3])
}

// kernel64 sums as resample_common_double_fma3 does: four lanes of fused
// multiply-adds, reduced (0+2)+(1+3).
type kernel64 struct{}

func lanes4(x []float64, f []float64) (a [4]float64) {
	n := len(f)
	x = x[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		xs, fs := x[i:i+4:i+4], f[i:i+4:i+4]
		a[0] = math.FMA(xs[0], fs[0], a[0])
		a[1] = math.FMA(xs[1], fs[1], a[1])
		a[2] = math.FMA(xs[2], fs[2], a[2])
		a[3] = math.FMA(xs[3], fs[3], a[3])
	}
	for l := 0; i < n; i, l = i+1, l+1 {
		a[l] = math.FMA(x[i], f[i], a[l])
	}
	return a
}

func (kernel64) dot(x []float64, f []float64) float64 {
	a := lanes4(x, f)
	return (a[0] + a[2]) + (a[1] + a[3])
}

func (kernel64) interp(x []float64, f, g []float64, frac, srcIncr int64) float64 {
	a, b := lanes4(x, f), lanes4(x, g)
	t := float64(frac) * (1 / float64(srcIncr))
	c0, c1 := a[0]+a[2], a[1]+a[3]
	d0, d1 := b[0]+b[2], b[1]+b[3]
	return math.FMA(d0-c0, t, c0) + math.FMA(d1-c1, t, c1)
}

// toClip converts one stream, fed in planar chunks at its own rate, into
// mono float32 at SampleRate, as one libswresample context fed every frame
// and then flushed. T is the precision libswresample picks for the stream's
// sample format.
type toClip[T sample] struct {
	chans  int
	coef   []T   // mixing coefficients of the channels that count (nil: mono)
	coefCh []int // those channels
	rs     *resampler
	kern   kernel[T]
	maxOut int     // more output samples than this is an error
	limit  float64 // the limit in seconds, for the message

	// Resampler state. hist[c] holds channel c's input from position base;
	// n samples came in so far; head[c] keeps the first taps+1 samples,
	// which the mirrored start reads. pos is the next output's position in
	// 1/(phases·srcIncr) of an input sample, counted from the first sample.
	hist    [][]T
	head    [][]T
	base    int64
	n       int64
	pos     int64
	started bool
	res     [][]T // one batch of resampled channels

	out []float32
}

// clipTooLongError refuses a clip longer than the limit. Decoders return
// it from the header where they can, before decoding.
type clipTooLongError struct{ seconds, limit float64 }

func (e *clipTooLongError) Error() string {
	l := fmtSeconds(e.limit, 1)
	s := fmtSeconds(e.seconds, 1)
	for prec := 3; s == l && prec <= 9; prec += 3 {
		s = fmtSeconds(e.seconds, prec) // just over: show that it is
	}
	return fmt.Sprintf("audio is %s s long, at most %s s", s, l)
}

// fmtSeconds prints seconds with up to prec decimals, trailing zeros cut.
func fmtSeconds(s float64, prec int) string {
	t := strconv.FormatFloat(s, 'f', prec, 64)
	if strings.IndexByte(t, '.') >= 0 {
		t = strings.TrimSuffix(strings.TrimRight(t, "0"), ".")
	}
	return t
}

// newToClip prepares the conversion of a stream of channels at rate with
// the given speaker layout, refusing output beyond maxSeconds (plus the
// resampler's edge).
func newToClip[T sample](rate, channels int, layout uint64, maxSeconds float64, expect int) (*toClip[T], error) {
	if rate <= 0 || rate > maxSourceRate {
		return nil, fmt.Errorf("sample rate %d Hz not supported (1 to %d Hz)", rate, maxSourceRate)
	}
	if channels < 1 || channels > maxChannels {
		return nil, fmt.Errorf("%d channels not supported (1 to %d)", channels, maxChannels)
	}
	c := &toClip[T]{chans: channels}
	mix, err := monoMix(layout, channels)
	if err != nil {
		return nil, err
	}
	if mix != nil {
		c.coef = []T{}
		for ch, v := range mix {
			if v != 0 {
				c.coef = append(c.coef, T(v))
				c.coefCh = append(c.coefCh, ch)
			}
		}
	}
	var zero T
	_, single := any(zero).(float32)
	if single {
		c.kern = any(kernel32{}).(kernel[T])
	} else {
		c.kern = any(kernel64{}).(kernel[T])
	}
	if rate != SampleRate {
		c.rs = getResampler(rate, single)
		c.hist = make([][]T, channels)
		c.res = make([][]T, channels)
		c.pos = -int64(c.rs.phases*((c.rs.taps-1)/2)) * c.rs.srcIncr
	}
	c.maxOut = math.MaxInt
	if n := maxSeconds * SampleRate; n < 1<<50 {
		c.maxOut = int(max(n, 0)) + 64
	}
	c.out = make([]float32, 0, min(max(expect, 0), c.maxOut))
	c.limit = maxSeconds
	return c, nil
}

// write feeds one chunk: planes[c] holds channel c's next samples, all of
// the same length.
func (c *toClip[T]) write(planes [][]T) error {
	n := len(planes[0])
	if n == 0 {
		return nil
	}
	if c.rs == nil {
		if len(c.out)+n > c.maxOut {
			return c.tooLong(int64(len(c.out) + n))
		}
		c.mix(planes, n)
		return nil
	}
	for ch, p := range planes {
		c.hist[ch] = append(c.hist[ch], p[:n]...)
	}
	c.n += int64(n)
	L := int64(c.rs.taps)
	if !c.started {
		// The mirrored start needs taps+1 samples.
		if c.n < L+1 {
			return nil
		}
		c.start()
	}
	return c.produce(c.n)
}

// start keeps the first taps+1 samples of each channel for the mirror
// before the first sample.
func (c *toClip[T]) start() {
	c.started = true
	c.head = make([][]T, c.chans)
	for ch := range c.head {
		c.head[ch] = append([]T(nil), c.hist[ch][:c.rs.taps+1]...)
	}
}

// finish flushes the resampler: the pending input is extended by mirroring
// its last samples (about half as many as are pending, at most half a
// filter), and every output whose filter then fits is produced. A stream
// shorter than taps+1 samples produces nothing unless its mirrored end
// makes up the difference. It returns the clip.
func (c *toClip[T]) finish() (*Clip, error) {
	if c.rs != nil && c.n > 0 {
		L := int64(c.rs.taps)
		var pending int64
		if c.started {
			pending = c.n - c.nextStart()
		} else {
			pending = c.n
		}
		refl := (min(pending, L) + 1) / 2
		if !c.started && c.n+refl < L+1 {
			return &Clip{Samples: c.out}, nil
		}
		for ch, h := range c.hist {
			for j := range int(refl) {
				h = append(h, h[len(h)-1-2*j])
			}
			c.hist[ch] = h
		}
		if !c.started {
			c.start()
		}
		if err := c.produce(c.n + refl); err != nil {
			return nil, err
		}
	}
	return &Clip{Samples: c.out}, nil
}

// nextStart is the first input position the next output's filter reads.
func (c *toClip[T]) nextStart() int64 {
	return floorDiv(floorDiv(c.pos, c.rs.srcIncr), int64(c.rs.phases))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (c *toClip[T]) tooLong(samples int64) error {
	return &clipTooLongError{seconds: float64(samples) / SampleRate, limit: c.limit}
}

// produce computes every output whose filter lies within the input up to
// position end (exclusive), mixes them and drops input no later output
// reads.
func (c *toClip[T]) produce(end int64) error {
	r := c.rs
	P, L := int64(r.phases), int64(r.taps)
	// Output k is due while its first tap, floor(pos_k/srcIncr/P), is at
	// most end−L, that is while pos_k < (end−L+1)·P·srcIncr.
	lim := (end - L + 1) * P * r.srcIncr
	if lim <= c.pos {
		return nil
	}
	count := (lim - c.pos + r.step - 1) / r.step
	if int64(len(c.out))+count > int64(c.maxOut) {
		return c.tooLong(int64(len(c.out)) + count)
	}
	n := int(count)
	for ch := range c.res {
		if cap(c.res[ch]) < n {
			c.res[ch] = make([]T, n)
		}
		c.res[ch] = c.res[ch][:n]
	}
	c.resampleAll(n)
	c.mix(c.res, n)
	c.pos += count * r.step
	// Keep the input from the next output's first tap on.
	if keep := max(c.nextStart(), 0); keep > c.base {
		for ch, h := range c.hist {
			m := copy(h, h[keep-c.base:])
			c.hist[ch] = h[:m]
		}
		c.base = keep
	}
	return nil
}

// resampleAll fills c.res[ch][:n] for every channel, in parallel when the
// batch is large.
func (c *toClip[T]) resampleAll(n int) {
	work := n * c.chans * c.rs.taps
	parts := 1
	if w := runtime.GOMAXPROCS(0); w > 1 && work >= 1<<20 {
		parts = min((w+c.chans-1)/c.chans, max(n/2048, 1))
	}
	if parts == 1 && c.chans == 1 {
		c.resampleRange(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for ch := range c.chans {
		for p := range parts {
			k0, k1 := n*p/parts, n*(p+1)/parts
			wg.Go(func() { c.resampleRange(ch, k0, k1) })
		}
	}
	wg.Wait()
}

// resampleRange computes outputs k0..k1−1 of this batch for one channel.
func (c *toClip[T]) resampleRange(ch, k0, k1 int) {
	r := c.rs
	P, L, A := int64(r.phases), r.taps, r.stride
	hist, head, base := c.hist[ch], c.head[ch], c.base
	dst := c.res[ch]
	var win []T // the window, gathered where it crosses the start
	pos := c.pos + int64(k0)*r.step
	for k := k0; k < k1; k, pos = k+1, pos+r.step {
		index := floorDiv(pos, r.srcIncr)
		frac := pos - index*r.srcIncr
		s := floorDiv(index, P)
		ph := int(index - s*P)
		var x []T
		if s >= base && int(s-base)+L <= len(hist) {
			x = hist[s-base : int(s-base)+L]
		} else {
			if win == nil {
				win = make([]T, L)
			}
			for i := range win {
				j := s + int64(i)
				if j < 0 {
					win[i] = head[-j]
				} else {
					win[i] = hist[j-base]
				}
			}
			x = win
		}
		f := r.bank[ph*A : ph*A+L]
		if r.linear && frac != 0 {
			dst[k] = c.kern.interp(x, f, r.bank[(ph+1)*A:(ph+1)*A+L], frac, r.srcIncr)
		} else {
			dst[k] = c.kern.dot(x, f)
		}
	}
}

// mix appends the mono mix of planes[·][:n] to the output: libswresample's
// matrix applied in the working precision (one channel: copied or scaled;
// two: two products added; more: products summed in channel order).
func (c *toClip[T]) mix(planes [][]T, n int) {
	out := c.out
	switch {
	case c.coef == nil:
		for _, v := range planes[0][:n] {
			out = append(out, float32(v))
		}
	case len(c.coef) == 1:
		x, k := planes[c.coefCh[0]][:n], c.coef[0]
		for _, v := range x {
			if k != 1 {
				v = T(k * v)
			}
			out = append(out, float32(v))
		}
	case len(c.coef) == 2:
		x, y := planes[c.coefCh[0]][:n], planes[c.coefCh[1]][:n]
		kx, ky := c.coef[0], c.coef[1]
		for i := range x {
			out = append(out, float32(T(kx*x[i])+T(ky*y[i])))
		}
	default:
		for i := range n {
			var v T
			for j, ch := range c.coefCh {
				v += T(planes[ch][i] * c.coef[j])
			}
			out = append(out, float32(v))
		}
	}
	c.out = out
}
