package quant

import (
	"encoding/binary"
	"math"
)

// The K formats: super-blocks of 256 values with sub-block scales (and
// minimums) quantized against one or two fp16 super-block scales.

// scaleMinK4 decodes the 6-bit scale and minimum of sub-block j from the
// 12-byte scales field of q4_K and q5_K.
func scaleMinK4(j int, s []byte) (sc, m int) {
	if j < 4 {
		return int(s[j] & 63), int(s[j+4] & 63)
	}
	return int(s[j+4]&15) | int(s[j-4]>>6)<<4, int(s[j+4]>>4) | int(s[j]>>6)<<4
}

// putScaleMinK4 is the inverse of scaleMinK4 for all eight sub-blocks.
func putScaleMinK4(s []byte, sc, m *[8]int) {
	for j := 0; j < 4; j++ {
		s[j] = byte(sc[j]) | byte(sc[j+4]>>4)<<6
		s[j+4] = byte(m[j]) | byte(m[j+4]>>4)<<6
		s[j+8] = byte(sc[j+4]&15) | byte(m[j+4]&15)<<4
	}
}

// scaleQ3K decodes the 6-bit (biased by 32) scale i of q3_K.
func scaleQ3K(i int, sc []byte) int {
	var lo int
	if i < 8 {
		lo = int(sc[i] & 15)
	} else {
		lo = int(sc[i-8] >> 4)
	}
	return lo | int(sc[8+i%4]>>(2*(i/4))&3)<<4
}

func dequantQ2_K(dst []float32, src []byte) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[84*i : 84*i+84]
		d, dmin := f16(b[80:]), f16(b[82:])
		y := dst[256*i : 256*i+256]
		for h := 0; h < 2; h++ {
			qs := b[16+32*h : 16+32*h+32]
			for s := 0; s < 4; s++ {
				for sub := 0; sub < 2; sub++ {
					sc := b[8*h+2*s+sub]
					dl, ml := d*float32(sc&15), dmin*float32(sc>>4)
					o := y[128*h+32*s+16*sub:]
					for l := 0; l < 16; l++ {
						o[l] = dl*float32(qs[16*sub+l]>>(2*s)&3) - ml
					}
				}
			}
		}
	}
}

func dequantQ3_K(dst []float32, src []byte) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[110*i : 110*i+110]
		hm, sc := b[0:32], b[96:108]
		d := f16(b[108:])
		y := dst[256*i : 256*i+256]
		for h := 0; h < 2; h++ {
			qs := b[32+32*h : 32+32*h+32]
			for s := 0; s < 4; s++ {
				bit := byte(1) << (4*h + s)
				for sub := 0; sub < 2; sub++ {
					dl := d * float32(scaleQ3K(8*h+2*s+sub, sc)-32)
					o := y[128*h+32*s+16*sub:]
					for l := 0; l < 16; l++ {
						q := int(qs[16*sub+l] >> (2 * s) & 3)
						if hm[16*sub+l]&bit == 0 {
							q -= 4
						}
						o[l] = dl * float32(q)
					}
				}
			}
		}
	}
}

func dequantQ4_K(dst []float32, src []byte) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[144*i : 144*i+144]
		d, dmin := f16(b), f16(b[2:])
		y := dst[256*i : 256*i+256]
		for c := 0; c < 4; c++ {
			qs := b[16+32*c : 16+32*c+32]
			sc0, m0 := scaleMinK4(2*c, b[4:16])
			sc1, m1 := scaleMinK4(2*c+1, b[4:16])
			d0, mm0 := d*float32(sc0), dmin*float32(m0)
			d1, mm1 := d*float32(sc1), dmin*float32(m1)
			for l := 0; l < 32; l++ {
				y[64*c+l] = d0*float32(qs[l]&15) - mm0
				y[64*c+32+l] = d1*float32(qs[l]>>4) - mm1
			}
		}
	}
}

func dequantQ5_K(dst []float32, src []byte) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[176*i : 176*i+176]
		d, dmin := f16(b), f16(b[2:])
		qh := b[16:48]
		y := dst[256*i : 256*i+256]
		for c := 0; c < 4; c++ {
			qs := b[48+32*c : 48+32*c+32]
			sc0, m0 := scaleMinK4(2*c, b[4:16])
			sc1, m1 := scaleMinK4(2*c+1, b[4:16])
			d0, mm0 := d*float32(sc0), dmin*float32(m0)
			d1, mm1 := d*float32(sc1), dmin*float32(m1)
			for l := 0; l < 32; l++ {
				lo := qs[l]&15 | (qh[l]>>(2*c)&1)<<4
				hi := qs[l]>>4 | (qh[l]>>(2*c+1)&1)<<4
				y[64*c+l] = d0*float32(lo) - mm0
				y[64*c+32+l] = d1*float32(hi) - mm1
			}
		}
	}
}

func dequantQ6_K(dst []float32, src []byte) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[210*i : 210*i+210]
		d := f16(b[208:])
		y := dst[256*i : 256*i+256]
		for h := 0; h < 2; h++ {
			ql, qh, sc := b[64*h:], b[128+32*h:], b[192+8*h:]
			o := y[128*h:]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int(ql[l]&15|(qh[l]>>0&3)<<4) - 32
				q2 := int(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				o[l] = d * float32(int8(sc[is])) * float32(q1)
				o[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				o[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				o[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

func dequantQ8_K(dst []float32, src []byte) {
	for i := 0; i < len(dst)/256; i++ {
		b := src[292*i : 292*i+292]
		d := math.Float32frombits(binary.LittleEndian.Uint32(b))
		y := dst[256*i : 256*i+256]
		for j := range y {
			y[j] = d * float32(int8(b[4+j]))
		}
	}
}

// quantizeQ8_K is the activation quantizer of the K formats' dot products,
// byte-identical with ggml's quantize_row_q8_K: d = −max/127 for the signed
// value of largest magnitude, codes rounded half to even, bsums per 16.
func quantizeQ8_K(dst []byte, src []float32, _ []float32) {
	for i := 0; i < len(src)/256; i++ {
		x := src[256*i : 256*i+256]
		b := dst[292*i : 292*i+292]
		var amax, smax float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, smax = a, v
			}
		}
		if amax == 0 {
			clear(b)
			continue
		}
		is := -127 / smax
		binary.LittleEndian.PutUint32(b, math.Float32bits(1/is))
		for g := 0; g < 16; g++ {
			sum := 0
			for l := 0; l < 16; l++ {
				q := min(127, int(math.RoundToEven(float64(is*x[16*g+l]))))
				b[4+16*g+l] = byte(int8(q))
				sum += q
			}
			binary.LittleEndian.PutUint16(b[260+2*g:], uint16(int16(sum)))
		}
	}
}
