package media

import (
	"fmt"
	"math"
	"math/bits"
)

// This file holds the channel side of the audio conversion: which speaker
// each channel of a file feeds, and the coefficients with which
// libswresample (FFmpeg 5.1) mixes a layout down to mono when it builds its
// matrix by itself, as it does behind PyAV's AudioResampler.

// Speaker positions, as bits of a channel mask. FFmpeg's AV_CH_* bits and
// WAVE_FORMAT_EXTENSIBLE's dwChannelMask share them; a file's channels come
// in the order of their bits.
const (
	chFrontLeft          = 1 << 0
	chFrontRight         = 1 << 1
	chFrontCenter        = 1 << 2
	chLowFrequency       = 1 << 3
	chBackLeft           = 1 << 4
	chBackRight          = 1 << 5
	chFrontLeftOfCenter  = 1 << 6
	chFrontRightOfCenter = 1 << 7
	chBackCenter         = 1 << 8
	chSideLeft           = 1 << 9
	chSideRight          = 1 << 10
	chStereoDownmixLeft  = 1 << 29
	chStereoDownmixRight = 1 << 30

	chStereo = chFrontLeft | chFrontRight
)

// maxChannels is the most channels a clip may have.
const maxChannels = 8

// defaultLayout is the layout PyAV 10 gives a stream that names none: mono,
// stereo, 2.1, 4.0, 5.0, 5.1, 6.1 and 7.1 for one to eight channels.
func defaultLayout(channels int) uint64 {
	switch channels {
	case 1:
		return chFrontCenter
	case 2:
		return chStereo
	case 3:
		return chStereo | chLowFrequency
	case 4:
		return chStereo | chFrontCenter | chBackCenter
	case 5:
		return chStereo | chFrontCenter | chBackLeft | chBackRight
	case 6:
		return chStereo | chFrontCenter | chLowFrequency | chBackLeft | chBackRight
	case 7:
		return chStereo | chFrontCenter | chLowFrequency | chBackCenter | chSideLeft | chSideRight
	case 8:
		return chStereo | chFrontCenter | chLowFrequency | chBackLeft | chBackRight | chSideLeft | chSideRight
	}
	return 0
}

// monoMix returns, for each channel of layout (a mask of channels bits), the
// coefficient libswresample's automatic matrix gives it in a mono mix: the
// front pair at -3 dB, a centre channel whole (or at clev·√2 beside a front
// pair), back, side and back-centre channels at slev·(-3 dB), the pair
// beside the centre at -3 dB, and the LFE and every other speaker not at
// all. With float output the matrix is not normalised, so a stereo clip
// becomes (L + R)·0.7071. It returns nil for a single channel, which needs
// no mixing. Layouts libswresample refuses (no front speaker, or half of a
// pair) are refused here too.
func monoMix(layout uint64, channels int) ([]float64, error) {
	if channels == 1 {
		return nil, nil
	}
	if bits.OnesCount64(layout) != channels {
		return nil, fmt.Errorf("channel layout %#x does not name %d channels", layout, channels)
	}
	if layout == chStereoDownmixLeft|chStereoDownmixRight {
		layout = chStereo // a matrixed stereo pair mixes as plain stereo
	}
	pair := func(a, b uint64) bool { return (layout&a != 0) == (layout&b != 0) }
	if layout&(chStereo|chFrontCenter) == 0 || !pair(chFrontLeft, chFrontRight) ||
		!pair(chSideLeft, chSideRight) || !pair(chBackLeft, chBackRight) ||
		!pair(chFrontLeftOfCenter, chFrontRightOfCenter) {
		return nil, fmt.Errorf("channel layout %#x cannot be mixed down to mono", layout)
	}
	// The centre and surround levels are single-precision options (-3 dB).
	clev := float64(float32(math.Sqrt2 / 2))
	slev := clev
	var row [64]float64
	if layout&chFrontCenter != 0 {
		row[2] = 1
		if layout&chStereo != 0 {
			row[2] = clev * math.Sqrt2
		}
	}
	if layout&chStereo != 0 {
		row[0] += math.Sqrt2 / 2
		row[1] += math.Sqrt2 / 2
	}
	if layout&chBackCenter != 0 {
		row[8] += slev * math.Sqrt2 / 2
	}
	if layout&chBackLeft != 0 {
		row[4] += slev * math.Sqrt2 / 2
		row[5] += slev * math.Sqrt2 / 2
	}
	if layout&chSideLeft != 0 {
		row[9] += slev * math.Sqrt2 / 2
		row[10] += slev * math.Sqrt2 / 2
	}
	if layout&chFrontLeftOfCenter != 0 {
		row[6] += math.Sqrt2 / 2
		row[7] += math.Sqrt2 / 2
	}
	// LFE: lfe_mix_level 0. Every other speaker: 0.
	coef := make([]float64, 0, channels)
	for b := range 64 {
		if layout&(1<<b) != 0 {
			coef = append(coef, row[b])
		}
	}
	return coef, nil
}
