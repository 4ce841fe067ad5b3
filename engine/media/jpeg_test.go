package media

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/npy"
)

// jpegFixtureDir holds the JPEG goldens: files and the reference's decode
// of each (see its README).
const jpegFixtureDir = "../../testdata/media-decode"

// jpegFixtures lists the jpeg_*.jpg cases of the fixture folder.
func jpegFixtures(t testing.TB) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(jpegFixtureDir, "jpeg_*.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no jpeg_*.jpg fixtures in %s", jpegFixtureDir)
	}
	return names
}

// TestDecodeJPEGGolden decodes every fixture and requires it to equal the
// reference's decode byte for byte.
func TestDecodeJPEGGolden(t *testing.T) {
	for _, path := range jpegFixtures(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".jpg")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want, err := npy.ReadFile(strings.TrimSuffix(path, ".jpg") + ".npy")
			if err != nil {
				t.Fatal(err)
			}
			if len(want.Shape) != 3 || want.Shape[2] != 3 {
				t.Fatalf("golden shape %v, want [H W 3]", want.Shape)
			}
			img, err := decodeJPEG(data)
			if err != nil {
				t.Fatal(err)
			}
			if img.Height != want.Shape[0] || img.Width != want.Shape[1] {
				t.Fatalf("decoded %dx%d, golden %dx%d", img.Width, img.Height, want.Shape[1], want.Shape[0])
			}
			maxDiff, sumDiff, off := 0, 0, 0
			firstX, firstY := -1, -1
			for i, w := range want.I {
				d := int(img.Pix[i]) - int(w)
				if d < 0 {
					d = -d
				}
				if d > 0 {
					if off == 0 {
						firstX, firstY = (i/3)%img.Width, i/3/img.Width
					}
					off++
				}
				sumDiff += d
				maxDiff = max(maxDiff, d)
			}
			if off > 0 {
				t.Errorf("%d of %d samples differ (max %d, mean %.4f), first at x=%d y=%d",
					off, len(want.I), maxDiff, float64(sumDiff)/float64(len(want.I)), firstX, firstY)
			}
			w, h, err := jpegSize(data)
			if err != nil || w != img.Width || h != img.Height {
				t.Errorf("jpegSize = %d, %d, %v; decoded %dx%d", w, h, err, img.Width, img.Height)
			}
		})
	}
}

// jpegSeg is one marker segment: its marker code and payload (without the
// length bytes); parameterless markers have a nil payload.
type jpegSeg struct {
	marker byte
	body   []byte
}

// splitJPEG cuts a well-formed file into the segments before its first scan
// (the SOS segment included, last) and everything after that scan header.
func splitJPEG(t *testing.T, data []byte) ([]jpegSeg, []byte) {
	t.Helper()
	var segs []jpegSeg
	p := 2
	for p+4 <= len(data) {
		if data[p] != 0xFF {
			t.Fatalf("no marker at %d", p)
		}
		m := data[p+1]
		n := int(data[p+2])<<8 | int(data[p+3])
		segs = append(segs, jpegSeg{m, append([]byte(nil), data[p+4:p+2+n]...)})
		p += 2 + n
		if m == mSOS {
			return segs, data[p:]
		}
	}
	t.Fatal("no SOS segment")
	return nil, nil
}

// joinJPEG reassembles a file from segments and the data after them.
func joinJPEG(segs []jpegSeg, tail []byte) []byte {
	b := []byte{0xFF, mSOI}
	for _, s := range segs {
		b = append(b, 0xFF, s.marker)
		if s.body != nil {
			n := len(s.body) + 2
			b = append(b, byte(n>>8), byte(n))
			b = append(b, s.body...)
		}
	}
	return append(b, tail...)
}

// editSegs returns a copy of segs with f applied to every segment of the
// given marker; f may return nil to drop it.
func editSegs(segs []jpegSeg, marker byte, f func([]byte) []byte) []jpegSeg {
	var out []jpegSeg
	for _, s := range segs {
		body := append([]byte(nil), s.body...)
		if s.marker == marker {
			body = f(body)
			if body == nil {
				continue
			}
		}
		out = append(out, jpegSeg{s.marker, body})
	}
	return out
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(jpegFixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDecodeJPEGBadInput feeds malformed and unsupported files and checks
// for a clear error naming the problem (and the same from jpegSize where
// the problem lies in the headers it reads).
func TestDecodeJPEGBadInput(t *testing.T) {
	base := readFixture(t, "jpeg_420_q90.jpg")
	segs, tail := splitJPEG(t, base)
	prog := readFixture(t, "jpeg_progressive.jpg")
	psegs, ptail := splitJPEG(t, prog)
	sof := func(f func(b []byte) []byte) []byte { return joinJPEG(editSegs(segs, mSOF0, f), tail) }
	sofMarker := func(m byte) []byte {
		var out []jpegSeg
		for _, s := range segs {
			if s.marker == mSOF0 {
				s.marker = m
			}
			out = append(out, s)
		}
		return joinJPEG(out, tail)
	}
	// The SOS segment is the last of segs.
	sos := func(f func(b []byte) []byte) []byte {
		out := editSegs(segs, mSOS, f)
		return joinJPEG(out, tail)
	}
	var dupSOF []jpegSeg
	for _, sg := range segs {
		if sg.marker == mSOS {
			for _, f := range segs {
				if f.marker == mSOF0 {
					dupSOF = append(dupSOF, f)
				}
			}
		}
		dupSOF = append(dupSOF, sg)
	}
	allOnes := append(bytes.Repeat([]byte{0xFF, 0x00}, 64), 0xFF, mEOI)

	cases := []struct {
		name    string
		data    []byte
		want    string // substring of the error
		sizeErr bool   // jpegSize fails too
		is      error  // errors.Is target, if any
	}{
		{"empty", nil, "no SOI", true, nil},
		{"not jpeg", []byte("\x89PNG\r\n\x1a\n"), "no SOI", true, nil},
		{"SOI only", []byte{0xFF, mSOI}, "truncated", true, errJPEGTruncated},
		{"zero width", sof(func(b []byte) []byte { b[3], b[4] = 0, 0; return b }), "empty image", true, nil},
		{"zero height", sof(func(b []byte) []byte { b[1], b[2] = 0, 0; return b }), "empty image", true, nil},
		{"too wide", sof(func(b []byte) []byte { b[3], b[4] = 0xFF, 0xFF; return b }), "exceeds", true, nil},
		{"two components", sof(func(b []byte) []byte { b[5] = 2; return b[:12] }), "2-component", true, nil},
		{"five components", sof(func(b []byte) []byte { b[5] = 5; return append(b, 4, 0x11, 0, 5, 0x11, 0) }), "5-component", true, nil},
		{"frame length", sof(func(b []byte) []byte { return append(b, 0) }), "frame header length", true, nil},
		{"12-bit", sof(func(b []byte) []byte { b[0] = 12; return b }), "12-bit", true, errJPEGUnsupported},
		{"arithmetic", sofMarker(0xC9), "arithmetic", true, errJPEGUnsupported},
		{"arithmetic progressive", sofMarker(0xCA), "arithmetic", true, errJPEGUnsupported},
		{"lossless", sofMarker(0xC3), "lossless", true, errJPEGUnsupported},
		{"hierarchical", sofMarker(0xC5), "hierarchical", true, errJPEGUnsupported},
		{"sampling 0", sof(func(b []byte) []byte { b[7] = 0x02; return b }), "sampling factors", true, nil},
		{"sampling 5", sof(func(b []byte) []byte { b[7] = 0x52; return b }), "sampling factors", true, nil},
		{"fractional sampling", sof(func(b []byte) []byte { b[7], b[10] = 0x31, 0x21; return b }), "fractional", false, errJPEGUnsupported},
		{"MCU too big", sof(func(b []byte) []byte { b[7], b[10] = 0x44, 0x22; return b }), "blocks per MCU", false, nil},
		{"duplicate SOF", joinJPEG(dupSOF, tail), "duplicate frame header", false, nil},
		{"no DHT", joinJPEG(editSegs(segs, mDHT, func([]byte) []byte { return nil }), tail), "Huffman table 0 is not defined", false, nil},
		{"no DQT", joinJPEG(editSegs(segs, mDQT, func([]byte) []byte { return nil }), tail), "quantization table 0 is not defined", false, nil},
		{"DQT index", joinJPEG(editSegs(segs, mDQT, func(b []byte) []byte { b[0] = 4; return b }), tail), "quantization table index", true, nil},
		{"DQT length", joinJPEG(editSegs(segs, mDQT, func(b []byte) []byte { return b[:40] }), tail), "quantization table segment", true, nil},
		{"DHT count", joinJPEG(editSegs(segs, mDHT, func(b []byte) []byte { b[16] = 200; return b }), tail), "Huffman table", false, nil},
		{"DHT overflow", joinJPEG(editSegs(segs, mDHT, func(b []byte) []byte {
			// Three 1-bit codes cannot exist.
			return append([]byte{b[0], 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 1, 2)
		}), tail), "bad Huffman table", false, nil},
		{"no SOF", joinJPEG(editSegs(segs, mSOF0, func([]byte) []byte { return nil }), tail), "before any frame header", true, nil},
		{"EOI before scan", append([]byte{0xFF, mSOI}, 0xFF, mEOI), "EOI before any scan", true, nil},
		{"unknown marker", joinJPEG(append([]jpegSeg{{0xF0, []byte{1, 2}}}, segs...), tail), "unknown or unexpected marker 0xFFF0", true, nil},
		{"bad segment length", append([]byte{0xFF, mSOI, 0xFF, mDQT, 0, 1}, base[2:]...), "bad length", true, nil},
		{"scan component", sos(func(b []byte) []byte { b[1] = 9; return b }), "unknown component id 9", false, nil},
		{"scan repeats component", sos(func(b []byte) []byte { b[3] = b[1]; return b }), "repeats or reorders", false, nil},
		{"scan length", sos(func(b []byte) []byte { return b[:len(b)-1] }), "bad scan header", false, nil},
		{"progressive DC band", joinJPEG(editSegs(psegs, mSOS, func(b []byte) []byte { b[len(b)-2] = 5; return b }), ptail), "invalid progressive scan", false, nil},
		{"bad Huffman code", joinJPEG(segs, allOnes), "invalid Huffman code", false, errJPEGBadCode},
		{"truncated scan", base[:len(base)-len(tail)/2], "truncated", false, errJPEGTruncated},
		{"truncated header", base[:len(base)-len(tail)-5], "truncated", false, errJPEGTruncated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img, err := decodeJPEG(c.data)
			if err == nil {
				t.Fatalf("decoded %dx%d, want an error containing %q", img.Width, img.Height, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want one containing %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %q is not %q", err, c.is)
			}
			_, _, serr := jpegSize(c.data)
			if c.sizeErr && serr == nil {
				t.Errorf("jpegSize succeeded, want an error like %q", err)
			}
			if !c.sizeErr && serr != nil {
				t.Errorf("jpegSize: %v, want success (the defect lies past the frame header)", serr)
			}
		})
	}
}

// TestDecodeJPEGTruncated cuts every fixture short. Like Pillow (which
// raises "image file is truncated"), the decoder must refuse any file that
// ends before its image data does; it must never panic.
func TestDecodeJPEGTruncated(t *testing.T) {
	for _, path := range jpegFixtures(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		// Every cut in the headers, then a spread over the scan data, up
		// to 16 bytes before the end (the last bytes may be padding, fill
		// and EOI that the decode does not need).
		step := max(1, len(data)/300)
		for n := 0; n < len(data)-16; n++ {
			if n > 700 && n%step != 0 {
				continue
			}
			img, err := decodeJPEG(data[:n])
			if err == nil {
				t.Fatalf("%s cut to %d of %d bytes decoded to %dx%d, want an error", name, n, len(data), img.Width, img.Height)
			}
			if n >= 2 && !errors.Is(err, errJPEGTruncated) && !strings.Contains(err.Error(), "EOI before") {
				t.Fatalf("%s cut to %d bytes: %v, want a truncation error", name, n, err)
			}
		}
	}
}

// TestDecodeJPEGCorrupt overwrites random bytes of every fixture: the
// decoder returns an image or an error, never panics, and an image it
// returns has the size jpegSize reports.
func TestDecodeJPEGCorrupt(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	decoded, failed := 0, 0
	for _, path := range jpegFixtures(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 150; i++ {
			b := append([]byte(nil), data...)
			for j := rng.Intn(8); j >= 0; j-- {
				p := rng.Intn(len(b))
				if rng.Intn(2) == 0 {
					b[p] ^= 1 << rng.Intn(8)
				} else {
					b[p] = byte(rng.Intn(256))
				}
			}
			if checkJPEGDecode(t, b) {
				decoded++
			} else {
				failed++
			}
		}
	}
	t.Logf("%d corrupted files decoded, %d refused", decoded, failed)
}

// checkJPEGDecode decodes data and checks an image it returns against
// jpegSize; it reports whether the decode succeeded.
func checkJPEGDecode(t testing.TB, data []byte) bool {
	img, err := decodeJPEG(data)
	if err != nil {
		return false
	}
	w, h, err := jpegSize(data)
	if err != nil {
		t.Fatalf("decoded %dx%d but jpegSize fails: %v", img.Width, img.Height, err)
	}
	if w != img.Width || h != img.Height || len(img.Pix) != 3*w*h {
		t.Fatalf("decoded %dx%d with %d bytes, jpegSize says %dx%d", img.Width, img.Height, len(img.Pix), w, h)
	}
	return true
}

// FuzzDecodeJPEG checks that no input panics and that jpegSize agrees with
// every successful decode. Frames over 4 MP are only sized, not decoded,
// to keep each run short (the front end refuses large frames first).
func FuzzDecodeJPEG(f *testing.F) {
	names, _ := filepath.Glob(filepath.Join(jpegFixtureDir, "jpeg_*.jpg"))
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, h, err := jpegSize(data)
		if err == nil && w*h > 4<<20 {
			return
		}
		checkJPEGDecode(t, data)
	})
}
