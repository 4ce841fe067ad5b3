package media

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
)

// TestWAVGolden decodes every WAV golden and compares with the reference's
// PyAV/FFmpeg decode. All of them match bit for bit: the 16 kHz mono one
// needs no conversion but samples/32768; the others go through the
// resampler and downmix, which reproduce libswresample's arithmetic
// (including the summation order of its x86 FMA kernels).
func TestWAVGolden(t *testing.T) {
	for _, name := range []string{
		"wav_s16_16k_mono", "wav_s16_44k1_stereo", "wav_u8_8k_mono",
		"wav_s24_48k_mono", "wav_f32_22k05_stereo",
	} {
		t.Run(name, func(t *testing.T) {
			data, want := auGolden(t, name+".wav")
			c, err := decodeWAV(data, 300)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Samples) != len(want) {
				t.Fatalf("%d samples, want %d", len(c.Samples), len(want))
			}
			maxd, mean, equal := auDiff(c.Samples, want)
			t.Logf("max |diff| %.3g, mean %.3g, %d of %d bit-equal", maxd, mean, equal, len(want))
			if equal != len(want) {
				t.Errorf("%d of %d samples differ (max %.3g): the decode should be bit-exact", len(want)-equal, len(want), maxd)
			}
		})
	}
}

// TestWAVSampleFormats checks each sample format's conversion to float at
// 16 kHz mono, where nothing else happens: FFmpeg's PCM decoders and
// libswresample's input conversions.
func TestWAVSampleFormats(t *testing.T) {
	le32 := func(v ...uint32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], x)
		}
		return b
	}
	le64 := func(v ...uint64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], x)
		}
		return b
	}
	i32 := func(v int32) uint32 { return uint32(v) }
	f32 := func(v float32) uint32 { return math.Float32bits(v) }
	for _, tc := range []struct {
		name      string
		tag, bits int
		data      []byte
		want      []float32
	}{
		{"u8", wavePCM, 8, []byte{0, 1, 127, 128, 129, 255}, []float32{-1, -127.0 / 128, -1.0 / 128, 0, 1.0 / 128, 127.0 / 128}},
		{"s16", wavePCM, 16, auS16(-32768, -1, 0, 1, 32767), []float32{-1, -1.0 / 32768, 0, 1.0 / 32768, 32767.0 / 32768}},
		// 12-bit PCM sits in 16-bit words; FFmpeg reads it as 16-bit.
		{"s12 in 16", wavePCM, 12, auS16(-32768, 16, 32752), []float32{-1, 16.0 / 32768, 32752.0 / 32768}},
		{"s24", wavePCM, 24, []byte{0, 0, 0x80, 0xff, 0xff, 0xff, 1, 0, 0, 0xff, 0xff, 0x7f},
			[]float32{-1, -1.0 / (1 << 23), 1.0 / (1 << 23), float32(0x7fffff) / (1 << 23)}},
		// 32-bit: the int32 rounds to float first (2^31−1 becomes 1.0).
		{"s32", wavePCM, 32, le32(i32(math.MinInt32), i32(-1), i32(math.MaxInt32), i32(123456789)),
			[]float32{-1, -1.0 / (1 << 31), 1, float32(123456789) / (1 << 31)}},
		{"s64", wavePCM, 64, le64(1<<63, 1<<62, 3), []float32{-1, 0.5, float32(3.0 / (1 << 63))}},
		{"f32", waveFloat, 32, le32(f32(0.25), f32(-1.5), f32(1e-30)), []float32{0.25, -1.5, 1e-30}},
		{"f64", waveFloat, 64, le64(math.Float64bits(0.1), math.Float64bits(-2)), []float32{0.1, -2}},
		// G.711: A-law 0xd5/0x55 are ±8, 0x80 is +5504, 0xaa is +32256;
		// µ-law 0xff/0x7f are 0, 0x80/0x00 are ±32124.
		{"A-law", waveALaw, 8, []byte{0xd5, 0x55, 0x80, 0xaa}, []float32{8.0 / 32768, -8.0 / 32768, 5504.0 / 32768, 32256.0 / 32768}},
		{"mu-law", waveMuLaw, 8, []byte{0xff, 0x7f, 0x80, 0x00}, []float32{0, 0, 32124.0 / 32768, -32124.0 / 32768}},
	} {
		c, err := decodeWAV(auWAV(tc.tag, 1, 16000, tc.bits, tc.data), 300)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(c.Samples) != len(tc.want) {
			t.Errorf("%s: %d samples, want %d", tc.name, len(c.Samples), len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if c.Samples[i] != w {
				t.Errorf("%s: sample %d = %g, want %g", tc.name, i, c.Samples[i], w)
			}
		}
	}
}

// TestWAVChunkLayouts wraps one golden's samples in the ways WAV files come:
// every variant must decode to the same clip.
func TestWAVChunkLayouts(t *testing.T) {
	data, want := auGolden(t, "wav_s16_44k1_stereo.wav")
	f, err := parseWAV(data)
	if err != nil {
		t.Fatal(err)
	}
	pcm := f.data
	fmtPlain := auChunk("fmt ", auFmt(wavePCM, 2, 44100, 16, 0, 0))
	fmtExt := auChunk("fmt ", auFmt(waveExtensible, 2, 44100, 16, chStereo, wavePCM))
	fmtEx18 := auChunk("fmt ", append(auFmt(wavePCM, 2, 44100, 16, 0, 0), 0, 0)) // WAVEFORMATEX, cbSize 0
	list := auChunk("LIST", []byte("INFOISFT\x05\x00\x00\x00Lavf\x00\x00"))
	odd := auChunk("junk", []byte{1, 2, 3}) // odd size: a pad byte follows
	fact := auChunk("fact", []byte{0x7e, 0xbd, 0, 0})
	streamed := append([]byte("data\xff\xff\xff\xff"), pcm...)
	ds64 := make([]byte, 28)
	binary.LittleEndian.PutUint64(ds64[8:], uint64(len(pcm)))
	rf64 := auRIFF(auChunk("ds64", ds64), fmtPlain, append([]byte("data\xff\xff\xff\xff"), pcm...))
	copy(rf64, "RF64")
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"extensible", auRIFF(fmtExt, auChunk("data", pcm))},
		{"WAVEFORMATEX", auRIFF(fmtEx18, auChunk("data", pcm))},
		{"LIST, odd chunk and fact first", auRIFF(list, odd, fmtPlain, fact, auChunk("data", pcm))},
		{"data before fmt", auRIFF(auChunk("data", pcm), fmtPlain)},
		{"chunks after data", auRIFF(fmtPlain, auChunk("data", pcm), list)},
		{"streamed size", auRIFF(fmtPlain, streamed)},
		{"RF64", rf64},
		{"trailing half frame", auRIFF(fmtPlain, auChunk("data", append(append([]byte(nil), pcm...), 9, 9, 9)))},
	} {
		c, err := decodeWAV(tc.file, 300)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if maxd, _, equal := auDiff(c.Samples, want); len(c.Samples) != len(want) || equal != len(want) {
			t.Errorf("%s: %d samples (want %d), max |diff| %.3g", tc.name, len(c.Samples), len(want), maxd)
		}
	}
	// A data chunk that claims more than the file holds (a cut-off file)
	// decodes what is there, like FFmpeg.
	cut := auRIFF(fmtPlain, auChunk("data", pcm))[:44+4*1000]
	c, err := decodeWAV(cut, 300)
	if err != nil {
		t.Fatalf("cut-off file: %v", err)
	}
	if n := len(c.Samples); n < 360 || n > 365 {
		t.Errorf("cut-off file of 1000 frames: %d samples, want about 363", n)
	}
}

// TestWAVMixdown checks the channel mixing at 16 kHz (no resampling):
// FFmpeg's automatic matrix for mono output, unnormalised because the
// output is float.
func TestWAVMixdown(t *testing.T) {
	const h = float32(math.Sqrt2 / 2) // -3 dB, as a float coefficient
	vals := []int16{1000, -2000, 3000, 4000, 5000, -6000, 7000, 8000}
	x := func(i int) float32 { return float32(vals[i]) / 32768 }
	for _, tc := range []struct {
		name  string
		chans int
		mask  uint32 // 0: plain WAVEFORMAT, PyAV's default layout
		want  float32
	}{
		// stereo: (L+R)·0.7071
		{"stereo", 2, 0, h*x(0) + h*x(1)},
		// 2.1: FL FR LFE; the LFE is left out.
		{"2.1", 3, 0, h*x(0) + h*x(1)},
		// 4.0: FL FR FC BC; the centre beside a front pair at clev·√2 (1 in
		// float), the back centre at slev·0.7071 = 0.5.
		{"4.0", 4, 0, h*x(0) + h*x(1) + x(2) + 0.5*x(3)},
		// 5.1(back): FL FR FC LFE BL BR.
		{"5.1", 6, 0, h*x(0) + h*x(1) + x(2) + 0.5*x(4) + 0.5*x(5)},
		// 7.1: FL FR FC LFE BL BR SL SR.
		{"7.1", 8, 0, h*x(0) + h*x(1) + x(2) + 0.5*x(4) + 0.5*x(5) + 0.5*x(6) + 0.5*x(7)},
		// Extensible: centre only with LFE (FC LFE) keeps the centre whole.
		{"FC+LFE", 2, chFrontCenter | chLowFrequency, x(0)},
		// FLC FRC and a centre: -3 dB each, centre whole.
		{"FC FLC FRC", 3, chFrontCenter | chFrontLeftOfCenter | chFrontRightOfCenter, x(0) + h*x(1) + h*x(2)},
		// A mask naming the wrong number of channels is ignored.
		{"bad mask", 2, chFrontCenter, h*x(0) + h*x(1)},
	} {
		frame := auS16(vals[:tc.chans]...)
		var pcm []byte
		for range 64 {
			pcm = append(pcm, frame...)
		}
		var file []byte
		if tc.mask == 0 {
			file = auWAV(wavePCM, tc.chans, 16000, 16, pcm)
		} else {
			file = auRIFF(auChunk("fmt ", auFmt(waveExtensible, tc.chans, 16000, 16, tc.mask, wavePCM)), auChunk("data", pcm))
		}
		c, err := decodeWAV(file, 300)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(c.Samples) != 64 || math.Abs(float64(c.Samples[10]-tc.want)) > 1e-7 {
			t.Errorf("%s: %d samples, [10] = %.9g, want %.9g", tc.name, len(c.Samples), c.Samples[10], tc.want)
		}
	}
	// Layouts libswresample cannot mix to mono are refused.
	for _, mask := range []uint32{chBackLeft | chBackRight, chFrontLeft | chBackLeft} {
		file := auRIFF(auChunk("fmt ", auFmt(waveExtensible, 2, 16000, 16, mask, wavePCM)), auChunk("data", auS16(1, 2)))
		if _, err := decodeWAV(file, 300); err == nil || !strings.Contains(err.Error(), "cannot be mixed down to mono") {
			t.Errorf("mask %#x: err %v, want a refusal to mix", mask, err)
		}
	}
}

// TestWAVErrors checks that malformed and unsupported files get clear
// errors.
func TestWAVErrors(t *testing.T) {
	pcm := auS16(1, 2, 3, 4)
	fmtOK := auChunk("fmt ", auFmt(wavePCM, 1, 16000, 16, 0, 0))
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte("RIFF\x00\x00"), "too short for a RIFF header"},
		{"not RIFF", []byte("FORM\x00\x00\x00\x00AIFF"), "not a RIFF file"},
		{"RIFX", []byte("RIFX\x00\x00\x00\x00WAVE"), "big-endian RIFX"},
		{"not WAVE", []byte("RIFF\x04\x00\x00\x00AVI "), `RIFF form "AVI ", not WAVE`},
		{"no fmt", auRIFF(auChunk("data", pcm)), "wav: no fmt chunk"},
		{"no data", auRIFF(fmtOK), "wav: no data chunk"},
		{"short fmt", auRIFF(auChunk("fmt ", make([]byte, 10)), auChunk("data", pcm)), "fmt chunk of 10 bytes"},
		{"cut fmt", auRIFF(fmtOK)[:30], "fmt chunk cut off"},
		{"40-bit", auWAV(wavePCM, 1, 16000, 40, pcm), "wav: 40-bit PCM not supported"},
		{"0-bit", auWAV(wavePCM, 1, 16000, 0, pcm), "wav: 0-bit PCM not supported"},
		{"16-bit float", auWAV(waveFloat, 1, 16000, 16, pcm), "wav: 16-bit float not supported"},
		{"ADPCM", auWAV(0x11, 1, 16000, 4, pcm), "format tag 0x0011 (IMA ADPCM) not supported"},
		{"MP3 in WAV", auWAV(0x55, 1, 16000, 0, pcm), "(MP3) not supported"},
		{"no channels", auWAV(wavePCM, 0, 16000, 16, pcm), "wav: 0 channels not supported"},
		{"9 channels", auWAV(wavePCM, 9, 16000, 16, pcm), "wav: 9 channels not supported (1 to 8)"},
		{"rate 0", auWAV(wavePCM, 1, 0, 16, pcm), "wav: sample rate 0 Hz not supported"},
		{"rate 2 MHz", auWAV(wavePCM, 1, 2000000, 16, pcm), "sample rate 2000000 Hz not supported"},
		{"unknown subformat", func() []byte {
			f := auFmt(waveExtensible, 1, 16000, 16, chFrontCenter, wavePCM)
			f[30] ^= 0xff // spoil the GUID's tail
			return auRIFF(auChunk("fmt ", f), auChunk("data", pcm))
		}(), "subformat"},
	} {
		_, err := decodeWAV(tc.file, 300)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestWAVTooLongBeforeDecoding: a header that declares 400 s over a short
// file is refused from the header, without decoding or allocating for
// 400 s.
func TestWAVTooLongBeforeDecoding(t *testing.T) {
	const rate = 48000
	file := auRIFF(auChunk("fmt ", auFmt(wavePCM, 2, rate, 16, 0, 0)), []byte("data\x00\x00\x00\x00"), auS16(1, 2, 3, 4))
	binary.LittleEndian.PutUint32(file[40:], 400*rate*4)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decodeWAV(file, 300)
	runtime.ReadMemStats(&after)
	var tl *clipTooLongError
	if !errors.As(err, &tl) || err.Error() != "audio is 400 s long, at most 300 s" {
		t.Fatalf("err %v, want the 400 s clip refused", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("refusing allocated %d bytes", n)
	}
	// Just over the limit shows enough decimals to say so.
	binary.LittleEndian.PutUint32(file[40:], (300*rate+10)*4)
	if _, err := decodeWAV(file, 300); err == nil || err.Error() != "audio is 300.000208 s long, at most 300 s" {
		t.Errorf("just over: err %v", err)
	}
	// A streamed file (size unknown) is measured by what it holds.
	binary.LittleEndian.PutUint32(file[40:], 0xffffffff)
	if c, err := decodeWAV(file, 300); err != nil || len(c.Samples) != 0 {
		t.Errorf("streamed 2-frame file: %v", err)
	}
}

// TestWAVTruncatedAndCorrupt decodes prefixes and bit-flipped copies of
// every WAV golden (the flips on its first 4 KiB, where the chunks are):
// errors are fine, panics are not, and no clip is longer than the limit
// allows.
func TestWAVTruncatedAndCorrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	for _, name := range []string{"wav_s16_16k_mono", "wav_s16_44k1_stereo", "wav_u8_8k_mono", "wav_s24_48k_mono", "wav_f32_22k05_stereo"} {
		data, _ := auGolden(t, name+".wav")
		check := func(what string, b []byte) {
			auNoPanic(t, name+" "+what, func() {
				c, err := decodeWAV(b, 5)
				if err == nil && len(c.Samples) > 5*SampleRate+64 {
					t.Fatalf("%s %s: %d samples, over the limit", name, what, len(c.Samples))
				}
			})
		}
		auMutations(data[:min(len(data), 4096)], check)
		for n := len(data) / 20; n < len(data); n += len(data) / 20 {
			check("long prefix", data[:n])
		}
	}
}
