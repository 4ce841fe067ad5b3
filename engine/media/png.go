package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
)

// pngHeader is what the IHDR chunk (and, for palette images, the PLTE
// chunk) of a PNG says.
type pngHeader struct {
	width, height int
	depth         int // bits per sample: 1, 2, 4, 8 or 16
	colorType     int // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
	paletteLen    int // PLTE entries; 0 when there is none
}

// pngSize reads a PNG's dimensions from its IHDR chunk without decoding.
func pngSize(data []byte) (width, height int, err error) {
	h, err := readPNGHeader(data)
	return h.width, h.height, err
}

// readPNGHeader reads IHDR, which must come first, checks its CRC, and
// walks the chunks before the image data for PLTE.
func readPNGHeader(data []byte) (pngHeader, error) {
	var h pngHeader
	const sigLen = 8
	if len(data) < sigLen+8+13+4 {
		return h, errors.New("shorter than a PNG header")
	}
	p := data[sigLen:]
	if binary.BigEndian.Uint32(p) != 13 || string(p[4:8]) != "IHDR" {
		return h, errors.New("first chunk is not a 13-byte IHDR")
	}
	ihdr := p[8 : 8+13]
	if crc32.ChecksumIEEE(p[4:8+13]) != binary.BigEndian.Uint32(p[8+13:]) {
		return h, errors.New("IHDR checksum mismatch")
	}
	w, ht := binary.BigEndian.Uint32(ihdr[0:4]), binary.BigEndian.Uint32(ihdr[4:8])
	if w > 1<<31-1 || ht > 1<<31-1 { // zero sizes are refused by checkPixels
		return h, fmt.Errorf("IHDR dimensions %dx%d out of range", w, ht)
	}
	h.width, h.height = int(w), int(ht)
	h.depth, h.colorType = int(ihdr[8]), int(ihdr[9])
	valid := false
	switch h.colorType {
	case 0:
		valid = h.depth == 1 || h.depth == 2 || h.depth == 4 || h.depth == 8 || h.depth == 16
	case 3:
		valid = h.depth == 1 || h.depth == 2 || h.depth == 4 || h.depth == 8
	case 2, 4, 6:
		valid = h.depth == 8 || h.depth == 16
	}
	if !valid {
		return h, fmt.Errorf("bit depth %d with colour type %d is not a PNG combination", h.depth, h.colorType)
	}
	if h.colorType == 3 {
		for q := p[8+13+4:]; len(q) >= 12; {
			n := int64(binary.BigEndian.Uint32(q))
			typ := string(q[4:8])
			if typ == "IDAT" || n > int64(len(q)-12) {
				break
			}
			if typ == "PLTE" {
				h.paletteLen = int(n / 3)
			}
			q = q[12+n:]
		}
	}
	return h, nil
}

// decodePNG decodes a PNG to RGB as Pillow 9.4's open(...).convert("RGB")
// does for each PNG mode:
//
//   - gray 1/2/4/8 bits: the level repeated (low depths scaled to 0..255
//     by bit replication, as both Pillow and image/png unpack them);
//   - gray 16 bits: Pillow opens it as mode "I" (32-bit integers) and its
//     I->RGB conversion clips to 0..255, so levels of 255 and above are 255
//     and only the darkest levels survive;
//   - RGB and RGBA 16 bits, gray+alpha 16 bits: the high byte of each
//     sample (Pillow's ;16B unpackers);
//   - any alpha channel or tRNS chunk is dropped, with no compositing;
//   - palette: the PLTE colour of each index; an index past the PLTE
//     entries takes Pillow's default palette ramp, gray (i, i, i) (where
//     image/png would give black).
func decodePNG(data []byte) (*Image, error) {
	h, err := readPNGHeader(data)
	if err != nil {
		return nil, err
	}
	m, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	b := m.Bounds()
	if b.Min != (image.Point{}) || b.Dx() != h.width || b.Dy() != h.height {
		return nil, fmt.Errorf("decoded %v, header says %dx%d", b, h.width, h.height)
	}
	w, ht := h.width, h.height
	out := &Image{Width: w, Height: ht, Pix: make([]byte, 3*w*ht)}
	pix := out.Pix
	gray16 := h.colorType == 0 && h.depth == 16
	switch m := m.(type) {
	case *image.Gray:
		for y := 0; y < ht; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			o := pix[3*w*y:]
			for x, v := range row {
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	case *image.Gray16:
		for y := 0; y < ht; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+2*w]
			o := pix[3*w*y:]
			for x := 0; x < w; x++ {
				v := clip255(int(row[2*x])<<8 | int(row[2*x+1]))
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	case *image.RGBA: // opaque 8-bit RGB: the samples as stored
		copyRGB(pix, m.Pix, m.Stride, w, ht)
	case *image.NRGBA:
		copyRGB(pix, m.Pix, m.Stride, w, ht)
	case *image.RGBA64: // opaque 16-bit RGB
		copyRGB16(pix, m.Pix, m.Stride, w, ht, false)
	case *image.NRGBA64: // 16-bit with alpha, or 16-bit gray/RGB with tRNS
		copyRGB16(pix, m.Pix, m.Stride, w, ht, gray16)
	case *image.Paletted:
		var lut [256][3]byte
		for i := range lut {
			lut[i] = [3]byte{byte(i), byte(i), byte(i)}
		}
		for i := 0; i < h.paletteLen && i < len(m.Palette) && i < 256; i++ {
			lut[i] = rawRGB(m.Palette[i])
		}
		for y := 0; y < ht; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			o := pix[3*w*y:]
			for x, idx := range row {
				c := &lut[idx]
				o[3*x], o[3*x+1], o[3*x+2] = c[0], c[1], c[2]
			}
		}
	default:
		return nil, fmt.Errorf("unexpected decoded image type %T", m)
	}
	return out, nil
}

// copyRGB copies the R, G, B bytes of 4-byte RGBA/NRGBA pixels.
func copyRGB(dst, src []byte, stride, w, h int) {
	for y := 0; y < h; y++ {
		row := src[y*stride : y*stride+4*w]
		o := dst[3*w*y : 3*w*(y+1)]
		for x := 0; x < w; x++ {
			o[3*x], o[3*x+1], o[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
		}
	}
}

// copyRGB16 reduces 8-byte RGBA64/NRGBA64 pixels to RGB: the high byte of
// each sample, or for 16-bit gray (grayClip) the whole level clipped to 255.
func copyRGB16(dst, src []byte, stride, w, h int, grayClip bool) {
	for y := 0; y < h; y++ {
		row := src[y*stride : y*stride+8*w]
		o := dst[3*w*y : 3*w*(y+1)]
		for x := 0; x < w; x++ {
			s := row[8*x:]
			if grayClip {
				v := clip255(int(s[0])<<8 | int(s[1]))
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
				continue
			}
			o[3*x], o[3*x+1], o[3*x+2] = s[0], s[2], s[4]
		}
	}
}

// clip255 clips a non-negative level to a byte, as Pillow's I->RGB does.
func clip255(v int) byte {
	if v >= 255 {
		return 255
	}
	return byte(v)
}

// rawRGB returns a palette entry's stored R, G, B (image/png's palette
// entries are opaque color.RGBA or, with tRNS, non-premultiplied NRGBA).
func rawRGB(c color.Color) [3]byte {
	switch c := c.(type) {
	case color.NRGBA:
		return [3]byte{c.R, c.G, c.B}
	case color.RGBA:
		return [3]byte{c.R, c.G, c.B}
	}
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	return [3]byte{n.R, n.G, n.B}
}
