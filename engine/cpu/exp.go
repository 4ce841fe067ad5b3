package cpu

import "math"

// expf returns e^x in float32 arithmetic for the softmax of attention
// (x <= 0 there): x = n·ln2 + r with |r| <= ln2/2, a degree-6 polynomial
// for e^r (the Cephes expf coefficients) and 2^n put into the exponent.
// The error is within 2 ulp of the correctly rounded result; arguments
// below -87.3 give 0 and NaN stays NaN.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x < -87.3:
		return 0
	case x > 88.7:
		return float32(math.Inf(1))
	}
	fx := x * 1.44269504088896341
	var n float32
	if fx >= 0 {
		n = float32(int32(fx + 0.5))
	} else {
		n = float32(int32(fx - 0.5))
	}
	r := x - n*0.693359375 + n*2.12194440e-4
	z := r * r
	y := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	y = y*z + r + 1
	e := int32(n) + 127
	if e <= 0 { // 2^n is subnormal: scale in two steps
		return y * math.Float32frombits(uint32(e+126)<<23) * math.Float32frombits(1<<23)
	}
	return y * math.Float32frombits(uint32(e)<<23)
}
