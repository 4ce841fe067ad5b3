package processor

import (
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
)

// syntheticImage is a noisy gradient of the given size.
func syntheticImage(w, h int) *media.Image {
	rng := rand.New(rand.NewPCG(5, 6))
	img := &media.Image{Width: w, Height: h, Pix: make([]byte, 3*w*h)}
	for y := range h {
		for x := range w {
			for c := range 3 {
				img.Pix[3*(y*w+x)+c] = byte((x*255/w+y*255/h)/2 + c*40 + rng.IntN(32))
			}
		}
	}
	return img
}

// benchImageOptions is the release's image processor with IMAGE_SIZE.
func benchImageOptions(b *testing.B) release.ImageProcessor {
	o := processorConfig(b).Image
	o.MinPixels, o.MaxPixels = ImageSize.MinPixels, ImageSize.MaxPixels
	return o
}

// BenchmarkImage1MP runs the processor on a 1280x800 picture (1,024,000
// pixels: inside IMAGE_SIZE, so no resize) — rescale, normalise, patchify.
func BenchmarkImage1MP(b *testing.B) {
	img := syntheticImage(1280, 800)
	o := benchImageOptions(b)
	b.SetBytes(int64(len(img.Pix)))
	for b.Loop() {
		if _, err := Image(img, o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImage1080p runs the processor on a 1920x1080 picture, which
// IMAGE_SIZE shrinks to 1344x768 (bicubic with antialiasing).
func BenchmarkImage1080p(b *testing.B) {
	img := syntheticImage(1920, 1080)
	o := benchImageOptions(b)
	b.SetBytes(int64(len(img.Pix)))
	for b.Loop() {
		if _, err := Image(img, o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLogMel300s computes the log-mel of 300 s of noise (the hosted
// API's longest clip).
func BenchmarkLogMel300s(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	clip := make([]float32, 300*media.SampleRate)
	for i := range clip {
		clip[i] = float32(rng.NormFloat64() * 0.1)
	}
	o := processorConfig(b).Audio
	for b.Loop() {
		if _, err := LogMel(clip, o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(clip))*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}
