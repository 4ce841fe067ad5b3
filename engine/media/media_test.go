package media

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/npy"
)

// pwDir holds the decoding goldens (copied from the shared media-decode set).
const pwDir = "../../testdata/media-decode"

// pwGolden reads a fixture's encoded bytes and the reference's decode of it
// (uint8 [H, W, 3]).
func pwGolden(t testing.TB, name, ext string) (data []byte, w, h int, want []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(pwDir, name+"."+ext))
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.ReadFile(filepath.Join(pwDir, name+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Shape) != 3 || a.Shape[2] != 3 || a.I == nil {
		t.Fatalf("%s.npy: shape %v, want integer [H, W, 3]", name, a.Shape)
	}
	want = make([]byte, len(a.I))
	for i, v := range a.I {
		if v < 0 || v > 255 {
			t.Fatalf("%s.npy: value %d at %d is not a byte", name, v, i)
		}
		want[i] = byte(v)
	}
	return data, a.Shape[1], a.Shape[0], want
}

// pwStats compares two RGB buffers: the largest difference, the mean
// absolute difference, and the share of samples that differ.
type pwStats struct {
	max         int
	mean, share float64
	first       int // index of the first differing sample, -1 when equal
}

func pwDiff(got, want []byte) pwStats {
	s := pwStats{first: -1}
	sum, n := 0, 0
	for i := range want {
		d := int(got[i]) - int(want[i])
		if d < 0 {
			d = -d
		}
		if d != 0 {
			n++
			if s.first < 0 {
				s.first = i
			}
		}
		sum += d
		s.max = max(s.max, d)
	}
	s.mean = float64(sum) / float64(len(want))
	s.share = float64(n) / float64(len(want))
	return s
}

// pwCheckExact decodes a fixture through DecodeImage and requires every
// sample to equal the reference's.
func pwCheckExact(t *testing.T, name, ext string) {
	t.Helper()
	data, w, h, want := pwGolden(t, name, ext)
	im, err := DecodeImage(Source{Data: data}, HostedLimits())
	if err != nil {
		t.Fatal(err)
	}
	if im.Width != w || im.Height != h {
		t.Fatalf("decoded %dx%d, want %dx%d", im.Width, im.Height, w, h)
	}
	s := pwDiff(im.Pix, want)
	if s.first >= 0 {
		px := s.first / 3
		t.Fatalf("%s: %.4f%% of samples differ, max %d, mean %.4f; first at (x %d, y %d, channel %d): got %d want %d",
			name, 100*s.share, s.max, s.mean, px%w, px/w, s.first%3, im.Pix[s.first], want[s.first])
	}
	t.Logf("%s: %dx%d exact", name, w, h)
}

// FuzzDecodeImage: DecodeImage never panics, and what it accepts is a
// whole RGB picture within the limits. Seeds: the PNG, WebP (and a few
// JPEG) fixtures and small built files of each PNG colour type.
func FuzzDecodeImage(f *testing.F) {
	for _, name := range []string{"png_rgba.png", "png_palette.png", "png_gray16.png",
		"webp_lossy.webp", "webp_lossless_alpha.webp", "webp_lossy_odd_alpha.webp", "webp_animated.webp"} {
		data, err := os.ReadFile(filepath.Join(pwDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// JPEG fixtures too, where present, so DecodeImage's JPEG route is fuzzed.
	if jpegs, _ := filepath.Glob(filepath.Join(pwDir, "jpeg_*.jpg")); len(jpegs) > 0 {
		for _, p := range jpegs[:min(3, len(jpegs))] {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	for _, ct := range []int{0, 2, 3, 4, 6} {
		depth := 8
		var plte []byte
		if ct == 3 {
			plte = []byte{1, 2, 3, 4, 5, 6}
		}
		f.Add(pwPNG(5, 3, depth, ct, ct == 2, func(x, y, c int) int { return (x + y + c) % 2 }, plte, nil))
	}
	f.Add(pwIHDR(5000, 4000, 8, 2, false))
	lim := HostedLimits()
	lim.ImagePixels = 1 << 20 // keeps each run small; the check itself is what matters
	f.Fuzz(func(t *testing.T, data []byte) {
		im, err := DecodeImage(Source{Data: data}, lim)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if im.Width <= 0 || im.Height <= 0 || im.Width*im.Height > lim.ImagePixels || len(im.Pix) != 3*im.Width*im.Height {
			t.Fatalf("accepted a %dx%d picture with %d bytes", im.Width, im.Height, len(im.Pix))
		}
	})
}

// TestMediaImagesEndToEnd runs every image fixture (PNG, JPEG, WebP)
// through Images, four to a request as the hosted limits allow, and
// requires each to come out as the reference decoded it.
func TestMediaImagesEndToEnd(t *testing.T) {
	var names, exts []string
	for _, ext := range []string{"png", "jpg", "webp"} {
		files, err := filepath.Glob(filepath.Join(pwDir, "*."+ext))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), "."+ext)
			if _, err := os.Stat(filepath.Join(pwDir, name+".npy")); err == nil {
				names, exts = append(names, name), append(exts, ext)
			}
		}
	}
	if len(names) < 5 {
		t.Fatalf("only %d image fixtures", len(names))
	}
	for start := 0; start < len(names); start += 4 {
		end := min(start+4, len(names))
		var srcs []Source
		var wants [][]byte
		for i := start; i < end; i++ {
			data, _, _, want := pwGolden(t, names[i], exts[i])
			srcs = append(srcs, Source{Data: data, ContentType: "image/" + exts[i]})
			wants = append(wants, want)
		}
		ims, err := Images(srcs, HostedLimits())
		if err != nil {
			t.Fatal(err)
		}
		for i, im := range ims {
			if s := pwDiff(im.Pix, wants[i]); s.first >= 0 {
				t.Errorf("%s: %.4f%% of samples differ, max %d, mean %.4f", names[start+i], 100*s.share, s.max, s.mean)
			} else {
				t.Logf("%s: %dx%d exact", names[start+i], im.Width, im.Height)
			}
		}
	}
}
