package media

import (
	"errors"
	"math"
	"testing"
)

// TestResamplerDesign pins the filter bank libswresample builds for some
// rates: the phase count (the reduced ratio's numerator when it is at most
// 1024, else 1024 with interpolation), the taps (32 over the cutoff
// factor, made even), and the bank's shape.
func TestResamplerDesign(t *testing.T) {
	for _, tc := range []struct {
		rate, phases, taps int
		linear             bool
	}{
		{44100, 160, 92, false},
		{48000, 1, 100, false},
		{22050, 320, 46, false},
		{96000, 1, 198, false},
		{8000, 2, 32, false}, // upsampling: no band limit
		{11025, 640, 32, false},
		{44056, 1024, 92, true}, // 2000 phases would be needed
	} {
		r := newResampler(tc.rate, true)
		if r.phases != tc.phases || r.taps != tc.taps || r.linear != tc.linear {
			t.Errorf("%d Hz: %d phases, %d taps, linear %v; want %d, %d, %v",
				tc.rate, r.phases, r.taps, r.linear, tc.phases, tc.taps, tc.linear)
			continue
		}
		P, L, A := r.phases, r.taps, r.stride
		worst := 0.0
		for ph := 0; ph <= P; ph++ {
			row := r.bank[ph*A : ph*A+A]
			sum := 0.0
			for i, v := range row {
				if v != float64(float32(v)) {
					t.Fatalf("%d Hz: phase %d tap %d is not a float32", tc.rate, ph, i)
				}
				sum += v
			}
			// Phase 0 is normalised to 1; the others come within the
			// filter's ripple of it.
			worst = max(worst, math.Abs(sum-1))
			if ph < P && ph > 0 {
				mirror := r.bank[(P-ph)*A : (P-ph)*A+L]
				for i := range L {
					if mirror[L-1-i] != row[i] {
						t.Fatalf("%d Hz: phase %d is not phase %d mirrored", tc.rate, P-ph, ph)
					}
				}
			}
		}
		if worst > 2e-5 { // measured: up to 1.1e-5 (upsampling)
			t.Errorf("%d Hz: a phase sums to 1 ± %.3g", tc.rate, worst)
		}
		// The centre tap of phase 0 (taps/2 − 1) is the largest.
		if c := r.bank[(L-1)/2]; c != maxF64(r.bank[:L]) {
			t.Errorf("%d Hz: phase 0 peaks off centre", tc.rate)
		}
	}
}

func maxF64(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// auConvert runs planar float32 channels through toClip in chunks of the
// given sizes (cycled; 0: all at once).
func auConvert(t testing.TB, rate int, layout uint64, chans [][]float32, chunks ...int) []float32 {
	c, err := newToClip[float32](rate, len(chans), layout, math.Inf(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	n := len(chans[0])
	for off, k := 0, 0; off < n; k++ {
		size := n - off
		if len(chunks) > 0 && chunks[k%len(chunks)] > 0 {
			size = min(chunks[k%len(chunks)], size)
		}
		planes := make([][]float32, len(chans))
		for ch := range chans {
			planes[ch] = chans[ch][off : off+size]
		}
		if err := c.write(planes); err != nil {
			t.Fatal(err)
		}
		off += size
	}
	clip, err := c.finish()
	if err != nil {
		t.Fatal(err)
	}
	return clip.Samples
}

// auSines is chans channels of n samples of tones at rate.
func auSines(n, chans, rate int) [][]float32 {
	out := make([][]float32, chans)
	for ch := range out {
		out[ch] = make([]float32, n)
		for i := range n {
			tt := float64(i) / float64(rate)
			out[ch][i] = float32(0.5*math.Sin(2*math.Pi*(220+100*float64(ch))*tt) + 0.25*math.Sin(2*math.Pi*2900*tt))
		}
	}
	return out
}

// TestResampleChunking: the output does not depend on how the input is cut
// into chunks (the reference feeds one decoded frame at a time), down to
// inputs shorter than a filter, which give nothing unless their mirrored
// end makes up a filter's length.
func TestResampleChunking(t *testing.T) {
	for _, tc := range []struct {
		rate, n, chans int
	}{
		{44100, 30000, 2}, {48000, 20000, 1}, {8000, 5000, 1}, {22050, 9999, 2},
		{44056, 25000, 1}, // interpolating between phases
		{44100, 60, 1},    // 60 + 30 mirrored < 93: nothing
		{44100, 70, 1},    // 70 + 35 mirrored ≥ 93: a few samples
		{44100, 93, 1},
		{16000, 1000, 2}, // mixing only
	} {
		in := auSines(tc.n, tc.chans, tc.rate)
		layout := defaultLayout(tc.chans)
		whole := auConvert(t, tc.rate, layout, in)
		for _, chunks := range [][]int{{1}, {13, 1, 4096}, {1000}, {tc.n - 1, 1}} {
			got := auConvert(t, tc.rate, layout, in, chunks...)
			if !equalF32(got, whole) {
				t.Errorf("%d Hz, %d samples, chunks %v: %d samples differ from the whole-input run (%d)",
					tc.rate, tc.n, chunks, len(got), len(whole))
			}
		}
		if tc.n == 60 && len(whole) != 0 || tc.n == 70 && len(whole) == 0 {
			t.Errorf("%d samples at 44.1 kHz gave %d", tc.n, len(whole))
		}
	}
}

// TestResampleAccuracy: a constant stays constant (to the filter's ripple,
// at the edges too, thanks to the mirroring) and a tone in the passband
// comes out as the same tone.
func TestResampleAccuracy(t *testing.T) {
	for _, rate := range []int{8000, 22050, 44100, 44056, 48000} {
		n := rate / 2
		dc := make([]float32, n)
		tone := make([]float32, n)
		for i := range dc {
			dc[i] = 0.25
			tone[i] = float32(0.5 * math.Sin(2*math.Pi*1000*float64(i)/float64(rate)))
		}
		out := auConvert(t, rate, chFrontCenter, [][]float32{dc})
		for i, v := range out {
			if math.Abs(float64(v)-0.25) > 5e-6 { // measured: up to 2.7e-6
				t.Fatalf("%d Hz: constant 0.25 came out as %g at %d", rate, v, i)
			}
		}
		out = auConvert(t, rate, chFrontCenter, [][]float32{tone})
		worst := 0.0
		for i := 100; i < len(out)-100; i++ {
			want := 0.5 * math.Sin(2*math.Pi*1000*float64(i)/SampleRate)
			worst = max(worst, math.Abs(float64(out[i])-want))
		}
		if worst > 1e-3 {
			t.Errorf("%d Hz: a 1 kHz tone is off by %.3g", rate, worst)
		}
	}
}

// TestKernels compares the FMA-ordered dot products with a plain float64
// sum.
func TestKernels(t *testing.T) {
	for _, n := range []int{32, 46, 92, 100, 198} {
		x32, x64, f := make([]float32, n), make([]float64, n), make([]float64, n)
		want := 0.0
		for i := range n {
			x32[i] = float32(math.Sin(float64(i)))
			x64[i] = float64(x32[i])
			f[i] = float64(float32(math.Cos(float64(i) * 0.3)))
			want += x64[i] * f[i]
		}
		if got := (kernel32{}).dot(x32, f); math.Abs(float64(got)-want) > 1e-5 {
			t.Errorf("kernel32.dot over %d taps = %g, want %g", n, got, want)
		}
		if got := (kernel64{}).dot(x64, f); math.Abs(got-want) > 1e-12 {
			t.Errorf("kernel64.dot over %d taps = %g, want %g", n, got, want)
		}
		if got := (kernel32{}).interp(x32, f, f, 5, 9); math.Abs(float64(got)-want) > 1e-5 {
			t.Errorf("kernel32.interp between equal filters = %g, want %g", got, want)
		}
	}
}

// TestResampleLimit: output past the limit is refused while converting.
func TestResampleLimit(t *testing.T) {
	c, err := newToClip[float32](44100, 1, chFrontCenter, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := auSines(2*44100, 1, 44100)
	err = c.write(in)
	var tl *clipTooLongError
	if !errors.As(err, &tl) {
		t.Errorf("2 s through a 1 s limit: err %v", err)
	}
}

// BenchmarkResample44k converts 60 s of 44.1 kHz stereo to 16 kHz mono,
// fed in 64 Ki-frame chunks as the WAV decoder feeds it.
func BenchmarkResample44k(b *testing.B) {
	in := auSines(60*44100, 2, 44100)
	b.SetBytes(int64(len(in[0]) * 2 * 2)) // as 16-bit stereo
	for b.Loop() {
		auConvert(b, 44100, chStereo, in, wavChunkFrames)
	}
}
