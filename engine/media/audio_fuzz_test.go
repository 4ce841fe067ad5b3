package media

import (
	"os"
	"path/filepath"
	"testing"
)

// The seeds are the goldens cut short: a few frames decode in a few
// milliseconds, which keeps the fuzzer (and its minimisation of each new
// input) fast.

// auFuzzLimit is the clip limit the fuzz targets decode with.
const auFuzzLimit = 5

// auFuzzCheck fails on a clip longer than the limit allows (the resampler's
// edge adds a few samples at most).
func auFuzzCheck(t *testing.T, c *Clip, err error) {
	if err == nil && (c == nil || len(c.Samples) > auFuzzLimit*SampleRate+64) {
		t.Fatalf("clip of %d samples passes a %d s limit", len(c.Samples), auFuzzLimit)
	}
}

func FuzzDecodeWAV(f *testing.F) {
	for _, name := range []string{"wav_s16_16k_mono", "wav_s16_44k1_stereo", "wav_u8_8k_mono", "wav_s24_48k_mono", "wav_f32_22k05_stereo"} {
		data, err := os.ReadFile(filepath.Join(auDir, name+".wav"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[:min(len(data), 1500)])
		f.Add(data[:min(len(data), 300)])
	}
	tone := auS16(auTone(300, 2, 44100)...)
	f.Add(auRIFF(auChunk("fmt ", auFmt(waveExtensible, 2, 44100, 16, chStereo, wavePCM)), auChunk("data", tone)))
	f.Add(auWAV(waveFloat, 1, 8000, 64, make([]byte, 800)))
	f.Add(auWAV(waveMuLaw, 1, 8000, 8, []byte("some bytes of mu-law")))
	f.Add(auWAV(wavePCM, 6, 48000, 24, make([]byte, 6*3*200)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeWAV(data, auFuzzLimit)
		auFuzzCheck(t, c, err)
	})
}

func FuzzDecodeMP3(f *testing.F) {
	for _, name := range []string{"mp3_16k_mono_32k", "mp3_44k1_stereo_128k"} {
		data, err := os.ReadFile(filepath.Join(auDir, name+".mp3"))
		if err != nil {
			f.Fatal(err)
		}
		s, err := scanMP3(data)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[:s.frames[3].off])                // ID3 and three frames
		f.Add(data[s.frames[3].off:s.frames[6].off]) // a reservoir-starved start
		f0 := s.frames[0]
		info := auInfoFrame(data[f0.off:f0.off+4], f0.h.sideInfo, f0.h.size, uint32(len(s.frames)), 0, 576, 1200)
		f.Add(append(info, data[f0.off:s.frames[3].off]...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeMP3(data, auFuzzLimit)
		auFuzzCheck(t, c, err)
	})
}
