package processor

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
)

// Whisper's feature extractor builds its mel filters over 0–8000 Hz whatever
// the sampling rate (WhisperFeatureExtractor's mel_filter_bank call).
const (
	melMinHz = 0.0
	melMaxHz = 8000.0
)

// Slaney mel scale: linear below 1 kHz (3 mel per 200 Hz), logarithmic above
// (27 mel per factor 6.4).
const (
	slaneyMinLogHz  = 1000.0
	slaneyMinLogMel = 15.0
)

// Log-mel constants of the Whisper extractor.
const (
	melFloor   = 1e-10 // log10(max(mel, 1e-10))
	dynRange   = 8.0   // the floor below the clip's maximum
	melOffset  = 4.0   // (x + 4) / 4
	melDivisor = 4.0
)

// Audio token arithmetic of the AuT encoder (spec §5.4): 100-frame chunks
// (2·n_window), 13 tokens for a full chunk, three stride-2 convolutions.
const (
	audioChunkFrames = 100
	audioChunkTokens = 13
)

// maxClipSamples bounds one clip (an hour at 16 kHz): far above the hosted
// 300 s limit, small enough that a bad caller cannot ask for absurd work.
const maxClipSamples = 3600 * media.SampleRate

// AudioFeatures is one clip's log-mel: Mel [Bins, Frames] row-major, and Frames valid frames (feature_attention_mask sum).
//
// Only the valid frames are kept: the audio tower reads a clip's first
// feature_attention_mask.sum() frames and nothing else (spec §5.3).
type AudioFeatures struct {
	Mel          []float32 // [Bins, Frames]
	Bins, Frames int
}

// LogMel computes the Whisper log-mel features of a 16 kHz clip as the reference's processor call does.
//
// That call is WhisperFeatureExtractor with the release's settings (128
// Slaney mel filters, n_fft 400, hop 160), padding to the longest clip of
// the call and no truncation: a clip alone is not padded and gives
// len/hop frames (the STFT's last frame is dropped), all of them valid.
// Frames are centred (reflect padding of n_fft/2 on both sides) and
// weighted by a periodic Hann window; the power spectrum goes through the
// mel filters, log10(max(x, 1e-10)), the floor max−8 over the whole clip,
// and (x+4)/4. Arithmetic is float64, rounded to float32 at the end. Use
// LogMelBatch for several clips of one request: the reference pads them
// together, which changes the shorter clips' last frames.
func LogMel(samples []float32, o release.AudioProcessor) (AudioFeatures, error) {
	fs, err := LogMelBatch([][]float32{samples}, o)
	if err != nil {
		return AudioFeatures{}, err
	}
	return fs[0], nil
}

// LogMelBatch computes the log-mel features of the clips one processor call
// receives together (a request's audio list). As in the reference, every
// clip is right-padded with padding_value to the longest one before the
// STFT, so the maximum behind the max−8 floor is taken over the padded clip
// and a shorter clip's last frames see the padding rather than its own
// reflection. Clip i keeps min(⌈len_i/hop⌉, ⌊len_max/hop⌋) valid frames (the
// reference's feature_attention_mask).
func LogMelBatch(clips [][]float32, o release.AudioProcessor) ([]AudioFeatures, error) {
	ex, err := newExtractor(o)
	if err != nil {
		return nil, err
	}
	if len(clips) == 0 {
		return nil, fmt.Errorf("processor: no audio clips")
	}
	longest := 0
	for i, c := range clips {
		if len(c) == 0 {
			return nil, fmt.Errorf("processor: audio clip %d is empty", i)
		}
		if len(c) > maxClipSamples {
			return nil, fmt.Errorf("processor: audio clip %d has %d samples, more than %d", i, len(c), maxClipSamples)
		}
		for j, v := range c {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("processor: audio clip %d: sample %d is %v", i, j, v)
			}
		}
		longest = max(longest, len(c))
	}
	// torch.stft's reflect padding needs more samples than it pads.
	if longest <= ex.nfft/2 {
		return nil, fmt.Errorf("processor: audio clips are %d samples at most; the %d-point STFT needs more than %d", longest, ex.nfft, ex.nfft/2)
	}
	// The STFT of the centred, padded clips has 1 + that many frames; the
	// reference drops the last one. The mask has ⌊len_max/hop⌋ columns.
	frames := (longest + 2*(ex.nfft/2) - ex.nfft) / ex.hop
	out := make([]AudioFeatures, len(clips))
	for i, c := range clips {
		valid := min((len(c)+ex.hop-1)/ex.hop, longest/ex.hop, frames)
		out[i] = ex.features(c, longest, frames, valid)
	}
	return out, nil
}

// AudioTokens is the number of audio placeholder tokens for a clip of frames valid mel frames (spec §5.4's formula).
//
// 13 per full 100-frame chunk, and for the tail of r frames the length after
// three stride-2 convolutions, ⌈⌈⌈r/2⌉/2⌉/2⌉ = ⌈r/8⌉.
func AudioTokens(frames int) int {
	if frames <= 0 {
		return 0
	}
	half := func(n int) int { return (n + 1) / 2 }
	return frames/audioChunkFrames*audioChunkTokens + half(half(half(frames%audioChunkFrames)))
}

// MelFilters returns the [Bins, NFFT/2+1] Slaney mel filter bank (for tests and the tower's checks).
//
// It is transformers' mel_filter_bank(nfft/2+1, bins, 0, 8000, rate,
// norm="slaney", mel_scale="slaney") transposed: triangles between bins+2
// points equally spaced on the Slaney mel scale, each scaled by 2/(its width
// in Hz). It returns nil for non-positive sizes.
func MelFilters(bins, nfft, rate int) []float32 {
	if bins <= 0 || nfft <= 0 || rate <= 0 {
		return nil
	}
	f64 := melFilters(bins, nfft/2+1, rate)
	out := make([]float32, len(f64))
	for i, v := range f64 {
		out[i] = float32(v)
	}
	return out
}

// melFilters is the filter bank in float64, [bins, nfreq].
func melFilters(bins, nfreq, rate int) []float64 {
	// Filter edges: bins+2 points, equally spaced in mel, back to Hz.
	edges := linspace(hzToMel(melMinHz), hzToMel(melMaxHz), bins+2)
	for i, m := range edges {
		edges[i] = melToHz(m)
	}
	// Centre frequency of every FFT bin.
	freqs := linspace(0, float64(rate/2), nfreq)
	out := make([]float64, bins*nfreq)
	for m := range bins {
		lo, mid, hi := edges[m], edges[m+1], edges[m+2]
		norm := 2.0 / (hi - lo)
		for k, f := range freqs {
			down := -(lo - f) / (mid - lo)
			up := (hi - f) / (hi - mid)
			if w := max(0, min(down, up)); w > 0 {
				out[m*nfreq+k] = w * norm
			}
		}
	}
	return out
}

// hzToMel is the Slaney mel of a frequency.
func hzToMel(f float64) float64 {
	if f >= slaneyMinLogHz {
		return slaneyMinLogMel + math.Log(f/slaneyMinLogHz)*(27.0/math.Log(6.4))
	}
	return 3.0 * f / 200.0
}

// melToHz is the frequency of a Slaney mel.
func melToHz(m float64) float64 {
	if m >= slaneyMinLogMel {
		return slaneyMinLogHz * math.Exp(math.Log(6.4)/27.0*(m-slaneyMinLogMel))
	}
	return 200.0 * m / 3.0
}

// linspace is numpy's linspace with its endpoint: start + i·step, the last
// value exactly stop.
func linspace(start, stop float64, n int) []float64 {
	out := make([]float64, n)
	if n == 1 {
		out[0] = start
		return out
	}
	step := (stop - start) / float64(n-1)
	for i := range out {
		out[i] = float64(float64(i)*step) + start
	}
	out[n-1] = stop
	return out
}

// extractor holds one configuration's window, filters and sizes.
type extractor struct {
	nfft, hop, bins int
	pad             float32 // padding_value
	window          []float64
	filters         []float64 // [bins, nfft/2+1]
	lo, hi          []int     // non-zero range of each filter
}

func newExtractor(o release.AudioProcessor) (*extractor, error) {
	switch {
	case o.FeatureSize <= 0 || o.FeatureSize > 1024:
		return nil, fmt.Errorf("processor: feature_size %d must be in [1, 1024]", o.FeatureSize)
	case o.NFFT < 2 || o.NFFT > 1<<16:
		return nil, fmt.Errorf("processor: n_fft %d must be in [2, 65536]", o.NFFT)
	case o.HopLength <= 0 || o.HopLength > o.NFFT:
		return nil, fmt.Errorf("processor: hop_length %d must be in [1, n_fft %d]", o.HopLength, o.NFFT)
	case o.SamplingRate != 0 && o.SamplingRate != media.SampleRate:
		// The processor call passes sampling_rate 16000 and the extractor
		// refuses a mismatch.
		return nil, fmt.Errorf("processor: sampling_rate %d: clips are delivered at %d Hz", o.SamplingRate, media.SampleRate)
	case o.Dither != 0:
		return nil, fmt.Errorf("processor: dither %g: only dither 0 (the release's) is reproducible", o.Dither)
	case math.IsNaN(o.PaddingValue) || math.IsInf(o.PaddingValue, 0):
		return nil, fmt.Errorf("processor: padding_value %g is not finite", o.PaddingValue)
	}
	ex := &extractor{
		nfft:    o.NFFT,
		hop:     o.HopLength,
		bins:    o.FeatureSize,
		pad:     float32(o.PaddingValue),
		window:  make([]float64, o.NFFT),
		filters: melFilters(o.FeatureSize, o.NFFT/2+1, media.SampleRate),
		lo:      make([]int, o.FeatureSize),
		hi:      make([]int, o.FeatureSize),
	}
	// Periodic Hann window (torch.hann_window).
	for i := range ex.window {
		ex.window[i] = 0.5 - 0.5*math.Cos(2*math.Pi*float64(i)/float64(o.NFFT))
	}
	nfreq := o.NFFT/2 + 1
	for m := range ex.bins {
		row := ex.filters[m*nfreq : (m+1)*nfreq]
		lo, hi := 0, 0
		for k, w := range row {
			if w != 0 {
				if hi == 0 {
					lo = k
				}
				hi = k + 1
			}
		}
		ex.lo[m], ex.hi[m] = lo, hi
	}
	return ex, nil
}

// minFramesPerWorker keeps tiny clips on one goroutine.
const minFramesPerWorker = 512

// features computes one clip padded to length total. The floor needs the
// maximum over all frames of the padded clip; only the first valid are
// kept. Frames that see nothing but padding all have the same values, so
// one of them is computed for the maximum and the rest skipped: a short
// clip batched with a long one costs its own length.
func (ex *extractor) features(clip []float32, total, frames, valid int) AudioFeatures {
	logMel := make([]float64, valid*ex.bins) // [valid, bins]
	workers := min(runtime.GOMAXPROCS(0), max(1, frames/minFramesPerWorker))
	per := (frames + workers - 1) / workers
	peaks := make([]float64, workers)
	padded := make([]bool, workers)
	var wg sync.WaitGroup
	for w := range workers {
		f0, f1 := w*per, min(frames, (w+1)*per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			peaks[w], padded[w] = ex.logMelFrames(clip, total, f0, f1, valid, logMel)
		}()
	}
	wg.Wait()
	peak, anyPadded := math.Inf(-1), false
	for w, p := range peaks {
		peak = max(peak, p)
		anyPadded = anyPadded || padded[w]
	}
	if anyPadded {
		peak = max(peak, ex.paddingPeak())
	}
	floor := peak - dynRange
	mel := make([]float32, ex.bins*valid) // [bins, valid]
	for f := range valid {
		row := logMel[f*ex.bins : (f+1)*ex.bins]
		for m, v := range row {
			mel[m*valid+f] = float32((max(v, floor) + melOffset) / melDivisor)
		}
	}
	return AudioFeatures{Mel: mel, Bins: ex.bins, Frames: valid}
}

// onlyPadding reports whether the frame starting at sample start (of the
// clip padded to total and reflected at both ends) reads padding only.
func (ex *extractor) onlyPadding(clipLen, total, start int) bool {
	last := start + ex.nfft - 1
	// Indices past the end reflect to 2(total−1)−i, which must stay in the
	// padding too.
	return start >= clipLen && last <= 2*(total-1)-clipLen
}

// logMelFrames computes log10(max(mel, 1e-10)) of frames [f0, f1), writes
// those below valid into logMel ([valid, bins]) and returns their maximum,
// and whether it skipped frames that read padding only.
func (ex *extractor) logMelFrames(clip []float32, total, f0, f1, valid int, logMel []float64) (peak float64, padded bool) {
	n, half := ex.nfft, ex.nfft/2
	rp := newRealPower(n)
	frame := make([]float64, n)
	power := make([]float64, n/2+1)
	row := make([]float64, ex.bins)
	peak = math.Inf(-1)
	for f := f0; f < f1; f++ {
		start := f*ex.hop - half // first sample of the frame in the clip
		switch {
		case start >= 0 && start+n <= len(clip):
			for i, v := range clip[start : start+n] {
				frame[i] = float64(v) * ex.window[i]
			}
		case ex.onlyPadding(len(clip), total, start):
			padded = true
			continue
		default:
			for i := range frame {
				frame[i] = float64(ex.sample(clip, total, start+i)) * ex.window[i]
			}
		}
		out := row
		if f < valid {
			out = logMel[f*ex.bins : (f+1)*ex.bins]
		}
		peak = max(peak, ex.logMelFrame(rp, frame, power, out))
	}
	return peak, padded
}

// paddingPeak is the largest log-mel value of a frame of padding only.
func (ex *extractor) paddingPeak() float64 {
	frame := make([]float64, ex.nfft)
	for i := range frame {
		frame[i] = float64(ex.pad) * ex.window[i]
	}
	return ex.logMelFrame(newRealPower(ex.nfft), frame, make([]float64, ex.nfft/2+1), make([]float64, ex.bins))
}

// logMelFrame writes one windowed frame's log10 mel energies into out and
// returns their maximum.
func (ex *extractor) logMelFrame(rp *realPower, frame, power, out []float64) float64 {
	rp.power(frame, power)
	peak := math.Inf(-1)
	for m := range out {
		lo, hi := ex.lo[m], ex.hi[m]
		w := ex.filters[m*len(power)+lo : m*len(power)+hi]
		s := 0.0
		for k, p := range power[lo:hi] {
			s += w[k] * p
		}
		v := math.Log10(max(s, melFloor))
		out[m] = v
		peak = max(peak, v)
	}
	return peak
}

// sample is sample i of the clip padded to total samples and then reflected
// at both ends (torch.stft's center=True, pad_mode="reflect").
func (ex *extractor) sample(clip []float32, total, i int) float32 {
	if i < 0 {
		i = -i
	}
	if i >= total {
		i = 2*(total-1) - i
	}
	if i < len(clip) {
		return clip[i]
	}
	return ex.pad
}
