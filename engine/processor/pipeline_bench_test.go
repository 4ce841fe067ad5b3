package processor

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/media"
)

// pipelineSizes are the pictures of the request-to-patches benchmarks:
// 1280x800 (1,024,000 pixels, multiples of 32 inside IMAGE_SIZE, so
// smart_resize keeps it and no resize runs) and 1600x1000, which IMAGE_SIZE
// shrinks to 1280x800 (bicubic with antialiasing), so both end with the
// same 4000 patch rows.
var pipelineSizes = [][2]int{{1280, 800}, {1600, 1000}}

// photoJPEG encodes a seeded, photo-like w×h picture with the standard
// library's encoder (baseline, 4:2:0, quality 90): a sky-to-ground gradient,
// soft low-frequency colour waves, a few hard-edged discs and bars, and
// sensor-like noise, so that both the entropy decoder and the resampler see
// smooth areas, edges and fine detail. The same w, h always give the same
// bytes.
func photoJPEG(b *testing.B, w, h int) []byte {
	b.Helper()
	rng := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	type disc struct{ x, y, r float64 }
	var discs [6]disc
	var discRGB [len(discs)][3]float64
	for i := range discs {
		discs[i] = disc{rng.Float64() * float64(w), rng.Float64() * float64(h), (0.05 + 0.1*rng.Float64()) * float64(min(w, h))}
		for c := range 3 {
			discRGB[i][c] = 40 + 180*rng.Float64()
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		fy := float64(y) / float64(h)
		for x := range w {
			fx := float64(x) / float64(w)
			rgb := [3]float64{
				90 + 120*fy + 25*math.Sin(7*fx+3*fy),
				120 + 60*fy + 25*math.Sin(5*fy-4*fx),
				200 - 150*fy + 20*math.Cos(6*fx*fy),
			}
			for i, d := range discs {
				if dx, dy := float64(x)-d.x, float64(y)-d.y; dx*dx+dy*dy < d.r*d.r {
					rgb = discRGB[i]
				}
			}
			if (x/24)%9 == 0 && fy > 0.6 { // thin vertical bars: sharp edges
				rgb = [3]float64{30, 30, 35}
			}
			var px [3]uint8
			for c, v := range rgb {
				px[c] = uint8(max(0, min(255, v+rng.NormFloat64()*6)))
			}
			img.SetRGBA(x, y, color.RGBA{px[0], px[1], px[2], 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkJPEGToPatches runs the whole image path of a request on one
// photo-like JPEG: media.DecodeImage (the hosted limits' checks, then our
// libjpeg-turbo-exact decode to RGB) and Image with IMAGE_SIZE
// (smart_resize, Pillow-exact bicubic when needed, rescale, normalise,
// patchify). Bytes/s are of the JPEG file; Mpx/s of the decoded picture.
func BenchmarkJPEGToPatches(b *testing.B) {
	for _, sz := range pipelineSizes {
		w, h := sz[0], sz[1]
		b.Run(fmt.Sprintf("%dx%d", w, h), func(b *testing.B) {
			src := media.Source{Data: photoJPEG(b, w, h), ContentType: "image/jpeg"}
			o := benchImageOptions(b)
			lim := media.HostedLimits()
			b.SetBytes(int64(len(src.Data)))
			for b.Loop() {
				img, err := media.DecodeImage(src, lim)
				if err != nil {
					b.Fatal(err)
				}
				p, err := Image(img, o)
				if err != nil {
					b.Fatal(err)
				}
				if p.Rows != 4000 {
					b.Fatalf("%dx%d gave %d patch rows, want 4000", w, h, p.Rows)
				}
			}
			b.ReportMetric(float64(w*h)*float64(b.N)/1e6/b.Elapsed().Seconds(), "Mpx/s")
		})
	}
}

// BenchmarkJPEGToPatchesStages times the parts of BenchmarkJPEGToPatches apart
// on the same files: "decode" is media.DecodeImage alone, "processor" is
// Image alone on the decoded picture, and "resize" (only where smart_resize
// changes the size) is ResizeBicubic alone.
func BenchmarkJPEGToPatchesStages(b *testing.B) {
	o := benchImageOptions(b)
	lim := media.HostedLimits()
	for _, sz := range pipelineSizes {
		w, h := sz[0], sz[1]
		src := media.Source{Data: photoJPEG(b, w, h), ContentType: "image/jpeg"}
		img, err := media.DecodeImage(src, lim)
		if err != nil {
			b.Fatal(err)
		}
		rh, rw, err := SmartResize(h, w, o.PatchSize*o.MergeSize, o.MinPixels, o.MaxPixels)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dx%d/decode", w, h), func(b *testing.B) {
			b.SetBytes(int64(len(src.Data)))
			for b.Loop() {
				if _, err := media.DecodeImage(src, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%dx%d/processor", w, h), func(b *testing.B) {
			b.SetBytes(int64(len(img.Pix)))
			for b.Loop() {
				if _, err := Image(img, o); err != nil {
					b.Fatal(err)
				}
			}
		})
		if rh == h && rw == w {
			continue
		}
		b.Run(fmt.Sprintf("%dx%d/resize", w, h), func(b *testing.B) {
			b.SetBytes(int64(len(img.Pix)))
			for b.Loop() {
				ResizeBicubic(img, rw, rh)
			}
		})
	}
}
