package media

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"math/rand/v2"
	"strings"
	"testing"
)

// The reference's decodes of the three PNG fixtures, exactly.
func TestPNGRGBA(t *testing.T)    { pwCheckExact(t, "png_rgba", "png") }
func TestPNGPalette(t *testing.T) { pwCheckExact(t, "png_palette", "png") }
func TestPNGGray16(t *testing.T)  { pwCheckExact(t, "png_gray16", "png") }

// pwChunk appends one PNG chunk with its CRC.
func pwChunk(b []byte, typ string, data []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	start := len(b)
	b = append(b, typ...)
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
}

// pwIHDR returns a PNG signature and IHDR chunk.
func pwIHDR(w, h, depth, ctype int, interlace bool) []byte {
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	il := byte(0)
	if interlace {
		il = 1
	}
	ihdr = append(ihdr, byte(depth), byte(ctype), 0, 0, il)
	return pwChunk([]byte("\x89PNG\r\n\x1a\n"), "IHDR", ihdr)
}

// pwPNG encodes a PNG of any colour type and depth, optionally Adam7
// interlaced, with unfiltered rows. sample(x, y, c) gives channel c of a
// pixel at the image's depth.
func pwPNG(w, h, depth, ctype int, interlace bool, sample func(x, y, c int) int, plte, trns []byte) []byte {
	channels := map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
	type pass struct{ x0, y0, dx, dy int }
	passes := []pass{{0, 0, 1, 1}}
	if interlace {
		passes = []pass{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}
	}
	var raw []byte
	for _, p := range passes {
		for y := p.y0; y < h; y += p.dy {
			if p.x0 >= w {
				break
			}
			raw = append(raw, 0) // filter: none
			acc, nbits := 0, 0
			for x := p.x0; x < w; x += p.dx {
				for c := 0; c < channels; c++ {
					v := sample(x, y, c)
					switch depth {
					case 16:
						raw = append(raw, byte(v>>8), byte(v))
					case 8:
						raw = append(raw, byte(v))
					default:
						acc = acc<<depth | v
						nbits += depth
						if nbits == 8 {
							raw = append(raw, byte(acc))
							acc, nbits = 0, 0
						}
					}
				}
			}
			if nbits > 0 {
				raw = append(raw, byte(acc<<(8-nbits)))
			}
		}
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	b := pwIHDR(w, h, depth, ctype, interlace)
	if plte != nil {
		b = pwChunk(b, "PLTE", plte)
	}
	if trns != nil {
		b = pwChunk(b, "tRNS", trns)
	}
	b = pwChunk(b, "IDAT", z.Bytes())
	return pwChunk(b, "IEND", nil)
}

// TestPNGModes checks every PNG colour type and depth, plain and
// interlaced, against Pillow 9.4's conversions to RGB as its source states
// them (Unpack.c, Convert.c, PngImagePlugin's mode table): low-depth gray
// scaled by bit replication, 16-bit gray clipped to 255 (mode "I" ->
// i2rgb), other 16-bit samples reduced to their high byte (";16B"
// unpackers), alpha and tRNS dropped, palette entries looked up with
// Pillow's gray ramp past the PLTE entries.
func TestPNGModes(t *testing.T) {
	const w, h = 13, 11 // odd sizes exercise partial bytes and Adam7's edges
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		depth, ctype int
		trns         bool
	}{
		{1, 0, false}, {2, 0, false}, {4, 0, false}, {8, 0, false}, {16, 0, false},
		{8, 0, true}, {16, 0, true},
		{8, 2, false}, {16, 2, false}, {8, 2, true}, {16, 2, true},
		{1, 3, false}, {2, 3, false}, {4, 3, false}, {8, 3, false}, {8, 3, true},
		{8, 4, false}, {16, 4, false},
		{8, 6, false}, {16, 6, false},
	} {
		for _, interlace := range []bool{false, true} {
			name := fmt.Sprintf("depth%d_type%d_trns%v_interlace%v", tc.depth, tc.ctype, tc.trns, interlace)
			t.Run(name, func(t *testing.T) {
				channels := map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[tc.ctype]
				top := 1<<tc.depth - 1
				vals := make([]int, w*h*channels)
				for i := range vals {
					vals[i] = rng.IntN(top + 1)
					if tc.depth == 16 && i%5 == 0 {
						vals[i] = rng.IntN(300) // levels near 255 for the gray clip
					}
				}
				var plte, trns []byte
				nPal := 0
				if tc.ctype == 3 {
					// A palette shorter than the index range: indices past it
					// take Pillow's gray ramp.
					nPal = (top + 1) * 3 / 4
					if nPal == 0 {
						nPal = 1
					}
					for i := 0; i < nPal; i++ {
						plte = append(plte, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)))
					}
					if tc.trns {
						trns = []byte{0, 128, 255}
					}
				} else if tc.trns {
					// The transparent colour is a level that occurs.
					for c := 0; c < channels; c++ {
						trns = binary.BigEndian.AppendUint16(trns, uint16(vals[c]))
					}
				}
				sample := func(x, y, c int) int { return vals[(y*w+x)*channels+c] }
				data := pwPNG(w, h, tc.depth, tc.ctype, interlace, sample, plte, trns)

				want := make([]byte, 3*w*h)
				for p := 0; p < w*h; p++ {
					v := vals[p*channels : (p+1)*channels]
					var rgb [3]int
					switch {
					case tc.ctype == 3 && v[0] < nPal:
						rgb = [3]int{int(plte[3*v[0]]), int(plte[3*v[0]+1]), int(plte[3*v[0]+2])}
					case tc.ctype == 3:
						rgb = [3]int{v[0], v[0], v[0]}
					case tc.ctype == 0 && tc.depth == 16:
						g := min(v[0], 255)
						rgb = [3]int{g, g, g}
					case tc.ctype == 0 || tc.ctype == 4:
						g := v[0] * 255 / top
						if tc.depth == 16 {
							g = v[0] >> 8
						}
						rgb = [3]int{g, g, g}
					case tc.depth == 16:
						rgb = [3]int{v[0] >> 8, v[1] >> 8, v[2] >> 8}
					default:
						rgb = [3]int{v[0], v[1], v[2]}
					}
					for c := range 3 {
						want[3*p+c] = byte(rgb[c])
					}
				}
				im, err := DecodeImage(Source{Data: data, ContentType: "image/png"}, HostedLimits())
				if err != nil {
					t.Fatal(err)
				}
				if s := pwDiff(im.Pix, want); s.first >= 0 {
					px := s.first / 3
					t.Fatalf("pixel (%d,%d) channel %d: got %d want %d (%d samples of %d differ)",
						px%w, px/w, s.first%3, im.Pix[s.first], want[s.first], int(s.share*float64(len(want))), len(want))
				}
			})
		}
	}
}

// TestPNGHeaderChecks: dimensions come from IHDR alone, and a damaged IHDR
// is refused before decoding.
func TestPNGHeaderChecks(t *testing.T) {
	// A palette PNG cut inside the chunk after IHDR (found by fuzzing: the
	// PLTE walk read past the end).
	cut := append(pwIHDR(150, 90, 8, 3, false), "00000000"...)
	if _, err := DecodeImage(Source{Data: cut}, HostedLimits()); err == nil {
		t.Fatal("cut palette PNG accepted")
	}
	w, h, err := pngSize(pwIHDR(5000, 4000, 8, 2, false))
	if err != nil || w != 5000 || h != 4000 {
		t.Fatalf("pngSize: %d %d %v", w, h, err)
	}
	bad := pwIHDR(64, 48, 8, 2, false)
	bad[len(bad)-1] ^= 1
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{bad, "checksum"},
		{pwIHDR(1<<31, 48, 8, 2, false), "out of range"},
		{pwIHDR(64, 48, 16, 3, false), "not a PNG combination"},
		{pwIHDR(64, 48, 8, 2, false)[:20], "shorter"},
		{pwChunk([]byte("\x89PNG\r\n\x1a\n"), "IDAT", make([]byte, 13)), "IHDR"},
	} {
		if _, _, err := pngSize(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pngSize: %v, want %q", err, tc.want)
		}
	}
}

// BenchmarkDecodePNG decodes a 1024x1024 RGB PNG (1 MP, a smooth picture
// with noise, as image/png's default compression writes it) to RGB.
func BenchmarkDecodePNG(b *testing.B) {
	const w, h = 1024, 1024
	rng := rand.New(rand.NewPCG(5, 6))
	data := pwPNGEncoded(w, h, func(x, y, c int) int {
		return (x*(c+1)+y*(3-c))/8%256 ^ rng.IntN(8)
	})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeImage(Source{Data: data}, HostedLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// pwPNGEncoded encodes an RGB picture with image/png (filtered, as real
// encoders write), unlike pwPNG's unfiltered rows.
func pwPNGEncoded(w, h int, sample func(x, y, c int) int) []byte {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			i := m.PixOffset(x, y)
			m.Pix[i], m.Pix[i+1], m.Pix[i+2], m.Pix[i+3] = byte(sample(x, y, 0)), byte(sample(x, y, 1)), byte(sample(x, y, 2)), 255
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
