package processor

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
)

// audioConfig is the release's feature extractor settings (spec §4.3).
func audioConfig(t testing.TB) release.AudioProcessor {
	t.Helper()
	o := processorConfig(t).Audio
	if o.FeatureSize != 128 || o.NFFT != 400 || o.HopLength != 160 || o.SamplingRate != 16000 {
		t.Fatalf("processor_config feature extractor %+v, want spec §4.3's", o)
	}
	return o
}

func TestFFT(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 25, 49, 77, 100, 121, 143, 200, 400, 1000, 1024} {
		x := make([]complex128, n)
		for i := range x {
			x[i] = complex(rng.NormFloat64(), rng.NormFloat64())
		}
		want := make([]complex128, n)
		for k := range n {
			for j, v := range x {
				want[k] += v * unitRoot(j*k, n)
			}
		}
		got := append([]complex128(nil), x...)
		newFFTPlan(n).transform(got)
		worst := 0.0
		for k := range n {
			worst = max(worst, cmplx.Abs(got[k]-want[k]))
		}
		if worst > 1e-12*float64(n) {
			t.Errorf("n=%d (radices %v): max error %g", n, factorize(n), worst)
		}
	}
}

func TestRealPower(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{2, 3, 10, 15, 400, 401} {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		got := make([]float64, n/2+1)
		newRealPower(n).power(x, got)
		for k := range got {
			var X complex128
			for j, v := range x {
				X += complex(v, 0) * unitRoot(j*k, n)
			}
			want := real(X)*real(X) + imag(X)*imag(X)
			if math.Abs(got[k]-want) > 1e-11*max(1, want) {
				t.Errorf("n=%d bin %d: %g, want %g", n, k, got[k], want)
			}
		}
	}
}

func TestMelFilters(t *testing.T) {
	g := load(t, "omni/audio_mel_filters.npy") // [201, 128], float64 stored, read as float32
	sameShape(t, g, 201, 128)
	f64 := melFilters(128, 201, 16000)
	f32 := MelFilters(128, 400, 16000)
	if len(f32) != 128*201 {
		t.Fatalf("MelFilters: %d values, want %d", len(f32), 128*201)
	}
	worst := 0.0
	for m := range 128 {
		for k := range 201 {
			want := float64(g.F[k*128+m])
			got := f64[m*201+k]
			// The golden was narrowed to float32 on reading: half an ulp,
			// 2^-24 relative.
			if rel := math.Abs(got-want) / max(math.Abs(want), 1e-30); want != 0 || got != 0 {
				worst = max(worst, rel)
				if rel > 1e-7 {
					t.Errorf("filter %d bin %d: %g, want %g", m, k, got, want)
				}
			}
			if float32(got) != f32[m*201+k] {
				t.Fatalf("MelFilters and melFilters disagree at %d, %d", m, k)
			}
		}
	}
	t.Logf("mel filters: max relative |Δ| %.3g (the golden read as float32)", worst)
}

// checkLogMel compares features with a golden [1, 128, T] array.
func checkLogMel(t *testing.T, name string, got AudioFeatures, goldenPath string, tol float64) {
	t.Helper()
	g := load(t, goldenPath)
	sameShape(t, g, 1, got.Bins, got.Frames)
	d, at := maxAbsDiff(got.Mel, g.F)
	t.Logf("%s: %d bins x %d frames, max |Δ| %.3g vs %s", name, got.Bins, got.Frames, d, goldenPath)
	if d > tol {
		t.Errorf("%s: log-mel differs from %s by %g (bin %d, frame %d), tolerance %g", name, goldenPath, d, at/got.Frames, at%got.Frames, tol)
	}
}

// checkMask checks a golden feature_attention_mask against a clip's valid
// frames (one clip alone: all ones).
func checkMask(t *testing.T, name string, got AudioFeatures, maskPath string) {
	t.Helper()
	m := load(t, maskPath)
	sameShape(t, m, 1, got.Frames)
	for i, v := range m.I {
		if v != 1 {
			t.Fatalf("%s: mask[%d] = %d, want 1", name, i, v)
		}
	}
}

// Tolerances. Against the reference's numpy path (float64 STFT, complex64
// spectrum) the float64 computation agrees to the float32 output rounding;
// against its default torch.stft float32 path it agrees to that path's own
// float32 error, which the fixture READMEs put at 1.2e-5 to 4.1e-5.
const (
	tolNumpyPath = 1e-6
	tolTorchPath = 6e-5
)

func TestLogMelOmni(t *testing.T) {
	o := audioConfig(t)
	wave := load(t, "omni/audio_waveform.npy")
	got, err := LogMel(wave.F, o)
	if err != nil {
		t.Fatal(err)
	}
	if got.Frames != 130 || got.Bins != 128 {
		t.Fatalf("%d bins x %d frames, want 128 x 130", got.Bins, got.Frames)
	}
	checkLogMel(t, "omni audio (numpy path)", got, "omni/audio_input_features_np.npy", tolNumpyPath)
	checkLogMel(t, "omni audio (torch path)", got, "omni/audio_input_features.npy", tolTorchPath)
	checkMask(t, "omni audio", got, "omni/audio_feature_attention_mask.npy")
}

func TestLogMelLong(t *testing.T) {
	o := audioConfig(t)
	wave := load(t, "omni-video/long_audio_waveform.npy")
	got, err := LogMel(wave.F, o)
	if err != nil {
		t.Fatal(err)
	}
	if got.Frames != 1270 {
		t.Fatalf("%d frames, want 1270", got.Frames)
	}
	checkLogMel(t, "long audio (torch path)", got, "omni-video/long_audio_input_features.npy", tolTorchPath)
	checkMask(t, "long audio", got, "omni-video/long_audio_feature_attention_mask.npy")
	if n := AudioTokens(got.Frames); n != 165 {
		t.Errorf("AudioTokens(%d) = %d, want 165", got.Frames, n)
	}
}

func TestLogMelClefTiny(t *testing.T) {
	// The media records' clip is the request's 16-bit WAV, not the float
	// waveform it was made from.
	o := audioConfig(t)
	for _, c := range []struct{ name, features, mask string }{
		{"media_audio_noul", "clef-tiny/media/media_audio_noul_input_features.npy", "clef-tiny/media/media_audio_noul_feature_attention_mask.npy"},
		{"media_image_audio_multi", "clef-tiny/media/media_image_audio_multi_input_features.npy", "clef-tiny/media/media_image_audio_multi_feature_attention_mask.npy"},
	} {
		_, audio := mediaRequest(t, c.name)
		if len(audio) != 1 {
			t.Fatalf("%s: %d clips, want 1", c.name, len(audio))
		}
		got, err := LogMel(decodeWAV16(t, dataURL(t, audio[0], "audio/wav")), o)
		if err != nil {
			t.Fatal(err)
		}
		checkLogMel(t, c.name, got, c.features, tolTorchPath)
		checkMask(t, c.name, got, c.mask)
		if n := AudioTokens(got.Frames); n != 17 {
			t.Errorf("%s: AudioTokens(%d) = %d, want 17", c.name, got.Frames, n)
		}
	}
}

func TestAudioTokens(t *testing.T) {
	// The golden prompts' <|audio_pad|> counts (id 504).
	count := func(path string) int {
		n := 0
		for _, id := range load(t, path).I {
			if id == 504 {
				n++
			}
		}
		return n
	}
	if got, want := AudioTokens(130), count("omni/audio_input_ids.npy"); got != want {
		t.Errorf("AudioTokens(130) = %d, omni audio prompt has %d", got, want)
	}
	if got, want := AudioTokens(130), count("omni/mixed_input_ids.npy"); got != want {
		t.Errorf("AudioTokens(130) = %d, omni mixed prompt has %d", got, want)
	}
	// Spec §5.4's examples and the chunk edges.
	for _, c := range [][2]int{{0, 0}, {1, 1}, {8, 1}, {9, 2}, {99, 13}, {100, 13}, {101, 14}, {150, 20}, {1000, 130}, {1270, 165}, {3000, 390}, {30000, 3900}} {
		if got := AudioTokens(c[0]); got != c[1] {
			t.Errorf("AudioTokens(%d) = %d, want %d", c[0], got, c[1])
		}
	}
	// The reference's nested (x−1)//2+1 with floor division, literally.
	floorDiv := func(a, b int) int { return int(math.Floor(float64(a) / float64(b))) }
	for T := range 2000 {
		r := T % 100
		f := floorDiv(r-1, 2) + 1
		want := floorDiv(floorDiv(f-1, 2)+1-1, 2) + 1 + T/100*13
		if got := AudioTokens(T); got != want {
			t.Fatalf("AudioTokens(%d) = %d, reference formula %d", T, got, want)
		}
	}
}

func TestLogMelBatch(t *testing.T) {
	o := audioConfig(t)
	long := load(t, "omni-video/long_audio_waveform.npy").F
	short := load(t, "omni/audio_waveform.npy").F[:20000] // 125 frames exactly
	odd := long[:16123]                                   // not a multiple of the hop
	fs, err := LogMelBatch([][]float32{short, long, odd}, o)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := LogMel(long, o)
	if err != nil {
		t.Fatal(err)
	}
	// The longest clip is not padded: identical to it alone.
	if fs[1].Frames != alone.Frames || string(f32bytes(fs[1].Mel)) != string(f32bytes(alone.Mel)) {
		t.Error("the longest clip of a batch differs from the clip alone")
	}
	// Valid frames: min(⌈len/160⌉, ⌊len_max/160⌋).
	if fs[0].Frames != 125 || fs[2].Frames != 101 {
		t.Errorf("valid frames %d and %d, want 125 and 101", fs[0].Frames, fs[2].Frames)
	}
	// Frames whose window lies inside the clip do not see the padding; the
	// clip's floor (max−8) is the same as alone when its loudest frame is
	// inside too. Check those against the clip alone.
	shortAlone, err := LogMel(short, o)
	if err != nil {
		t.Fatal(err)
	}
	inner := (len(short) - 200) / 160 // frames f with f·160+200 ≤ len
	for m := range 128 {
		for f := range inner {
			a, b := fs[0].Mel[m*fs[0].Frames+f], shortAlone.Mel[m*shortAlone.Frames+f]
			if a != b {
				t.Fatalf("short clip bin %d frame %d: %g in the batch, %g alone", m, f, a, b)
			}
		}
	}
	// Padding by hand gives the same values, bit for bit, with any
	// padding_value: the frames of padding only, which LogMelBatch computes
	// once, enter the floor exactly as the reference's full STFT has them.
	// (A silent clip padded with a constant: only the padding and the step
	// into it carry energy.)
	silent := make([]float32, 16000)
	for _, c := range []struct {
		clip []float32
		pad  float64
	}{{short, 0}, {short, 0.25}, {silent, 0.5}} {
		oo := o
		oo.PaddingValue = c.pad
		fs, err := LogMelBatch([][]float32{c.clip, long}, oo)
		if err != nil {
			t.Fatal(err)
		}
		byHand := append(append([]float32(nil), c.clip...), make([]float32, len(long)-len(c.clip))...)
		for i := len(c.clip); i < len(byHand); i++ {
			byHand[i] = float32(c.pad)
		}
		whole, err := LogMel(byHand, oo)
		if err != nil {
			t.Fatal(err)
		}
		for m := range 128 {
			for f := range fs[0].Frames {
				if a, b := fs[0].Mel[m*fs[0].Frames+f], whole.Mel[m*whole.Frames+f]; a != b {
					t.Fatalf("padding %g, bin %d frame %d: %g in the batch, %g padded by hand", c.pad, m, f, a, b)
				}
			}
		}
	}
	// The last frame of the short clip sees zeros instead of its reflection.
	last := fs[0].Frames - 1
	same := true
	for m := range 128 {
		if fs[0].Mel[m*fs[0].Frames+last] != shortAlone.Mel[m*shortAlone.Frames+last] {
			same = false
		}
	}
	if same {
		t.Error("the short clip's last frame does not depend on the batch padding")
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		u := math.Float32bits(x)
		b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return b
}

func TestLogMelBadInput(t *testing.T) {
	o := audioConfig(t)
	ok := make([]float32, 16000)
	for _, c := range []struct {
		name  string
		clips [][]float32
		mod   func(*release.AudioProcessor)
		want  string
	}{
		{"no clips", nil, nil, "no audio"},
		{"empty clip", [][]float32{ok, {}}, nil, "empty"},
		{"too short", [][]float32{make([]float32, 200)}, nil, "STFT"},
		{"NaN", [][]float32{append(append([]float32(nil), ok...), float32(math.NaN()))}, nil, "NaN"},
		{"Inf", [][]float32{{float32(math.Inf(1))}}, nil, "Inf"},
		{"no mel bins", [][]float32{ok}, func(o *release.AudioProcessor) { o.FeatureSize = 0 }, "feature_size"},
		{"no n_fft", [][]float32{ok}, func(o *release.AudioProcessor) { o.NFFT = 0 }, "n_fft"},
		{"no hop", [][]float32{ok}, func(o *release.AudioProcessor) { o.HopLength = 0 }, "hop_length"},
		{"rate", [][]float32{ok}, func(o *release.AudioProcessor) { o.SamplingRate = 44100 }, "sampling_rate"},
		{"dither", [][]float32{ok}, func(o *release.AudioProcessor) { o.Dither = 1e-5 }, "dither"},
	} {
		oo := o
		if c.mod != nil {
			c.mod(&oo)
		}
		_, err := LogMelBatch(c.clips, oo)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	// The shortest clip the STFT accepts: one more sample than it pads.
	f, err := LogMel(make([]float32, 201), o)
	if err != nil || f.Frames != 1 {
		t.Errorf("201 samples: %d frames, %v; want 1 frame", f.Frames, err)
	}
	for _, v := range f.Mel {
		// Silence: log10(1e-10) = −10, floor −18, (−10+4)/4.
		if v != -1.5 {
			t.Fatalf("silence gives %g, want -1.5", v)
		}
	}
}

func TestPaddingPeak(t *testing.T) {
	// The frame of padding only, which LogMelBatch computes once: inside a
	// constant clip every frame is that frame, so the clip's largest feature
	// is (peak + 4)/4.
	o := audioConfig(t)
	o.PaddingValue = 0.3
	ex, err := newExtractor(o)
	if err != nil {
		t.Fatal(err)
	}
	clip := make([]float32, 4000)
	for i := range clip {
		clip[i] = 0.3
	}
	f, err := LogMel(clip, o)
	if err != nil {
		t.Fatal(err)
	}
	top := float32(math.Inf(-1))
	for _, v := range f.Mel {
		top = max(top, v)
	}
	if want := float32((ex.paddingPeak() + melOffset) / melDivisor); top != want {
		t.Errorf("constant clip's largest feature %g, padding frame's %g", top, want)
	}
}
