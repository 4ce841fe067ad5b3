package processor

import (
	"math"

	"github.com/clefrt/clef/engine/media"
)

// Pillow's resampler (libImaging/Resample.c), bicubic filter, 8 bits per
// channel. The resize is separable: a horizontal pass into an 8-bit image,
// then a vertical pass. For each output position the filter (support 2,
// widened by the scale factor when downscaling, which is the antialiasing)
// is sampled at the input pixel centres, normalised to sum 1 in float64, and
// turned into fixed point with precisionBits fraction bits; each output
// pixel is the integer sum plus a half, shifted down and clipped to 0..255.
//
// Every float64 product that feeds a sum is wrapped in an explicit
// conversion so the compiler cannot fuse it into an FMA: the coefficients
// must round exactly like Pillow's.

// precisionBits is Pillow's PRECISION_BITS: 32 − 8 − 2.
const precisionBits = 32 - 8 - 2

// bicubicSupport is the bicubic filter's half-width in input pixels at scale 1.
const bicubicSupport = 2.0

// bicubic is Pillow's cubic convolution kernel with a = −0.5.
func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		// ((a+2)·x − (a+3))·x·x + 1
		t := float64(float64((a+2)*x) - (a + 3))
		t = float64(float64(t*x) * x)
		return t + 1
	}
	if x < 2 {
		// (((x−5)·x + 8)·x − 4)·a
		t := float64((x - 5) * x)
		t = float64(float64(t+8) * x)
		return (t - 4) * a
	}
	return 0
}

// resampleCoeffs are one axis's fixed-point filter taps: output position i
// reads n[i] input pixels from start[i] with weights k[i*ksize:][:n[i]].
type resampleCoeffs struct {
	start, n []int
	k        []int32
	ksize    int
}

// precomputeCoeffs samples the bicubic filter for resizing inSize pixels to
// outSize over the whole axis (Pillow's box (0, inSize)).
func precomputeCoeffs(inSize, outSize int) resampleCoeffs {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1.0)
	support := bicubicSupport * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := resampleCoeffs{
		start: make([]int, outSize),
		n:     make([]int, outSize),
		k:     make([]int32, outSize*ksize),
		ksize: ksize,
	}
	w := make([]float64, ksize)
	ss := 1.0 / filterscale
	for xx := range outSize {
		center := (float64(xx) + 0.5) * scale
		// C's (int) cast truncates toward zero, as Go's conversion does.
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		ww := 0.0
		for x := range xmax {
			w[x] = bicubic((float64(x+xmin) - center + 0.5) * ss)
			ww += w[x]
		}
		k := c.k[xx*ksize : (xx+1)*ksize]
		for x := range xmax {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			// Pillow rounds half away from zero, then truncates.
			if v < 0 {
				k[x] = int32(-0.5 + float64(v*(1<<precisionBits)))
			} else {
				k[x] = int32(0.5 + float64(v*(1<<precisionBits)))
			}
		}
		c.start[xx], c.n[xx] = xmin, xmax
	}
	return c
}

// clip8 turns a fixed-point sum into a byte: the arithmetic shift, clipped.
func clip8(v int) byte {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// ResizeBicubic resizes an RGB image exactly as Pillow 9.4's Image.resize(size, Image.BICUBIC) does (its fixed-point separable filter, support scaled on downscale = antialiasing, the 22-bit precision coefficients, clip to uint8). Output identical uint8.
//
// Like Pillow, an axis whose size does not change is not resampled, and an
// unchanged size returns a copy. It returns nil when img is malformed (a
// buffer that does not match its size) or a requested side is not positive.
func ResizeBicubic(img *media.Image, width, height int) *media.Image {
	if checkImage(img) != nil || width <= 0 || height <= 0 || width > maxSide || height > maxSide {
		return nil
	}
	inW, inH := img.Width, img.Height
	if width == inW && height == inH {
		return &media.Image{Width: inW, Height: inH, Pix: append([]byte(nil), img.Pix...)}
	}
	vert := precomputeCoeffs(inH, height)

	// Horizontal pass over the rows the vertical pass reads.
	src, srcW, rowOff := img.Pix, inW, 0
	if width != inW {
		first := vert.start[0]
		last := vert.start[height-1] + vert.n[height-1]
		horiz := precomputeCoeffs(inW, width)
		tmp := make([]byte, 3*width*(last-first))
		for y := first; y < last; y++ {
			in := img.Pix[3*y*inW : 3*(y+1)*inW]
			out := tmp[3*(y-first)*width : 3*(y-first+1)*width]
			for xx := range width {
				n := horiz.n[xx]
				k := horiz.k[xx*horiz.ksize:][:n]
				px := in[3*horiz.start[xx] : 3*(horiz.start[xx]+n)]
				s0, s1, s2 := 1<<(precisionBits-1), 1<<(precisionBits-1), 1<<(precisionBits-1)
				for x, kx := range k {
					kv := int(kx)
					p := px[3*x : 3*x+3]
					s0 += int(p[0]) * kv
					s1 += int(p[1]) * kv
					s2 += int(p[2]) * kv
				}
				out[3*xx], out[3*xx+1], out[3*xx+2] = clip8(s0), clip8(s1), clip8(s2)
			}
		}
		src, srcW, rowOff = tmp, width, first
	}
	if height == inH {
		return &media.Image{Width: width, Height: height, Pix: src}
	}

	// Vertical pass.
	dst := make([]byte, 3*width*height)
	acc := make([]int, 3*width)
	for yy := range height {
		for i := range acc {
			acc[i] = 1 << (precisionBits - 1)
		}
		k := vert.k[yy*vert.ksize:][:vert.n[yy]]
		y0 := vert.start[yy] - rowOff
		for y, ky := range k {
			kv := int(ky)
			row := src[3*(y0+y)*srcW : 3*(y0+y+1)*srcW]
			for i, p := range row {
				acc[i] += int(p) * kv
			}
		}
		out := dst[3*yy*width : 3*(yy+1)*width]
		for i, v := range acc {
			out[i] = clip8(v)
		}
	}
	return &media.Image{Width: width, Height: height, Pix: dst}
}
