package media

// The inverse DCT of libjpeg's accurate integer method ("ISLOW"): the
// Loeffler–Ligtenberg–Moschytz factorisation with 13-bit fixed-point
// constants, columns first with two extra bits of precision kept between
// the passes, rows second, then level shift by 128 and clamping to 0..255.
// The arithmetic (constants, rounding points, shifts) must be exactly
// libjpeg's for the output to match the reference bit for bit.
//
// On x86-64 libjpeg-turbo runs this transform in SIMD (SSE2/AVX2) with
// 16-bit lanes: dequantized coefficients keep their low 16 bits, four sums
// (in0±in4, in7+in3, in5+in1) wrap at 16 bits, each pass saturates its
// outputs to 16 bits, and a block whose rows 1..7 are all zero takes a
// shortcut that wraps in0·4 to 16 bits. None of this changes any result a
// valid JPEG can produce (they stay far inside 16 bits); it only decides
// what corrupt, out-of-range coefficients turn into. We follow the SIMD
// behaviour, which is what the reference's Pillow on x86-64 does.

const (
	idctConstBits = 13
	idctPass1Bits = 2
)

// The rotation constants, round(c * 2^13).
const (
	fix0298631336 = 2446  // sqrt(2) * (-c1+c3+c5-c7)
	fix0390180644 = 3196  // sqrt(2) * (c5-c3)
	fix0541196100 = 4433  // sqrt(2) * c6
	fix0765366865 = 6270  // sqrt(2) * (c2-c6)
	fix0899976223 = 7373  // sqrt(2) * (c7-c3)
	fix1175875602 = 9633  // sqrt(2) * c3
	fix1501321110 = 12299 // sqrt(2) * (c1+c3-c5-c7)
	fix1847759065 = 15137 // sqrt(2) * (-c2-c6)
	fix1961570560 = 16069 // sqrt(2) * (-c3-c5)
	fix2053119869 = 16819 // sqrt(2) * (c1+c3-c5+c7)
	fix2562915447 = 20995 // sqrt(2) * (-c1-c3)
	fix3072711026 = 25172 // sqrt(2) * (c1+c3+c5-c7)
)

// idct1D is the 8-point transform shared by both passes: in are the eight
// inputs (16-bit values) and the results are returned unscaled, still
// carrying the factor 2^13 of the constants; the caller rounds and shifts.
// All other arithmetic is exact 32-bit (wrapping like the SIMD lanes).
func idct1D(i0, i1, i2, i3, i4, i5, i6, i7 int32) (o0, o1, o2, o3, o4, o5, o6, o7 int32) {
	// Even part: inputs 0, 2, 4, 6.
	z1 := (i2 + i6) * fix0541196100
	t2 := z1 - i6*fix1847759065
	t3 := z1 + i2*fix0765366865
	t0 := int32(int16(i0+i4)) << idctConstBits
	t1 := int32(int16(i0-i4)) << idctConstBits
	e0, e3 := t0+t3, t0-t3
	e1, e2 := t1+t2, t1-t2

	// Odd part: inputs 7, 5, 3, 1.
	z1 = i7 + i1
	z2 := i5 + i3
	z3 := int32(int16(i7 + i3))
	z4 := int32(int16(i5 + i1))
	z5 := (z3 + z4) * fix1175875602
	a0 := i7 * fix0298631336
	a1 := i5 * fix2053119869
	a2 := i3 * fix3072711026
	a3 := i1 * fix1501321110
	z1 *= -fix0899976223
	z2 *= -fix2562915447
	z3 = z3*-fix1961570560 + z5
	z4 = z4*-fix0390180644 + z5
	a0 += z1 + z3
	a1 += z2 + z4
	a2 += z2 + z3
	a3 += z1 + z4

	return e0 + a3, e1 + a2, e2 + a1, e3 + a0, e3 - a0, e2 - a1, e1 - a2, e0 - a3
}

// idctISLOW dequantizes the coefficient block (natural order) with q and
// writes the 8x8 samples to out, rows stride bytes apart.
func idctISLOW(blk *[64]int16, q *[64]int32, out []byte, stride int) {
	_ = out[7*stride+7]
	var ws [64]int32
	// deq dequantizes coefficient i, keeping the low 16 bits of the product
	// as the SIMD multiply does.
	deq := func(i int) int32 { return int32(int16(int32(blk[i]) * q[i])) }

	// Pass 1: columns. A column whose AC terms are all zero is flat.
	for c := 0; c < 8; c++ {
		if blk[8+c] == 0 && blk[16+c] == 0 && blk[24+c] == 0 && blk[32+c] == 0 &&
			blk[40+c] == 0 && blk[48+c] == 0 && blk[56+c] == 0 {
			v := deq(c) << idctPass1Bits
			if int32(int16(v)) != v {
				// Out of 16-bit range (corrupt data only): the SIMD code
				// wraps in its whole-block shortcut and saturates otherwise.
				if rowsOneToSevenZero(blk) {
					v = int32(int16(v))
				} else {
					v = sat16(v)
				}
			}
			for r := 0; r < 8; r++ {
				ws[8*r+c] = v
			}
			continue
		}
		o0, o1, o2, o3, o4, o5, o6, o7 := idct1D(deq(c), deq(8+c), deq(16+c), deq(24+c), deq(32+c), deq(40+c), deq(48+c), deq(56+c))
		const sh = idctConstBits - idctPass1Bits
		const rnd = 1 << (sh - 1)
		ws[c] = sat16((o0 + rnd) >> sh)
		ws[8+c] = sat16((o1 + rnd) >> sh)
		ws[16+c] = sat16((o2 + rnd) >> sh)
		ws[24+c] = sat16((o3 + rnd) >> sh)
		ws[32+c] = sat16((o4 + rnd) >> sh)
		ws[40+c] = sat16((o5 + rnd) >> sh)
		ws[48+c] = sat16((o6 + rnd) >> sh)
		ws[56+c] = sat16((o7 + rnd) >> sh)
	}

	// Pass 2: rows, removing the pass-1 scaling and the factor 8.
	for r := 0; r < 8; r++ {
		w := (*[8]int32)(ws[8*r:])
		o := out[r*stride : r*stride+8]
		if w[1] == 0 && w[2] == 0 && w[3] == 0 && w[4] == 0 && w[5] == 0 && w[6] == 0 && w[7] == 0 {
			const sh = idctPass1Bits + 3
			v := clampSample((w[0] + 1<<(sh-1)) >> sh)
			for i := range o {
				o[i] = v
			}
			continue
		}
		o0, o1, o2, o3, o4, o5, o6, o7 := idct1D(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7])
		const sh = idctConstBits + idctPass1Bits + 3
		const rnd = 1 << (sh - 1)
		o[0] = clampSample((o0 + rnd) >> sh)
		o[1] = clampSample((o1 + rnd) >> sh)
		o[2] = clampSample((o2 + rnd) >> sh)
		o[3] = clampSample((o3 + rnd) >> sh)
		o[4] = clampSample((o4 + rnd) >> sh)
		o[5] = clampSample((o5 + rnd) >> sh)
		o[6] = clampSample((o6 + rnd) >> sh)
		o[7] = clampSample((o7 + rnd) >> sh)
	}
}

// rowsOneToSevenZero reports whether only the first row of coefficients
// can be nonzero.
func rowsOneToSevenZero(blk *[64]int16) bool {
	for _, v := range blk[8:] {
		if v != 0 {
			return false
		}
	}
	return true
}

// sat16 saturates v to the int16 range.
func sat16(v int32) int32 {
	return min(max(v, -32768), 32767)
}

// clampSample level-shifts an IDCT output by 128 and clamps it to 0..255.
func clampSample(v int32) byte {
	v += 128
	if uint32(v) <= 255 {
		return byte(v)
	}
	if v < 0 {
		return 0
	}
	return 255
}
