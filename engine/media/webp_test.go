package media

import (
	"encoding/binary"
	"fmt"
	"image"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The reference's decodes of the WebP fixtures, exactly: lossy 4:2:0
// (libwebp's fancy upsampler and YUV->RGB), lossless with alpha (alpha
// dropped, not premultiplied), lossy with alpha at odd dimensions, and an
// animation (its first frame on the transparent black canvas).
func TestWebPLossy(t *testing.T)         { pwCheckExact(t, "webp_lossy", "webp") }
func TestWebPLosslessAlpha(t *testing.T) { pwCheckExact(t, "webp_lossless_alpha", "webp") }
func TestWebPLossyOddAlpha(t *testing.T) { pwCheckExact(t, "webp_lossy_odd_alpha", "webp") }
func TestWebPAnimated(t *testing.T)      { pwCheckExact(t, "webp_animated", "webp") }

// pwUpsampleRef is fancyUpsample written per output pixel rather than per
// row pair: for pixel (x, y) the nearest chroma sample nn is (x/2, y/2);
// the other row is the one on the far side vertically (none on the first
// row and on the last row of an even height), the other column likewise.
// With both: ((nn + 3*rowmate + 3*colmate + diagonal + 8)>>3 + nn)>>1; with
// only the other row: (3*nn + other + 2)>>2; with neither: nn.
func pwUpsampleRef(m *image.YCbCr, w, h int) []byte {
	cw, ch := (w+1)/2, (h+1)/2
	far := func(i, n, cn int) (int, bool) {
		if i == 0 {
			return 0, false
		}
		if i%2 == 1 {
			if (i+1)/2 >= cn {
				return 0, false
			}
			return (i + 1) / 2, true
		}
		return i/2 - 1, true
	}
	chroma := func(p []byte, x, y int) int {
		nx, ny := x/2, y/2
		fy, okY := far(y, h, ch)
		fx, okX := far(x, w, cw)
		at := func(cx, cy int) int { return int(p[cy*m.CStride+cx]) }
		nn := at(nx, ny)
		switch {
		case okX && okY:
			return ((nn+3*at(fx, ny)+3*at(nx, fy)+at(fx, fy)+8)>>3 + nn) >> 1
		case okY:
			return (3*nn + at(nx, fy) + 2) >> 2
		case okX: // the first row (or last row of an even height): one chroma row
			return ((nn+3*at(fx, ny)+3*nn+at(fx, ny)+8)>>3 + nn) >> 1
		}
		return nn
	}
	out := make([]byte, 3*w*h)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			yuvToRGB(out[3*(y*w+x):], int(m.Y[y*m.YStride+x]), chroma(m.Cb, x, y), chroma(m.Cr, x, y))
		}
	}
	return out
}

// TestWebPUpsampleEdges checks fancyUpsample's row-pair and edge handling
// at every small size, odd and even, on random planes.
func TestWebPUpsampleEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for h := 1; h <= 9; h++ {
		for w := 1; w <= 9; w++ {
			m := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
			for _, p := range [][]byte{m.Y, m.Cb, m.Cr} {
				for i := range p {
					p[i] = byte(rng.IntN(256))
				}
			}
			got := &Image{Width: w, Height: h, Pix: make([]byte, 3*w*h)}
			if err := fancyUpsample(got, m); err != nil {
				t.Fatal(err)
			}
			want := pwUpsampleRef(m, w, h)
			if s := pwDiff(got.Pix, want); s.first >= 0 {
				px := s.first / 3
				t.Fatalf("%dx%d: pixel (%d,%d) channel %d: got %d want %d", w, h, px%w, px/w, s.first%3, got.Pix[s.first], want[s.first])
			}
		}
	}
}

// TestWebPYUVToRGB pins libwebp's fixed-point conversion at a few points,
// worked by hand from its formula (R = (19077.y + 26149.v - 14234)>>6 and
// so on, a.b = (a*b)>>8): black (16,128,128), white (235,128,128), mid
// gray, the extremes of the code range, and a near-red.
func TestWebPYUVToRGB(t *testing.T) {
	for _, tc := range []struct {
		y, u, v int
		rgb     [3]byte
	}{
		{16, 128, 128, [3]byte{0, 0, 0}},
		{235, 128, 128, [3]byte{255, 255, 255}},
		{0, 0, 0, [3]byte{0, 136, 0}},
		{255, 255, 255, [3]byte{255, 125, 255}},
		{81, 90, 240, [3]byte{254, 0, 0}},
		{126, 128, 128, [3]byte{128, 128, 128}},
	} {
		var got [3]byte
		yuvToRGB(got[:], tc.y, tc.u, tc.v)
		if got != tc.rgb {
			t.Errorf("YUV %d,%d,%d: got %v want %v", tc.y, tc.u, tc.v, got, tc.rgb)
		}
	}
}

// pwANMF wraps a still WebP's frame chunks as the single ANMF frame of an
// animated WebP on a cw x ch canvas at (x, y) (even offsets).
func pwANMF(still []byte, cw, ch, x, y, fw, fh int) []byte {
	le24 := func(b []byte, v int) []byte { return append(b, byte(v), byte(v>>8), byte(v>>16)) }
	chunk := func(b []byte, id string, body []byte) []byte {
		b = append(b, id...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		if len(body)%2 == 1 {
			b = append(b, 0)
		}
		return b
	}
	// The frame's chunks: everything after the still's RIFF header and
	// VP8X chunk.
	frame := still[12:]
	if string(frame[:4]) == "VP8X" {
		frame = frame[18:]
	}
	anmf := le24(nil, x/2)
	anmf = le24(anmf, y/2)
	anmf = le24(anmf, fw-1)
	anmf = le24(anmf, fh-1)
	anmf = le24(anmf, 100)
	anmf = append(anmf, 0)
	anmf = append(anmf, frame...)
	vp8x := []byte{0x12, 0, 0, 0}
	vp8x = le24(vp8x, cw-1)
	vp8x = le24(vp8x, ch-1)
	b := []byte("RIFF\x00\x00\x00\x00WEBP")
	b = chunk(b, "VP8X", vp8x)
	b = chunk(b, "ANIM", []byte{0, 0, 0, 0, 0, 0})
	b = chunk(b, "ANMF", anmf)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// TestWebPAnimatedFrameOffset: the first frame of an animation lands at its
// offset on a black canvas, for lossy and lossless frames.
func TestWebPAnimatedFrameOffset(t *testing.T) {
	for _, name := range []string{"webp_lossy", "webp_lossless_alpha", "webp_lossy_odd_alpha"} {
		t.Run(name, func(t *testing.T) {
			still, fw, fh, want := pwGolden(t, name, "webp")
			const x, y = 6, 4
			cw, ch := fw+x+3, fh+y+5
			im, err := DecodeImage(Source{Data: pwANMF(still, cw, ch, x, y, fw, fh)}, HostedLimits())
			if err != nil {
				t.Fatal(err)
			}
			if im.Width != cw || im.Height != ch {
				t.Fatalf("canvas %dx%d, want %dx%d", im.Width, im.Height, cw, ch)
			}
			for py := 0; py < ch; py++ {
				for px := 0; px < cw; px++ {
					for c := 0; c < 3; c++ {
						var w byte
						if px >= x && px < x+fw && py >= y && py < y+fh {
							w = want[3*((py-y)*fw+px-x)+c]
						}
						if g := im.Pix[3*(py*cw+px)+c]; g != w {
							t.Fatalf("(%d,%d) channel %d: got %d want %d", px, py, c, g, w)
						}
					}
				}
			}
		})
	}
	// A frame that does not fit its canvas is refused.
	still, fw, fh, _ := pwGolden(t, "webp_lossy", "webp")
	if _, err := DecodeImage(Source{Data: pwANMF(still, fw, fh, 2, 0, fw, fh)}, HostedLimits()); err == nil {
		t.Fatal("frame outside the canvas accepted")
	}
}

// BenchmarkDecodeWebP decodes a 1024x1024 lossy WebP (1 MP) to RGB.
func BenchmarkDecodeWebP(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(pwDir, "webp_bench_1mp.webp"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeImage(Source{Data: data}, HostedLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWebPUpsample times the chroma upsampling and colour conversion
// alone on a 1 MP picture.
func BenchmarkWebPUpsample(b *testing.B) {
	const w, h = 1024, 1024
	m := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	for i := range m.Y {
		m.Y[i] = byte(i * 7)
	}
	for i := range m.Cb {
		m.Cb[i], m.Cr[i] = byte(i*3), byte(i*5)
	}
	out := &Image{Width: w, Height: h, Pix: make([]byte, 3*w*h)}
	for b.Loop() {
		if err := fancyUpsample(out, m); err != nil {
			b.Fatal(fmt.Sprint(err))
		}
	}
}
