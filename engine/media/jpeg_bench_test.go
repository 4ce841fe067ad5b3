package media

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand"
	"testing"
)

// benchJPEG encodes a seeded 1280x800 (1 MP) picture with the standard
// library's encoder (baseline, 4:2:0, quality 90): smooth gradients, edges
// and noise, so that every stage of the decoder has work to do.
func benchJPEG(b *testing.B) []byte {
	b.Helper()
	const w, h = 1280, 800
	rng := rand.New(rand.NewSource(7))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r := uint8(x*255/w) ^ uint8(rng.Intn(24))
			g := uint8(y*255/h) + uint8(rng.Intn(16))
			bl := uint8((x/40+y/40)%2*160) + uint8(rng.Intn(32))
			img.SetRGBA(x, y, color.RGBA{r, g, bl, 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkDecodeJPEG measures a full decode to RGB of a 1 MP 4:2:0 JPEG.
func BenchmarkDecodeJPEG(b *testing.B) {
	data := benchJPEG(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := decodeJPEG(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeJPEGStdlib decodes the same file with image/jpeg, for
// comparison (it stops at YCbCr planes: no upsampling or RGB conversion).
func BenchmarkDecodeJPEGStdlib(b *testing.B) {
	data := benchJPEG(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
