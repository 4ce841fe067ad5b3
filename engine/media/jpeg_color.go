package media

// Chroma upsampling and colour conversion as libjpeg-turbo does them with
// fancy upsampling on (its default), followed by Pillow's conversion of the
// decoder's output mode (L, RGB or inverted CMYK) to RGB.
//
// Upsampling works on the component's real samples (libjpeg's
// downsampled_width × downsampled_height); rows above the first and below
// the last repeat the edge row, as libjpeg's context rows do:
//   - 2:1 horizontally ("h2v1"): triangle filter, 3/4 nearer + 1/4 further
//     sample, rounding biases 1 (left output) and 2 (right output); plain
//     replication when the component is at most 2 samples wide;
//   - 2:1 vertically ("h1v2"): the same filter between rows, biases 1
//     (upper output) and 2 (lower output);
//   - 2:1 both ways ("h2v2"): the vertical 3:1 column sums filtered
//     horizontally, biases 8 (left) and 7 (right) over 16; replication when
//     at most 2 samples wide;
//   - any other whole ratio: replication.
//
// Colour conversion uses libjpeg's 16-bit fixed-point YCbCr tables; YCCK
// goes to CMYK the same way with R, G, B inverted. Pillow reads libjpeg's
// CMYK output inverted (Adobe's convention, "CMYK;I") and converts that
// with its cmyk2rgb: R = nk - C'·nk/255 with nk = 255 - K', where C' and K'
// are the inverted samples and the division is Pillow's rounded one.

// jpegUpKind is the upsampling method of one component.
type jpegUpKind int

const (
	upFull      jpegUpKind = iota // no upsampling
	upH2V1Fancy                   // 2:1 horizontal triangle filter
	upH1V2Fancy                   // 2:1 vertical triangle filter
	upH2V2Fancy                   // 2:1 both ways
	upReplicate                   // whole-ratio replication
)

// jpegUpsampler produces one full-resolution row of a component at a time.
type jpegUpsampler struct {
	c      *jpegComponent
	kind   jpegUpKind
	hx, vx int    // ratios to the full resolution
	buf    []byte // output row, at least as long as the image is wide
}

func newJPEGUpsampler(c *jpegComponent, hmax, vmax, width int) *jpegUpsampler {
	u := &jpegUpsampler{c: c, hx: hmax / c.h, vx: vmax / c.v}
	switch {
	case u.hx == 1 && u.vx == 1:
		u.kind = upFull
		return u
	case u.hx == 2 && u.vx == 1 && c.dw > 2:
		u.kind = upH2V1Fancy
	case u.hx == 1 && u.vx == 2:
		u.kind = upH1V2Fancy
	case u.hx == 2 && u.vx == 2 && c.dw > 2:
		u.kind = upH2V2Fancy
	default:
		u.kind = upReplicate
	}
	u.buf = make([]byte, max(width, c.dw*u.hx))
	return u
}

// row returns the component's samples for output row y (at least width
// of them).
func (u *jpegUpsampler) row(y int) []byte {
	c := u.c
	stride := c.bw * 8
	in := func(r int) []byte {
		r = min(max(r, 0), c.dh-1)
		return c.pix[r*stride : r*stride+c.dw]
	}
	switch u.kind {
	case upFull:
		return c.pix[y*stride : y*stride+c.dw]
	case upH2V1Fancy:
		upsampleH2V1(u.buf, in(y))
	case upH1V2Fancy:
		r := y >> 1
		if y&1 == 0 {
			upsampleH1V2(u.buf, in(r), in(r-1), 1)
		} else {
			upsampleH1V2(u.buf, in(r), in(r+1), 2)
		}
	case upH2V2Fancy:
		r := y >> 1
		if y&1 == 0 {
			upsampleH2V2(u.buf, in(r), in(r-1))
		} else {
			upsampleH2V2(u.buf, in(r), in(r+1))
		}
	default:
		src := in(y / u.vx)
		out := u.buf
		if u.hx == 1 {
			copy(out, src)
			break
		}
		for i, v := range src {
			o := out[i*u.hx : i*u.hx+u.hx]
			for j := range o {
				o[j] = v
			}
		}
	}
	return u.buf
}

// upsampleH2V1 doubles a row with the triangle filter; beyond the edges
// the edge sample repeats, so the first and last outputs copy it.
func upsampleH2V1(out, in []byte) {
	n := len(in)
	out = out[:2*n]
	prev, cur := int32(in[0]), int32(in[0])
	for i := 0; i < n-1; i++ {
		next := int32(in[i+1])
		out[2*i] = byte((3*cur + prev + 1) >> 2)
		out[2*i+1] = byte((3*cur + next + 2) >> 2)
		prev, cur = cur, next
	}
	out[2*n-2] = byte((3*cur + prev + 1) >> 2)
	out[2*n-1] = byte(cur)
}

// upsampleH1V2 makes one output row between the nearer input row near and
// the further one far.
func upsampleH1V2(out, near, far []byte, bias int32) {
	out = out[:len(near)]
	far = far[:len(near)]
	for i := range near {
		out[i] = byte((3*int32(near[i]) + int32(far[i]) + bias) >> 2)
	}
}

// upsampleH2V2 makes one output row of a 2x2-subsampled component: column
// sums 3·near + far, then the horizontal triangle filter over sixteenths,
// the edge column sums repeating beyond the edges.
func upsampleH2V2(out, near, far []byte) {
	n := len(near)
	out = out[:2*n]
	far = far[:n]
	cur := 3*int32(near[0]) + int32(far[0])
	prev := cur
	for i := 0; i < n-1; i++ {
		next := 3*int32(near[i+1]) + int32(far[i+1])
		out[2*i] = byte((3*cur + prev + 8) >> 4)
		out[2*i+1] = byte((3*cur + next + 7) >> 4)
		prev, cur = cur, next
	}
	out[2*n-2] = byte((3*cur + prev + 8) >> 4)
	out[2*n-1] = byte((4*cur + 7) >> 4)
}

// The YCbCr→RGB tables of libjpeg (jdcolor.c), 16-bit fixed point:
// R = Y + crR[Cr], G = Y + (cbG[Cb] + crG[Cr]) >> 16, B = Y + cbB[Cb].
var jpegCrR, jpegCbB, jpegCrG, jpegCbG = buildJPEGYCCTables()

func buildJPEGYCCTables() (crR, cbB, crG, cbG *[256]int32) {
	const scale = 16
	const half = 1 << (scale - 1)
	fix := func(x float64) int64 { return int64(x*(1<<scale) + 0.5) }
	crR, cbB, crG, cbG = new([256]int32), new([256]int32), new([256]int32), new([256]int32)
	for i := range 256 {
		x := int64(i - 128)
		crR[i] = int32((fix(1.40200)*x + half) >> scale)
		cbB[i] = int32((fix(1.77200)*x + half) >> scale)
		crG[i] = int32(-fix(0.71414) * x)
		cbG[i] = int32(-fix(0.34414)*x + half)
	}
	return crR, cbB, crG, cbG
}

// clamp8 limits v to 0..255.
func clamp8(v int32) byte {
	if uint32(v) <= 255 {
		return byte(v)
	}
	if v < 0 {
		return 0
	}
	return 255
}

// toRGB upsamples the decoded components and converts them to interleaved
// 8-bit RGB as Pillow's convert("RGB") of the decoder's output does.
func (d *jpegDecoder) toRGB() (*Image, error) {
	w, h := d.width, d.height
	img := &Image{Width: w, Height: h, Pix: make([]byte, 3*w*h)}
	ups := make([]*jpegUpsampler, len(d.comps))
	for i := range d.comps {
		ups[i] = newJPEGUpsampler(&d.comps[i], d.hmax, d.vmax, w)
	}
	rows := make([][]byte, len(d.comps))
	for y := 0; y < h; y++ {
		for i, u := range ups {
			rows[i] = u.row(y)[:w]
		}
		out := img.Pix[3*w*y : 3*w*(y+1)]
		switch d.color {
		case jpegGray:
			grayToRGB(out, rows[0])
		case jpegYCbCr:
			yccToRGB(out, rows[0], rows[1], rows[2])
		case jpegRGB:
			r, g, b := rows[0], rows[1], rows[2]
			for x := 0; x < w; x++ {
				out[3*x], out[3*x+1], out[3*x+2] = r[x], g[x], b[x]
			}
		case jpegCMYK, jpegYCCK:
			cmykToRGB(out, rows, d.color == jpegYCCK)
		}
	}
	return img, nil
}

// grayToRGB repeats each sample three times.
func grayToRGB(out, g []byte) {
	out = out[:3*len(g)]
	for x, v := range g {
		out[3*x], out[3*x+1], out[3*x+2] = v, v, v
	}
}

// yccToRGB converts one row with libjpeg's integer YCbCr tables.
func yccToRGB(out, ys, cbs, crs []byte) {
	n := len(ys)
	out = out[:3*n]
	cbs, crs = cbs[:n], crs[:n]
	crR, cbB, crG, cbG := jpegCrR, jpegCbB, jpegCrG, jpegCbG
	for x := 0; x < n; x++ {
		y := int32(ys[x])
		cb, cr := cbs[x], crs[x]
		out[3*x] = clamp8(y + crR[cr])
		out[3*x+1] = clamp8(y + (cbG[cb]+crG[cr])>>16)
		out[3*x+2] = clamp8(y + cbB[cb])
	}
}

// cmykToRGB turns libjpeg's CMYK output (converted from YCCK first when
// ycck is set) into RGB as Pillow does: it reads the samples inverted and
// applies cmyk2rgb, out = clip(nk - nk·c/255) with nk = 255 - k, where the
// division by 255 is Pillow's rounded MULDIV255.
func cmykToRGB(out []byte, rows [][]byte, ycck bool) {
	c0, c1, c2, c3 := rows[0], rows[1], rows[2], rows[3]
	n := len(c0)
	out = out[:3*n]
	for x := 0; x < n; x++ {
		c, m, yy, k := int32(c0[x]), int32(c1[x]), int32(c2[x]), int32(c3[x])
		if ycck {
			// libjpeg: CMY = 255 - RGB of the YCbCr triple, K unchanged.
			y, cb, cr := c, m, yy
			c = int32(clamp8(255 - (y + jpegCrR[cr])))
			m = int32(clamp8(255 - (y + (jpegCbG[cb]+jpegCrG[cr])>>16)))
			yy = int32(clamp8(255 - (y + jpegCbB[cb])))
		}
		// Pillow's "CMYK;I" inverts every sample; nk = 255 - inverted K.
		nk := k
		out[3*x] = clamp8(nk - mulDiv255(255-c, nk))
		out[3*x+1] = clamp8(nk - mulDiv255(255-m, nk))
		out[3*x+2] = clamp8(nk - mulDiv255(255-yy, nk))
	}
}

// mulDiv255 is a·b/255 rounded the way Pillow computes it.
func mulDiv255(a, b int32) int32 {
	t := a*b + 128
	return ((t >> 8) + t) >> 8
}
