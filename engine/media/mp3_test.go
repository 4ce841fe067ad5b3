package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	gomp3 "github.com/hajimehoshi/go-mp3"
)

// MP3 tolerances, measured against the reference's FFmpeg decode. go-mp3
// hands out samples truncated to 16 bits (int(x·32767)), so a sample is
// known to within 1/32767 (2/32767 around zero); taking the middle of that
// interval leaves at most about 1.5e-5 (3.05e-5 next to zero) plus go-mp3's
// own float differences. Measured: 16 kHz mono max 3.02e-5, mean 7.6e-6;
// 44.1 kHz stereo (resampled) max 2.80e-5, mean 4.1e-6.
const (
	mp3MaxTol  = 3.2e-5
	mp3MeanTol = 1e-5
)

func TestMP3Golden(t *testing.T) {
	for _, name := range []string{"mp3_16k_mono_32k", "mp3_44k1_stereo_128k"} {
		t.Run(name, func(t *testing.T) {
			data, want := auGolden(t, name+".mp3")
			c, err := decodeMP3(data, 300)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Samples) != len(want) {
				t.Fatalf("%d samples, want %d", len(c.Samples), len(want))
			}
			maxd, mean, equal := auDiff(c.Samples, want)
			t.Logf("max |diff| %.3g, mean %.3g, %d of %d bit-equal", maxd, mean, equal, len(want))
			if maxd > mp3MaxTol || mean > mp3MeanTol {
				t.Errorf("max |diff| %.3g (tolerance %.3g), mean %.3g (tolerance %.3g)", maxd, mp3MaxTol, mean, mp3MeanTol)
			}
		})
	}
}

// auInfoFrame builds a Xing/Info frame like the first audio frame of the
// stream (header first4, side information sideLen bytes, size bytes in
// all) carrying a frame count, a byte count and a LAME tag with the given
// encoder delay and padding.
func auInfoFrame(first4 []byte, sideLen, size int, frames, fileBytes uint32, delay, padding int) []byte {
	f := make([]byte, size)
	copy(f, first4)
	p := 4 + sideLen
	copy(f[p:], "Info")
	binary.BigEndian.PutUint32(f[p+4:], 3) // frames and bytes present
	binary.BigEndian.PutUint32(f[p+8:], frames)
	binary.BigEndian.PutUint32(f[p+12:], fileBytes)
	copy(f[p+16:], "LAME3.100")
	d := p + 16 + 21
	f[d], f[d+1], f[d+2] = byte(delay>>4), byte(delay<<4|padding>>8), byte(padding)
	return f
}

// TestMP3Gapless puts a LAME Info frame before the 16 kHz golden's frames:
// FFmpeg then drops the Info frame, skips delay+529 samples and trims the
// padding (less 529) at the end; without a frame or byte count it decodes
// the Info frame as (silent) audio.
func TestMP3Gapless(t *testing.T) {
	data, want := auGolden(t, "mp3_16k_mono_32k.mp3")
	s, err := scanMP3(data)
	if err != nil {
		t.Fatal(err)
	}
	f0 := s.frames[0]
	id3, frames := data[:f0.off], data[f0.off:]
	n := len(s.frames)
	total := n * 576
	for _, tc := range []struct {
		name           string
		delay, padding int
		count          uint32
		from, to       int // the golden's samples expected
		silence        int // silent samples before them
	}{
		{"delay 576, padding 1000", 576, 1000, uint32(n), 576 + 529, total - 1000 + 529, 0},
		{"padding under 529: nothing trimmed", 576, 100, uint32(n), 576 + 529, total, 0},
		{"skip over two frames", 1500, 700, uint32(n), 1500 + 529, total - 700 + 529, 0},
		{"no counts: the Info frame is audio", 0, 0, 0, 0, total, 576 - 529},
	} {
		info := auInfoFrame(frames[:4], f0.h.sideInfo, f0.h.size, tc.count, 0, tc.delay, tc.padding)
		file := append(append(append([]byte(nil), id3...), info...), frames...)
		c, err := decodeMP3(file, 300)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(c.Samples) != tc.silence+tc.to-tc.from {
			t.Errorf("%s: %d samples, want %d", tc.name, len(c.Samples), tc.silence+tc.to-tc.from)
			continue
		}
		for i, v := range c.Samples[:tc.silence] {
			if v != 0 {
				t.Fatalf("%s: sample %d = %g, want silence", tc.name, i, v)
			}
		}
		maxd, mean, _ := auDiff(c.Samples[tc.silence:], want[tc.from:tc.to])
		if maxd > mp3MaxTol || mean > mp3MeanTol {
			t.Errorf("%s: max |diff| %.3g, mean %.3g", tc.name, maxd, mean)
		}
	}
}

// auGoMP3 decodes a stream with go-mp3 as it is.
func auGoMP3(t *testing.T, b []byte) []byte {
	t.Helper()
	d, err := gomp3.NewDecoder(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	p, err := io.ReadAll(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMP3Reframe moves every frame boundary it can (other bitrate indices,
// main_data_begin adjusted): go-mp3 must decode the re-cut stream exactly
// as the original. This is the machinery that fixes go-mp3's frame sizes
// for padded MPEG-2 frames.
func TestMP3Reframe(t *testing.T) {
	for _, name := range []string{"mp3_16k_mono_32k", "mp3_44k1_stereo_128k"} {
		data, _ := auGolden(t, name+".mp3")
		s, err := scanMP3(data)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := s.recut(false)
		if err != nil {
			t.Fatal(err)
		}
		moved, err := s.recut(true)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(kept, moved) {
			t.Fatalf("%s: re-cutting moved nothing", name)
		}
		if !bytes.Equal(auGoMP3(t, kept), auGoMP3(t, moved)) {
			t.Errorf("%s: the re-cut stream decodes differently", name)
		}
	}
}

// TestMP3GoSize pins go-mp3's frame-size formula against the standard one:
// they differ exactly for padded MPEG-2 frames whose 72·bitrate/rate has a
// fraction under one half.
func TestMP3GoSize(t *testing.T) {
	h, ok, err := parseMP3Header([]byte{0xff, 0xf3, 0x40, 0xc4}) // MPEG-2, 32 kbit/s, 22.05 kHz
	if !ok || err != nil || h.rate != 22050 || !h.lsf {
		t.Fatalf("header: %+v %v %v", h, ok, err)
	}
	if got, want := h.goSize(4, 1), h.frameSize(4, 1); got != 104 || want != 105 {
		t.Errorf("32 kbit/s padded: go-mp3 %d, standard %d; want 104, 105", got, want)
	}
	if got, want := h.goSize(6, 1), h.frameSize(6, 1); got != want {
		t.Errorf("48 kbit/s padded: go-mp3 %d, standard %d", got, want)
	}
}

// TestMP3CutStream starts the 16 kHz golden at its sixth frame, whose bit
// reservoir reaches back into frames that are gone: that frame decodes to
// silence (FFmpeg zeroes it too), and from the third frame on, once the
// decoder's overlap has passed, the decode is the full stream's.
func TestMP3CutStream(t *testing.T) {
	data, _ := auGolden(t, "mp3_16k_mono_32k.mp3")
	s, _ := scanMP3(data)
	full, err := decodeMP3(data, 300)
	if err != nil {
		t.Fatal(err)
	}
	const drop = 5
	cut, err := decodeMP3(data[s.frames[drop].off:], 300)
	if err != nil {
		t.Fatal(err)
	}
	if len(cut.Samples) != len(full.Samples)-drop*576 {
		t.Fatalf("%d samples, want %d", len(cut.Samples), len(full.Samples)-drop*576)
	}
	for i, v := range cut.Samples[:576] {
		if v != 0 {
			t.Fatalf("sample %d of the starved frame = %g, want silence", i, v)
		}
	}
	if got, want := cut.Samples[3*576:], full.Samples[(drop+3)*576:]; !equalF32(got, want) {
		t.Errorf("frames after the cut decode differently")
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMP3Junk: junk between frames and an ID3v1 tag at the end are
// skipped; the decode is unchanged.
func TestMP3Junk(t *testing.T) {
	data, _ := auGolden(t, "mp3_44k1_stereo_128k.mp3")
	s, _ := scanMP3(data)
	clean, err := decodeMP3(data, 300)
	if err != nil {
		t.Fatal(err)
	}
	at := s.frames[10].off
	junk := append([]byte("\x00\x00junk\xff\x00 between frames"), make([]byte, 37)...)
	file := append(append(append([]byte(nil), data[:at]...), junk...), data[at:]...)
	file = append(file, append([]byte("TAG"), make([]byte, 125)...)...)
	c, err := decodeMP3(file, 300)
	if err != nil {
		t.Fatal(err)
	}
	if !equalF32(c.Samples, clean.Samples) {
		t.Errorf("junk changed the decode (%d samples, clean %d)", len(c.Samples), len(clean.Samples))
	}
}

func TestMP3Errors(t *testing.T) {
	data, _ := auGolden(t, "mp3_16k_mono_32k.mp3")
	s, _ := scanMP3(data)
	switched := append([]byte(nil), data...)
	switched[s.frames[7].off+3] &^= 0xc0 // frame 7: stereo
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"no frames", []byte("this is not an mp3 file at all, just text"), "mp3: no MPEG audio frames"},
		{"only ID3", data[:s.frames[0].off], "mp3: no MPEG audio frames"},
		{"cut ID3", data[:20], "ID3v2 tag of 45 bytes runs past the end"},
		{"MPEG-2.5", bytes.Repeat([]byte{0xff, 0xe3, 0x40, 0xc4, 0, 0, 0, 0}, 4), "MPEG-2.5 audio (8, 11.025 and 12 kHz) not supported"},
		{"free format", bytes.Repeat([]byte{0xff, 0xfb, 0x00, 0xc4}, 8), "mp3: free-format bitrate not supported"},
		{"mono to stereo", switched, "switches between mono and stereo"},
	} {
		_, err := decodeMP3(tc.file, 300)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestMP3TooLong refuses a clip over the limit from its frame headers.
func TestMP3TooLong(t *testing.T) {
	data, _ := auGolden(t, "mp3_44k1_stereo_128k.mp3")
	_, err := decodeMP3(data, 1)
	var tl *clipTooLongError
	if !errors.As(err, &tl) || err.Error() != "audio is 1.1 s long, at most 1 s" {
		t.Errorf("err %v, want the 1.15 s clip refused", err)
	}
}

// TestMP3TruncatedAndCorrupt decodes prefixes and bit-flipped copies of
// both MP3 goldens (the flips on their first six frames, to keep the
// test quick): errors are fine, panics are not.
func TestMP3TruncatedAndCorrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	for _, name := range []string{"mp3_16k_mono_32k", "mp3_44k1_stereo_128k"} {
		data, _ := auGolden(t, name+".mp3")
		s, err := scanMP3(data)
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, b []byte) {
			auNoPanic(t, name+" "+what, func() {
				c, err := decodeMP3(b, 5)
				if err == nil && len(c.Samples) > 5*SampleRate+64 {
					t.Fatalf("%s %s: %d samples, over the limit", name, what, len(c.Samples))
				}
			})
		}
		auMutations(data[:s.frames[6].off], check)
		for n := len(data) / 20; n < len(data); n += len(data) / 20 {
			check("long prefix", data[:n])
		}
	}
}

// BenchmarkDecodeMP3 decodes the 1.15 s, 44.1 kHz stereo golden (go-mp3,
// then resampling and downmix).
func BenchmarkDecodeMP3(b *testing.B) {
	data, _ := auGolden(b, "mp3_44k1_stereo_128k.mp3")
	for b.Loop() {
		if _, err := decodeMP3(data, 300); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMP3Segments: decoding in segments of any size, each decoder started
// a little early, joins to exactly the sequential decode.
func TestMP3Segments(t *testing.T) {
	for _, name := range []string{"mp3_16k_mono_32k", "mp3_44k1_stereo_128k"} {
		data, _ := auGolden(t, name+".mp3")
		s, _ := scanMP3(data)
		cut := data[s.frames[5].off:] // a reservoir-starved start
		for _, file := range [][]byte{data, cut} {
			whole, err := decodeMP3Segments(file, 300, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			for _, seg := range []int{1, 2, 3, 7, 16} {
				c, err := decodeMP3Segments(file, 300, seg)
				if err != nil {
					t.Fatalf("%s, segments of %d: %v", name, seg, err)
				}
				if !equalF32(c.Samples, whole.Samples) {
					t.Errorf("%s (%d bytes), segments of %d: differs from the sequential decode", name, len(file), seg)
				}
			}
		}
	}
}
