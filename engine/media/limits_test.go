package media

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/npy"
)

// pwTinyPNG is a valid 4x3 RGB PNG.
func pwTinyPNG() []byte {
	return pwPNG(4, 3, 8, 2, false, func(x, y, c int) int { return 40*x + 20*y + c }, nil, nil)
}

// pwMP3Frames returns n MPEG-1 layer III frames (128 kbit/s, 44.1 kHz, 417
// bytes each) with zeroed bodies: enough for the sniffer, not for a decoder.
func pwMP3Frames(n int) []byte {
	var b []byte
	for range n {
		f := make([]byte, 417)
		copy(f, []byte{0xff, 0xfb, 0x90, 0x00})
		b = append(b, f...)
	}
	return b
}

// TestRefusals: every kind of bad item is refused with an *Error naming the
// list and the item, and a message saying what is wrong.
func TestRefusals(t *testing.T) {
	png := pwTinyPNG()
	lossy, _, _, _ := pwGolden(t, "webp_lossy", "webp")             // 3024 bytes
	lossless, _, _, _ := pwGolden(t, "webp_lossless_alpha", "webp") // 9102 bytes
	rgba, _, _, _ := pwGolden(t, "png_rgba", "png")
	hosted := HostedLimits()
	small := hosted
	small.ImageBytes = 1000
	small.ClipBytes = 1000
	total := hosted
	total.ImagesTotalBytes = len(lossy) + len(lossless) - 1
	ok := Source{Data: png, ContentType: "image/png"}
	wav := Source{Data: []byte("RIFF\x24\x00\x00\x00WAVEfmt "), ContentType: "audio/wav"}
	pad := func(magic string) []byte { return append([]byte(magic), make([]byte, 64)...) }

	for _, tc := range []struct {
		name  string
		audio bool
		srcs  []Source
		lim   Limits
		index int
		want  []string
	}{
		{"empty", false, []Source{ok, ok, {ContentType: "image/png"}}, hosted, 2, []string{"empty image (0 bytes)"}},
		{"oversized bytes", false, []Source{ok, {Data: lossless}}, small, 1, []string{"image is 8.89 KiB, at most 1000 bytes"}},
		{"total bytes over", false, []Source{{Data: lossy}, {Data: lossless}}, total, -1, []string{"12126 bytes in all, at most 12125 bytes"}},
		{"too many images", false, []Source{ok, ok, ok, ok, ok}, hosted, -1, []string{"5 items, at most 4"}},
		{"over 16 MP from the header", false, []Source{ok, {Data: pwIHDR(5000, 4000, 8, 2, false)}}, hosted, 1, []string{"5000x4000, 20 MP, at most 16 MP"}},
		{"16.38 MP", false, []Source{{Data: pwIHDR(4096, 4000, 8, 6, false)}}, hosted, 0, []string{"16.38 MP, at most 16 MP"}},
		{"just over 16 MP", false, []Source{{Data: pwIHDR(16_000_001, 1, 8, 0, false)}}, hosted, 0, []string{"16.000001 MP, at most 16 MP"}},
		{"zero width", false, []Source{{Data: pwIHDR(0, 10, 8, 2, false)}}, hosted, 0, []string{"image is 0x10: no pixels"}},
		{"truncated PNG", false, []Source{ok, {Data: rgba[:len(rgba)/2]}}, hosted, 1, []string{"PNG data ends early"}},
		{"PNG with no image data", false, []Source{{Data: pwIHDR(4, 4, 8, 2, false)}}, hosted, 0, []string{"PNG data"}},
		{"truncated WebP", false, []Source{{Data: lossy[:len(lossy)/2]}}, hosted, 0, []string{"WebP"}},
		{"truncated WebP header", false, []Source{{Data: lossy[:20]}}, hosted, 0, []string{"WebP header"}},
		{"truncated JPEG", false, []Source{ok, ok, ok, {Data: []byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")}}, hosted, 3, []string{"JPEG"}},
		{"GIF", false, []Source{ok, {Data: pad("GIF89a"), ContentType: "image/gif"}}, hosted, 1, []string{"bytes are a GIF image; PNG, JPEG or WebP expected"}},
		{"TIFF", false, []Source{{Data: pad("II*\x00")}}, hosted, 0, []string{"bytes are a TIFF image"}},
		{"BMP", false, []Source{{Data: pad("BM\x00\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00")}}, hosted, 0, []string{"bytes are a BMP image"}},
		{"HEIC", false, []Source{{Data: pad("\x00\x00\x00\x18ftypheic")}}, hosted, 0, []string{"bytes are a HEIC image"}},
		{"unknown format", false, []Source{{Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 250}}}, hosted, 0, []string{"no known format", "01 02 03 04 05 06 07 08", "PNG, JPEG or WebP expected"}},
		{"text", false, []Source{{Data: []byte("this is not a picture")}}, hosted, 0, []string{"bytes are text"}},
		{"audio type in images", false, []Source{ok, {Data: png, ContentType: "audio/wav"}}, hosted, 1, []string{"declared content type audio/wav is not an image type"}},
		{"sound bytes in images", false, []Source{{Data: wav.Data, ContentType: "image/png"}}, hosted, 0, []string{"bytes are a WAV audio file; PNG, JPEG or WebP expected"}},

		{"image type in audio", true, []Source{wav, {Data: png, ContentType: "image/png"}}, hosted, 1, []string{"declared content type image/png is not an audio type"}},
		{"image bytes as audio/wav", true, []Source{{Data: png, ContentType: "audio/wav"}}, hosted, 0, []string{"bytes are a PNG image; WAV or MP3 expected"}},
		{"too many clips", true, []Source{wav, wav, wav, wav, wav}, hosted, -1, []string{"5 items, at most 4"}},
		{"oversized clip", true, []Source{{Data: pwMP3Frames(3), ContentType: "audio/mpeg"}}, small, 0, []string{"clip is 1.22 KiB, at most 1000 bytes"}},
		{"empty clip", true, []Source{{ContentType: "audio/wav"}}, hosted, 0, []string{"empty clip (0 bytes)"}},
		{"RF64 without its ds64 chunk", true, []Source{{Data: pad("RF64\xff\xff\xff\xffWAVE")}}, hosted, 0, []string{"WAV"}},
		{"Ogg", true, []Source{{Data: pad("OggS")}}, hosted, 0, []string{"bytes are an Ogg audio file"}},
		{"FLAC", true, []Source{{Data: pad("fLaC")}}, hosted, 0, []string{"bytes are a FLAC audio file"}},
		{"M4A", true, []Source{{Data: pad("\x00\x00\x00\x20ftypM4A ")}}, hosted, 0, []string{"bytes are an M4A"}},
		{"unknown audio", true, []Source{{Data: []byte{0xff, 0xfb, 0x90, 0, 1, 2, 3}[:3]}}, hosted, 0, []string{"no known format", "WAV or MP3 expected"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			field := "images"
			if tc.audio {
				field = "audio"
				_, err = Audio(tc.srcs, tc.lim)
			} else {
				_, err = Images(tc.srcs, tc.lim)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want an *Error", err, err)
			}
			t.Log(e)
			if e.Field != field || e.Index != tc.index {
				t.Errorf("refusal names %s[%d], want %s[%d]: %v", e.Field, e.Index, field, tc.index, e)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Msg, w) {
					t.Errorf("message %q lacks %q", e.Msg, w)
				}
			}
			prefix := field + ": "
			if tc.index >= 0 {
				prefix = field + "[" + string(rune('0'+tc.index)) + "]: "
			}
			if !strings.HasPrefix(e.Error(), prefix) {
				t.Errorf("Error() = %q, want prefix %q", e.Error(), prefix)
			}
		})
	}
}

// TestLimitPixelsBeforeDecoding: the pixel limit is checked from the header
// alone, so a header claiming a huge picture is refused with nothing after
// it to decode, and one within the limit reaches the decoder (which then
// finds no image data).
func TestLimitPixelsBeforeDecoding(t *testing.T) {
	lim := HostedLimits()
	_, err := DecodeImage(Source{Data: pwIHDR(5000, 4000, 8, 2, false)}, lim)
	if err == nil || !strings.Contains(err.Error(), "20 MP, at most 16 MP") {
		t.Fatalf("5000x4000: %v", err)
	}
	_, err = DecodeImage(Source{Data: pwIHDR(4000, 4000, 8, 2, false)}, lim)
	if err == nil || strings.Contains(err.Error(), "MP") || !strings.Contains(err.Error(), "PNG data") {
		t.Fatalf("4000x4000 with no data: %v", err)
	}
	// Zero limits are no limits.
	if _, err := Images([]Source{{Data: pwTinyPNG()}, {Data: pwTinyPNG()}}, Limits{}); err != nil {
		t.Fatalf("zero limits: %v", err)
	}
	lim.ImagePixels = 11
	if _, err := DecodeImage(Source{Data: pwTinyPNG()}, lim); err == nil || !strings.Contains(err.Error(), "4x3") {
		t.Fatalf("4x3 against 11 pixels: %v", err)
	}
}

// TestMediaDeclaredTypeOfSameKind: a declared type naming another format of
// the right kind is accepted and the bytes decide, as with Pillow; so are an
// empty type and application/octet-stream.
func TestMediaDeclaredTypeOfSameKind(t *testing.T) {
	lossy, w, h, want := pwGolden(t, "webp_lossy", "webp")
	for _, ct := range []string{"image/png", "image/jpeg", "image/heic", "", "application/octet-stream"} {
		ims, err := Images([]Source{{Data: lossy, ContentType: ct}}, HostedLimits())
		if err != nil {
			t.Fatalf("%q: %v", ct, err)
		}
		if ims[0].Width != w || ims[0].Height != h || pwDiff(ims[0].Pix, want).first >= 0 {
			t.Fatalf("%q: decode differs", ct)
		}
	}
}

// TestMediaFormat checks the sniffers on real files and built headers.
func TestMediaFormat(t *testing.T) {
	png := pwTinyPNG()
	lossy, _, _, _ := pwGolden(t, "webp_lossy", "webp")
	id3 := append([]byte("ID3\x04\x00\x00\x00\x00\x00\x0a"), make([]byte, 10)...)
	mpeg2 := make([]byte, 2*288) // MPEG-2 layer III, 64 kbit/s, 16 kHz: 72*64000/16000 = 288 bytes a frame
	copy(mpeg2, []byte{0xff, 0xf3, 0x88, 0x00})
	copy(mpeg2[288:], []byte{0xff, 0xf3, 0x88, 0x00})
	for _, tc := range []struct {
		name        string
		data        []byte
		image, snd  string
		description string
	}{
		{"png", png, "png", "", "a PNG image"},
		{"jpeg", []byte("\xff\xd8\xff\xdb\x00\x43"), "jpeg", "", "a JPEG image"},
		{"webp", lossy, "webp", "", "a WebP image"},
		{"wav", []byte("RIFF\x00\x00\x00\x00WAVEfmt "), "", "wav", "a WAV audio file"},
		{"mp3 frames", pwMP3Frames(2), "", "mp3", "an MP3 audio file"},
		{"mp3 one frame", pwMP3Frames(1)[:100], "", "mp3", "an MP3 audio file"},
		{"mpeg-2 layer III", mpeg2, "", "mp3", "an MP3 audio file"},
		{"id3 then frames", append(id3, pwMP3Frames(2)...), "", "mp3", "an MP3 audio file"},
		{"id3 alone", id3[:10], "", "mp3", "an MP3 audio file"},
		{"id3 then flac", append(id3, "fLaC\x00\x00\x00\x22"...), "", "", "a FLAC audio file"},
		{"frame then junk", append(pwMP3Frames(1), 1, 2, 3, 4, 5), "", "", ""},
		{"layer II", []byte{0xff, 0xfd, 0x90, 0x00}, "", "", "an MPEG layer II audio stream"},
		{"reserved layer", []byte{0xff, 0xf9, 0x90, 0x00, 0, 0}, "", "", "an AAC (ADTS) audio stream"},
		{"free format", []byte{0xff, 0xfb, 0x00, 0x00, 1, 2}, "", "", ""},
		{"bad rate", []byte{0xff, 0xfb, 0x9c, 0x00, 1, 2}, "", "", ""},
		{"empty", nil, "", "", ""},
		{"gif", []byte("GIF87a"), "", "", "a GIF image"},
		{"avif", []byte("\x00\x00\x00\x1cftypavif"), "", "", "an AVIF image"},
		{"mp4", []byte("\x00\x00\x00\x1cftypisom"), "", "", "an MP4 file"},
		{"webm", []byte("\x1a\x45\xdf\xa3\x01"), "", "", "a WebM/Matroska file"},
		{"riff other", []byte("RIFF\x00\x00\x00\x00AVI LIST"), "", "", "an AVI video"},
		{"data url text", []byte("data:image/png;base64,iVBOR"), "", "", "a data URL in text (base64-encoded twice?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ImageFormat(tc.data); got != tc.image {
				t.Errorf("ImageFormat = %q, want %q", got, tc.image)
			}
			if got := AudioFormat(tc.data); got != tc.snd {
				t.Errorf("AudioFormat = %q, want %q", got, tc.snd)
			}
			if got := sniff(tc.data).desc; got != tc.description {
				t.Errorf("sniff = %q, want %q", got, tc.description)
			}
		})
	}
}

// TestMediaErrorText pins the two shapes of Error's text.
func TestMediaErrorText(t *testing.T) {
	if s := (&Error{"images", 2, "bad"}).Error(); s != "images[2]: bad" {
		t.Error(s)
	}
	if s := (&Error{"audio", -1, "5 items, at most 4"}).Error(); s != "audio: 5 items, at most 4" {
		t.Error(s)
	}
}

// TestMediaAudioRouting: clips go to the decoder their bytes call for,
// whatever audio type they declare, and the duration limit reaches the
// decoders. (How close the decodes are is the WAV and MP3 tests' business.)
func TestMediaAudioRouting(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(pwDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wavData, mp3Data := read("wav_s16_16k_mono.wav"), read("mp3_16k_mono_32k.mp3")
	want, err := npy.ReadFile(filepath.Join(pwDir, "wav_s16_16k_mono.npy"))
	if err != nil {
		t.Fatal(err)
	}
	clips, err := Audio([]Source{{Data: wavData, ContentType: "audio/mpeg"}, {Data: mp3Data, ContentType: "audio/wav"}}, HostedLimits())
	if err != nil {
		t.Fatal(err)
	}
	if len(clips[0].Samples) != want.Len() {
		t.Errorf("WAV: %d samples, want %d", len(clips[0].Samples), want.Len())
	}
	if len(clips[1].Samples) == 0 {
		t.Error("MP3: no samples")
	}
	lim := HostedLimits()
	lim.ClipSeconds = 0.5
	for i, src := range []Source{{Data: wavData}, {Data: mp3Data}} {
		_, err := Audio([]Source{src}, lim)
		var e *Error
		if !errors.As(err, &e) || e.Index != 0 || !strings.Contains(e.Msg, "long, at most 0.5 s") {
			t.Errorf("clip %d against 0.5 s: %v", i, err)
		}
	}
}

// TestCheckVideos: the hosted video limits (2 videos of at most 16 MiB,
// clips and videos at most 16 MiB together) and the declared type are
// checked before any decoding, each refusal naming the item or the list.
func TestCheckVideos(t *testing.T) {
	lim := HostedLimits()
	if lim.Videos != 2 || lim.VideoBytes != 16<<20 || lim.VideoSeconds != 60 || lim.AVTotalBytes != 16<<20 {
		t.Fatalf("hosted video limits %+v", lim)
	}
	v := func(n int, ct string) Source { return Source{Data: make([]byte, n), ContentType: ct} }
	clip := v(6<<20, "audio/wav")
	for _, tc := range []struct {
		name          string
		videos, clips []Source
		index         int // -2: no refusal
		want          string
	}{
		{"none", nil, []Source{clip, clip, clip}, -2, ""},
		{"two within limits", []Source{v(5<<20, "video/mp4"), v(5<<20, "")}, []Source{clip}, -2, ""},
		{"octet-stream", []Source{v(10, "application/octet-stream")}, nil, -2, ""},
		{"three videos", []Source{v(10, "video/mp4"), v(10, "video/mp4"), v(10, "video/webm")}, nil, -1, "3 items, at most 2"},
		{"empty", []Source{v(10, "video/mp4"), v(0, "video/mp4")}, nil, 1, "empty video (0 bytes)"},
		{"oversized", []Source{v(16<<20+1, "video/mp4")}, nil, 0, "video is 16777217 bytes, at most 16777216 bytes"},
		{"audio type", []Source{v(10, "audio/mp4")}, nil, 0, "declared content type audio/mp4 is not a video type"},
		{"audio and video over", []Source{v(8<<20, "video/mp4"), v(3<<20, "video/mp4")}, []Source{clip}, -1, "audio and videos are 17 MiB together, at most 16 MiB"},
	} {
		err := CheckVideos(tc.videos, tc.clips, lim)
		if tc.index == -2 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var me *Error
		if !errors.As(err, &me) || me.Field != "videos" || me.Index != tc.index || !strings.Contains(me.Msg, tc.want) {
			t.Errorf("%s: %v, want videos item %d saying %q", tc.name, err, tc.index, tc.want)
		}
	}
	if err := CheckVideos([]Source{v(10, "video/mp4"), v(10, "video/mp4"), v(10, "video/mp4")}, nil, Limits{}); err != nil {
		t.Errorf("zero limits: %v", err)
	}
}
