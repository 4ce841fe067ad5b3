package video

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Hand-built containers: ISO BMFF boxes and EBML elements.

func isoBox(typ string, payload ...[]byte) []byte {
	n := 8
	for _, p := range payload {
		n += len(p)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	b = append(b, typ...)
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

func ftyp(brand string) []byte { return isoBox("ftyp", []byte(brand+"\x00\x00\x02\x00isomiso2mp41")) }

// mvhd0 is a version-0 movie header with the given timescale and duration.
func mvhd0(timescale, duration uint32) []byte {
	p := make([]byte, 100)
	binary.BigEndian.PutUint32(p[12:], timescale)
	binary.BigEndian.PutUint32(p[16:], duration)
	return isoBox("mvhd", p)
}

func mvhd1(timescale uint32, duration uint64) []byte {
	p := make([]byte, 112)
	p[0] = 1
	binary.BigEndian.PutUint32(p[20:], timescale)
	binary.BigEndian.PutUint64(p[24:], duration)
	return isoBox("mvhd", p)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// ebml writes one element: its ID bytes as given, a size of 8 bytes (or
// unknown), and the payload.
func ebml(id uint32, unknown bool, payload ...[]byte) []byte {
	var b []byte
	for s := 24; s >= 0; s -= 8 {
		if c := byte(id >> s); c != 0 || len(b) > 0 {
			b = append(b, c)
		}
	}
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	if unknown {
		b = append(b, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	} else { // an 8-byte size: the length marker 0x01, then 7 bytes
		b = append(b, 0x01)
		for s := 48; s >= 0; s -= 8 {
			b = append(b, byte(uint64(n)>>s))
		}
	}
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

func ebmlHeader(docType string) []byte {
	return ebml(idEBML, false, ebml(0x4286, false, []byte{1}), ebml(idDocType, false, []byte(docType)))
}

func f64(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }
func f32(v float32) []byte { return binary.BigEndian.AppendUint32(nil, math.Float32bits(v)) }

func TestProbe(t *testing.T) {
	mdat := isoBox("mdat", make([]byte, 64))
	info := func(parts ...[]byte) []byte { return ebml(idInfo, false, parts...) }
	cluster := ebml(idCluster, false, make([]byte, 32))
	big := cat(binary.BigEndian.AppendUint32(nil, 1), []byte("mdat"), binary.BigEndian.AppendUint64(nil, 16+40), make([]byte, 40))
	cases := []struct {
		name    string
		data    []byte
		want    Container
		wantErr string // substring of the message; "" for success
	}{
		{"mp4 faststart", cat(ftyp("isom"), isoBox("moov", mvhd0(1000, 3000)), mdat), Container{"mp4", 3, false}, ""},
		{"mp4 moov at end", cat(ftyp("mp42"), mdat, isoBox("moov", mvhd0(600, 900))), Container{"mp4", 1.5, true}, ""},
		{"mp4 mvhd v1, 64-bit mdat", cat(ftyp("isom"), big, isoBox("moov", mvhd1(90000, 90000*61))), Container{"mp4", 61, true}, ""},
		{"mp4 last box to the end", cat(ftyp("isom"), isoBox("moov", mvhd0(1000, 500)), []byte{0, 0, 0, 0, 'm', 'd', 'a', 't', 1, 2, 3}), Container{"mp4", 0.5, false}, ""},
		{"mp4 fragmented (mehd)", cat(ftyp("iso5"), isoBox("moov", mvhd0(1000, 0), isoBox("mvex", isoBox("mehd", []byte{0, 0, 0, 0, 0, 0, 0x13, 0x88}))), isoBox("moof", make([]byte, 8)), mdat), Container{"mp4", 5, false}, ""},
		{"mp4 unknown duration", cat(ftyp("isom"), isoBox("moov", mvhd0(1000, math.MaxUint32)), mdat), Container{"mp4", 0, false}, ""},
		{"quicktime without ftyp", cat(isoBox("wide"), mdat, isoBox("moov", mvhd0(600, 1200))), Container{"mp4", 2, true}, ""},
		{"mp4 without moov", cat(ftyp("isom"), mdat), Container{}, "no moov box"},
		{"mp4 moov without mvhd", cat(ftyp("isom"), isoBox("moov", isoBox("trak")), mdat), Container{}, "no mvhd"},
		{"mp4 truncated", cat(ftyp("isom"), isoBox("moov", mvhd0(1000, 3000)), mdat)[:150], Container{}, "truncated"},
		{"mp4 garbage after ftyp", cat(ftyp("isom"), []byte{0x00, 0x00, 0x01, 0x00, 0xde, 0xad, 0xbe, 0xef}, make([]byte, 300)), Container{}, "no valid box at offset 28"},
		{"mp4 box smaller than its header", cat(ftyp("isom"), []byte{0, 0, 0, 4, 'f', 'r', 'e', 'e'}), Container{}, "impossible size 4"},
		{"mp4 stray bytes at the end", cat(ftyp("isom"), isoBox("moov", mvhd0(1000, 3000)), []byte{1, 2, 3}), Container{}, "3 stray bytes"},
		{"mp4 two moov", cat(ftyp("isom"), isoBox("moov", mvhd0(1000, 3000)), isoBox("moov", mvhd0(1000, 3000))), Container{}, "second moov"},
		{"heic", cat(ftyp("heic"), isoBox("meta")), Container{}, "HEIC image"},
		{"avif", cat(ftyp("avif"), isoBox("meta")), Container{}, "AVIF image"},

		{"webm", cat(ebmlHeader("webm"), ebml(idSegment, false, info(ebml(idTimecodeScale, false, []byte{0x0f, 0x42, 0x40}), ebml(idDuration, false, f64(2500))), cluster)), Container{"webm", 2.5, false}, ""},
		{"matroska, float32 duration, other scale", cat(ebmlHeader("matroska"), ebml(idSegment, false, ebml(0x114D9B74, false, make([]byte, 10)), info(ebml(idTimecodeScale, false, []byte{0x01, 0x86, 0xa0}), ebml(idDuration, false, f32(45000))))), Container{"webm", 4.5, false}, ""},
		{"webm live (unknown sizes, no duration)", cat(ebmlHeader("webm"), ebml(idSegment, true, info(ebml(0x4D80, false, []byte("x"))), ebml(idCluster, true, make([]byte, 20)))), Container{"webm", 0, false}, ""},
		{"webm default timecode scale", cat(ebmlHeader("webm"), ebml(idSegment, false, info(ebml(idDuration, false, f64(61000))))), Container{"webm", 61, false}, ""},
		{"webm NaN duration", cat(ebmlHeader("webm"), ebml(idSegment, false, info(ebml(idDuration, false, f64(math.NaN()))))), Container{"webm", 0, false}, ""},
		// Finite in TimecodeScale units, infinite in seconds (found by FuzzProbe).
		{"webm duration overflowing in seconds", cat(ebmlHeader("webm"), ebml(idSegment, false, info(ebml(idDuration, false, f64(1e303))))), Container{"webm", 0, false}, ""},
		{"webm cut in the middle", cat(ebmlHeader("webm"), ebml(idSegment, false, info(ebml(idDuration, false, f64(1000))), cluster))[:70], Container{}, "truncated"},
		{"webm no segment", ebmlHeader("webm"), Container{}, "no Segment"},
		{"webm bad duration size", cat(ebmlHeader("webm"), ebml(idSegment, false, info(ebml(idDuration, false, []byte{1, 2, 3})))), Container{}, "Duration is 3 bytes"},
		{"ebml of another doctype", cat(ebmlHeader("foo"), ebml(idSegment, false)), Container{}, `DocType "foo"`},
		{"ebml header damaged", []byte{0x1a, 0x45, 0xdf, 0xa3, 0x00, 0x00}, Container{}, "WebM"},

		{"empty", nil, Container{}, "empty video (0 bytes)"},
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), Container{}, "bytes are a PNG image, not an MP4 or WebM video"},
		{"jpeg", []byte("\xff\xd8\xff\xe0\x00\x10JFIF"), Container{}, "a JPEG image"},
		{"avi", []byte("RIFF\x00\x00\x00\x00AVI LIST"), Container{}, "an AVI video"},
		{"text", []byte("hello, world"), Container{}, "they start 68 65 6c 6c 6f 2c 20 77"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Probe(c.data)
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("Probe = %+v, want an error containing %q", got, c.wantErr)
				}
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("error %q does not wrap ErrCorrupt", err)
				}
				if !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("error %q does not contain %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if got != c.want {
				t.Errorf("Probe = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestProbeFixtures probes the committed clips.
func TestProbeFixtures(t *testing.T) {
	for name, want := range map[string]Container{
		"h264_aac_bt709.mp4":     {"mp4", 1.6, true},
		"h264_fullrange_big.mp4": {"mp4", 0.3, false},
		"vp9_opus.webm":          {"webm", 1.608, false},
	} {
		data, err := os.ReadFile(filepath.Join(goldenDir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Probe(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Format != want.Format || got.MoovAfterMdat != want.MoovAfterMdat || math.Abs(got.Duration-want.Duration) > 1e-9 {
			t.Errorf("%s: Probe = %+v, want %+v", name, got, want)
		}
	}
}

// FuzzProbe: no input makes Probe panic or run long, and what it accepts is
// one of the two containers with a usable duration.
func FuzzProbe(f *testing.F) {
	mdat := isoBox("mdat", make([]byte, 16))
	f.Add(cat(ftyp("isom"), isoBox("moov", mvhd0(1000, 3000)), mdat))
	f.Add(cat(ftyp("isom"), mdat, isoBox("moov", mvhd1(1000, 3000), isoBox("mvex", isoBox("mehd", make([]byte, 8))))))
	f.Add(cat(isoBox("moov", mvhd0(600, 1200)), mdat))
	f.Add(cat(ebmlHeader("webm"), ebml(idSegment, false, ebml(idInfo, false, ebml(idTimecodeScale, false, []byte{0x0f, 0x42, 0x40}), ebml(idDuration, false, f64(2500))))))
	f.Add(cat(ebmlHeader("matroska"), ebml(idSegment, true, ebml(idInfo, false, ebml(idDuration, false, f32(1))), ebml(idCluster, true))))
	for _, name := range []string{"h264_aac_bt709.mp4", "h264_fullrange_big.mp4", "vp9_opus.webm"} {
		if data, err := os.ReadFile(filepath.Join(goldenDir, name)); err == nil {
			f.Add(data[:min(len(data), 4096)])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Probe(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || err.Error() == "" {
				t.Fatalf("error %q does not wrap ErrCorrupt", err)
			}
			return
		}
		if c.Format != "mp4" && c.Format != "webm" {
			t.Fatalf("format %q", c.Format)
		}
		if !(c.Duration >= 0) || math.IsInf(c.Duration, 0) {
			t.Fatalf("duration %v", c.Duration)
		}
		if c.MoovAfterMdat && c.Format != "mp4" {
			t.Fatal("MoovAfterMdat on a WebM")
		}
	})
}
