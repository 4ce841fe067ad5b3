package processor

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/internal/npy"
)

// testdata is the repository's golden folder, seen from this package.
const testdata = "../../testdata"

// load reads a golden .npy file.
func load(t testing.TB, rel string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(filepath.Join(testdata, rel))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// rgbImage turns an [H, W, 3] uint8 array into an image.
func rgbImage(t testing.TB, a *npy.Array) *media.Image {
	t.Helper()
	if len(a.Shape) != 3 || a.Shape[2] != 3 || a.I == nil {
		t.Fatalf("want an [H, W, 3] integer array, got shape %v", a.Shape)
	}
	img := &media.Image{Height: a.Shape[0], Width: a.Shape[1], Pix: make([]byte, len(a.I))}
	for i, v := range a.I {
		img.Pix[i] = byte(v)
	}
	return img
}

// processorConfig is the tiny release's processor_config.json: the values of
// spec §4.3 (min_pixels 3136, max_pixels 12845056, patch 16, merge 2, mean
// and std 0.5), which the ../omni goldens were made with.
func processorConfig(t testing.TB) *release.Processor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "clef-tiny/release/processor_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := release.ParseProcessor(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mediaRequest returns the images and audio data URLs of a clef-tiny case.
func mediaRequest(t testing.TB, name string) (images, audio []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(testdata, "clef-tiny/cases.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c struct {
			Name    string `json:"name"`
			Request struct {
				Images []string `json:"images"`
				Audio  []string `json:"audio"`
			} `json:"request"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Name == name {
			return c.Request.Images, c.Request.Audio
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("case %q not in cases.jsonl", name)
	return nil, nil
}

// dataURL returns the bytes of a base64 data URL of the given media type.
func dataURL(t testing.TB, u, mediaType string) []byte {
	t.Helper()
	prefix := "data:" + mediaType + ";base64,"
	if !strings.HasPrefix(u, prefix) {
		t.Fatalf("not a %s data URL: %.40s", mediaType, u)
	}
	b, err := base64.StdEncoding.DecodeString(u[len(prefix):])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodePNG decodes an opaque PNG to RGB (the request's picture).
func decodePNG(t testing.TB, b []byte) *media.Image {
	t.Helper()
	m, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r := m.Bounds()
	img := &media.Image{Width: r.Dx(), Height: r.Dy(), Pix: make([]byte, 0, 3*r.Dx()*r.Dy())}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := color.NRGBAModel.Convert(m.At(x, y)).(color.NRGBA)
			if c.A != 0xff {
				t.Fatalf("pixel (%d, %d) is not opaque", x, y)
			}
			img.Pix = append(img.Pix, c.R, c.G, c.B)
		}
	}
	return img
}

// decodeWAV16 decodes a mono 16-bit PCM WAV to samples/32768, as the
// reference's decoding of the request's clip gives.
func decodeWAV16(t testing.TB, b []byte) []float32 {
	t.Helper()
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		t.Fatal("not a RIFF/WAVE file")
	}
	var format, channels, bits uint16
	for p := 12; p+8 <= len(b); {
		id, size := string(b[p:p+4]), int(binary.LittleEndian.Uint32(b[p+4:]))
		body := b[p+8 : min(len(b), p+8+size)]
		switch id {
		case "fmt ":
			format = binary.LittleEndian.Uint16(body[0:])
			channels = binary.LittleEndian.Uint16(body[2:])
			bits = binary.LittleEndian.Uint16(body[14:])
		case "data":
			if format != 1 || channels != 1 || bits != 16 {
				t.Fatalf("want mono 16-bit PCM, got format %d, %d channels, %d bits", format, channels, bits)
			}
			out := make([]float32, len(body)/2)
			for i := range out {
				out[i] = float32(int16(binary.LittleEndian.Uint16(body[2*i:]))) / 32768
			}
			return out
		}
		p += 8 + size + size%2
	}
	t.Fatal("no data chunk")
	return nil
}

// maxAbsDiff returns max |a−b| and its index.
func maxAbsDiff(a, b []float32) (float64, int) {
	d, at := 0.0, -1
	for i := range a {
		if e := math.Abs(float64(a[i]) - float64(b[i])); e > d || at < 0 {
			d, at = e, i
		}
	}
	return d, at
}

// sameShape fails unless the array has the given shape.
func sameShape(t testing.TB, a *npy.Array, shape ...int) {
	t.Helper()
	if fmt.Sprint(a.Shape) != fmt.Sprint(shape) {
		t.Fatalf("golden shape %v, want %v", a.Shape, shape)
	}
}
