package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"

	"golang.org/x/image/webp"
)

// webpSize reads a WebP's dimensions (the VP8X canvas, or the VP8/VP8L
// frame header) without decoding.
func webpSize(data []byte) (width, height int, err error) {
	c, err := webp.DecodeConfig(bytes.NewReader(data))
	return c.Width, c.Height, err
}

// decodeWebP decodes a WebP to RGB as Pillow 9.4 with libwebp 1.2.4 does:
// Pillow decodes through WebPAnimDecoder into RGBA (not premultiplied) and
// convert("RGB") drops the alpha.
//
//   - Lossless (VP8L): the stored ARGB samples, alpha dropped.
//   - Lossy (VP8, with or without ALPH): golang.org/x/image/vp8 gives the
//     decoder's Y, U and V planes (VP8 decoding is exact by specification);
//     they are turned into RGB as libwebp's RGBA output does, with its
//     "fancy" chroma upsampler and its fixed-point BT.601 conversion (see
//     fancyUpsample).
//   - Animated (ANIM/ANMF): the first frame on a transparent black canvas,
//     as WebPAnimDecoder composes it; outside the frame RGB is 0.
func decodeWebP(data []byte) (*Image, error) {
	if isAnimatedWebP(data) {
		return decodeAnimatedWebP(data)
	}
	m, err := webp.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return webpToRGB(m)
}

// webpToRGB converts what golang.org/x/image/webp decoded to RGB.
func webpToRGB(m image.Image) (*Image, error) {
	b := m.Bounds()
	if b.Min != (image.Point{}) {
		return nil, fmt.Errorf("unexpected image origin %v", b.Min)
	}
	w, h := b.Dx(), b.Dy()
	out := &Image{Width: w, Height: h, Pix: make([]byte, 3*w*h)}
	switch m := m.(type) {
	case *image.NRGBA:
		copyRGB(out.Pix, m.Pix, m.Stride, w, h)
	case *image.YCbCr:
		if err := fancyUpsample(out, m); err != nil {
			return nil, err
		}
	case *image.NYCbCrA:
		if err := fancyUpsample(out, &m.YCbCr); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unexpected decoded image type %T", m)
	}
	return out, nil
}

// libwebp's YUV->RGB conversion (src/dsp/yuv.h): BT.601 studio range in
// 14-bit fixed point. Each term is a "multiply high" ((v*c)>>8, the
// emulation of SSE2's mulhi on 8.8 values) and the sum carries 6
// fractional bits, so the result is clipped and shifted by 6.
const (
	yuvFix2  = 6
	yuvMask2 = (256 << yuvFix2) - 1
)

func mulHi(v, c int) int { return (v * c) >> 8 }

func clip8(v int) byte {
	if v&^yuvMask2 == 0 {
		return byte(v >> yuvFix2)
	}
	if v < 0 {
		return 0
	}
	return 255
}

// yuvTerms holds each multiply-high term of yuvToRGB for every 8-bit
// input, so a pixel costs lookups and adds.
var yuvTerms = func() (t struct{ y, rv, gu, gv, bu [256]int32 }) {
	for i := range 256 {
		t.y[i] = int32(mulHi(i, 19077))
		t.rv[i] = int32(mulHi(i, 26149) - 14234)
		t.gu[i] = int32(mulHi(i, 6419))
		t.gv[i] = int32(mulHi(i, 13320) - 8708)
		t.bu[i] = int32(mulHi(i, 33050) - 17685)
	}
	return t
}()

// yuvToRGB writes one pixel's R, G, B from its Y and (upsampled) U, V:
// R = clip((19077.y + 26149.v - 14234)>>6),
// G = clip((19077.y - 6419.u - 13320.v + 8708)>>6),
// B = clip((19077.y + 33050.u - 17685)>>6), where a.b = (a*b)>>8.
func yuvToRGB(dst []byte, y, u, v int) {
	_ = dst[2]
	yy := int(yuvTerms.y[y&0xff])
	dst[0] = clip8(yy + int(yuvTerms.rv[v&0xff]))
	dst[1] = clip8(yy - int(yuvTerms.gu[u&0xff]) - int(yuvTerms.gv[v&0xff]))
	dst[2] = clip8(yy + int(yuvTerms.bu[u&0xff]))
}

// fancyUpsample converts a 4:2:0 YCbCr picture to RGB as libwebp's fancy
// upsampler does (src/dsp/upsampling.c and EmitFancyRGB in
// src/dec/io_dec.c). Output rows are made in pairs (2k-1, 2k) from chroma
// rows k-1 and k; the first row, and the last row of an even height, use
// one chroma row for both. Within a row pair each chroma sample is
// interpolated from the 2x2 chroma neighbourhood with weights 9-3-3-1,
// computed in two rounding steps (see upsamplePair).
func fancyUpsample(out *Image, m *image.YCbCr) error {
	w, h := out.Width, out.Height
	if m.SubsampleRatio != image.YCbCrSubsampleRatio420 {
		return fmt.Errorf("unexpected chroma subsampling %v", m.SubsampleRatio)
	}
	cw, ch := (w+1)/2, (h+1)/2
	if m.YStride < w || m.CStride < cw || len(m.Y) < (h-1)*m.YStride+w ||
		len(m.Cb) < (ch-1)*m.CStride+cw || len(m.Cr) < (ch-1)*m.CStride+cw {
		return errors.New("decoded planes are smaller than the picture")
	}
	yRow := func(r int) []byte { return m.Y[r*m.YStride : r*m.YStride+w] }
	cRow := func(p []byte, r int) []byte { return p[r*m.CStride : r*m.CStride+cw] }
	dRow := func(r int) []byte { return out.Pix[3*w*r : 3*w*(r+1)] }

	// Row 0: its chroma row stands for both neighbours.
	u0, v0 := cRow(m.Cb, 0), cRow(m.Cr, 0)
	upsamplePair(yRow(0), nil, u0, v0, u0, v0, dRow(0), nil)
	for k := 1; 2*k-1 < h; k++ {
		tu, tv := cRow(m.Cb, k-1), cRow(m.Cr, k-1)
		if 2*k < h {
			cu, cv := cRow(m.Cb, k), cRow(m.Cr, k)
			upsamplePair(yRow(2*k-1), yRow(2*k), tu, tv, cu, cv, dRow(2*k-1), dRow(2*k))
		} else { // the last row of an even height
			upsamplePair(yRow(2*k-1), nil, tu, tv, tu, tv, dRow(2*k-1), nil)
		}
	}
	return nil
}

// upsamplePair makes one or two output rows: top from topY with chroma
// mostly from the top chroma rows (tu, tv), bottom (when botY is not nil)
// from botY with chroma mostly from the current rows (cu, cv).
//
// For chroma samples a (top-left), b (top-right), c (left), d (right), the
// two output columns between them get, on the top row,
// ((a+3b+3c+d+8)>>3 + a)>>1 and ((3a+b+c+3d+8)>>3 + b)>>1, and on the
// bottom row ((3a+b+c+3d+8)>>3 + c)>>1 and ((a+3b+3c+d+8)>>3 + d)>>1: about
// (9a+3b+3c+d)/16 and its mirror images. The first column, and the last of
// an even width, use only the vertical pair: (3a+c+2)>>2 on top and
// (3c+a+2)>>2 below.
func upsamplePair(topY, botY, tu, tv, cu, cv, topDst, botDst []byte) {
	n := len(topY)
	last := (n - 1) >> 1 // the last column pair
	// vertical fills output column col from chroma column x alone.
	vertical := func(x, col int) {
		a, c := int(tu[x]), int(cu[x])
		av, cv2 := int(tv[x]), int(cv[x])
		yuvToRGB(topDst[3*col:], int(topY[col]), (3*a+c+2)>>2, (3*av+cv2+2)>>2)
		if botY != nil {
			yuvToRGB(botDst[3*col:], int(botY[col]), (3*c+a+2)>>2, (3*cv2+av+2)>>2)
		}
	}
	vertical(0, 0)
	for x := 1; x <= last; x++ {
		// U
		a, b, c, d := int(tu[x-1]), int(tu[x]), int(cu[x-1]), int(cu[x])
		sum := a + b + c + d + 8
		d12u := (sum + 2*(b+c)) >> 3
		d03u := (sum + 2*(a+d)) >> 3
		// V
		av, bv, cv2, dv := int(tv[x-1]), int(tv[x]), int(cv[x-1]), int(cv[x])
		sumV := av + bv + cv2 + dv + 8
		d12v := (sumV + 2*(bv+cv2)) >> 3
		d03v := (sumV + 2*(av+dv)) >> 3

		l, r := 2*x-1, 2*x
		yuvToRGB(topDst[3*l:], int(topY[l]), (d12u+a)>>1, (d12v+av)>>1)
		yuvToRGB(topDst[3*r:], int(topY[r]), (d03u+b)>>1, (d03v+bv)>>1)
		if botY != nil {
			yuvToRGB(botDst[3*l:], int(botY[l]), (d03u+c)>>1, (d03v+cv2)>>1)
			yuvToRGB(botDst[3*r:], int(botY[r]), (d12u+d)>>1, (d12v+dv)>>1)
		}
	}
	if n&1 == 0 {
		vertical(last, n-1) // the last column of an even width
	}
}

// isAnimatedWebP reports whether an extended (VP8X) WebP has its animation
// flag set.
func isAnimatedWebP(data []byte) bool {
	return len(data) >= 12+8+10 && string(data[12:16]) == "VP8X" && data[20]&0x02 != 0
}

// decodeAnimatedWebP decodes the first frame of an animated WebP and places
// it on the canvas, as Pillow (through WebPAnimDecoder) shows the first
// frame: the canvas starts transparent black and the first frame is a key
// frame, drawn without blending.
func decodeAnimatedWebP(data []byte) (*Image, error) {
	cw := int(uint32(data[24])|uint32(data[25])<<8|uint32(data[26])<<16) + 1
	ch := int(uint32(data[27])|uint32(data[28])<<8|uint32(data[29])<<16) + 1
	// Walk the top-level chunks after VP8X for the first ANMF.
	p := data[12:]
	riffEnd := int(binary.LittleEndian.Uint32(data[4:8])) - 4
	if riffEnd < len(p) && riffEnd >= 0 {
		p = p[:riffEnd]
	}
	for len(p) >= 8 {
		id := string(p[:4])
		n := int(binary.LittleEndian.Uint32(p[4:8]))
		if n < 0 || n > len(p)-8 {
			return nil, errors.New("animated WebP chunk runs past the end of the data")
		}
		body := p[8 : 8+n]
		if id == "ANMF" {
			return decodeANMF(body, cw, ch)
		}
		next := 8 + n + n&1 // chunks are padded to an even size
		if next > len(p) {
			break
		}
		p = p[next:]
	}
	return nil, errors.New("animated WebP has no frame")
}

// decodeANMF decodes one ANMF chunk's frame and draws it at its offset on a
// cw x ch canvas.
func decodeANMF(body []byte, cw, ch int) (*Image, error) {
	if len(body) < 16 {
		return nil, errors.New("animated WebP frame header is short")
	}
	fx := 2 * int(uint32(body[0])|uint32(body[1])<<8|uint32(body[2])<<16)
	fy := 2 * int(uint32(body[3])|uint32(body[4])<<8|uint32(body[5])<<16)
	fw := int(uint32(body[6])|uint32(body[7])<<8|uint32(body[8])<<16) + 1
	fh := int(uint32(body[9])|uint32(body[10])<<8|uint32(body[11])<<16) + 1
	if fx+fw > cw || fy+fh > ch {
		return nil, fmt.Errorf("animated WebP frame %dx%d at (%d,%d) lies outside the %dx%d canvas", fw, fh, fx, fy, cw, ch)
	}
	frame := body[16:]
	// Wrap the frame's bitstream chunks (ALPH + VP8, or VP8L) as a still
	// WebP; with ALPH a VP8X header must announce the alpha.
	var buf bytes.Buffer
	buf.WriteString("RIFF\x00\x00\x00\x00WEBP")
	if len(frame) >= 4 && string(frame[:4]) == "ALPH" {
		buf.WriteString("VP8X")
		buf.Write([]byte{10, 0, 0, 0, 0x10, 0, 0, 0})
		buf.Write([]byte{byte(fw - 1), byte((fw - 1) >> 8), byte((fw - 1) >> 16)})
		buf.Write([]byte{byte(fh - 1), byte((fh - 1) >> 8), byte((fh - 1) >> 16)})
	}
	buf.Write(frame)
	still := buf.Bytes()
	binary.LittleEndian.PutUint32(still[4:8], uint32(len(still)-8))
	m, err := webp.Decode(bytes.NewReader(still))
	if err != nil {
		return nil, err
	}
	fr, err := webpToRGB(m)
	if err != nil {
		return nil, err
	}
	if fr.Width != fw || fr.Height != fh {
		return nil, fmt.Errorf("animated WebP frame decoded to %dx%d, its header says %dx%d", fr.Width, fr.Height, fw, fh)
	}
	out := &Image{Width: cw, Height: ch, Pix: make([]byte, 3*cw*ch)}
	for y := 0; y < fh; y++ {
		copy(out.Pix[3*((fy+y)*cw+fx):], fr.Pix[3*fw*y:3*fw*(y+1)])
	}
	return out, nil
}
