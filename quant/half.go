package quant

import "math"

// Float16ToFloat32 widens an IEEE binary16 value exactly (subnormals, signed
// zeros, infinities and NaN payloads included).
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case 0:
		// Subnormal or zero: man · 2^-24, exact in float32.
		f := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(f))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// Float32ToFloat16 narrows f to IEEE binary16, rounding to nearest even
// (what F16C's vcvtps2ph and ggml's reference conversion do). Overflow gives
// ±Inf, NaN stays a quiet NaN.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 112 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to Inf: both correct
	}
	return sign | uint16(q)
}

// BF16ToFloat32 widens a bfloat16 value exactly.
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToBF16 narrows f to bfloat16, rounding to nearest even; NaN stays a
// quiet NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// roundF16 rounds f to the nearest binary16 value and widens it back.
func roundF16(f float32) float32 { return Float16ToFloat32(Float32ToFloat16(f)) }

// superScale returns the fp16 super-block scale for integer sub-block
// scales up to smax: the value nearest maxV/smax, moved one step up when
// rounding fell short by more than fp16's relative precision (2^-11), which
// happens only below fp16's normal range. There the step is 2^-24, so
// maxV/smax may round to zero or far below, every sub-block clamps at smax,
// and an affine format is left with a minimum no code can cancel.
func superScale(maxV float64, smax int) float32 {
	d := roundF16(float32(maxV / float64(smax)))
	if maxV > 0 && float64(d)*float64(smax) < maxV*(1-1.0/2048) {
		if h := Float32ToFloat16(d); h < 0x7bff { // below the largest finite fp16
			d = Float16ToFloat32(h + 1)
		}
	}
	return d
}
