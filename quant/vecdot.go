package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The int8-activation dot products: a row of weights of type t against a
// row of activations already quantized to t's VecDotType. These are the
// reference (scalar) kernels; engine/cpu/kernels has the fast ones.

// VecDotFunc returns the dot product of n values of a weight row of type t
// (w) with an activation row in FormatOf(t).VecDotType (x). The returned
// function does not check sizes.
func VecDotFunc(t Type) (func(n int, w, x []byte) float32, error) {
	switch t {
	case F32:
		return dotF32, nil
	case F16:
		return dotF16, nil
	case BF16:
		return dotBF16, nil
	case Q4_0, Q5_0, Q8_0:
		bb := formats[t].BlockBytes
		dec := legacyDecoder(t)
		return func(n int, w, x []byte) float32 {
			var sum float32
			var q [32]int8
			for i := 0; i < n/32; i++ {
				b, a := w[bb*i:bb*i+bb], x[34*i:34*i+34]
				d := dec(b, &q)
				var si int32
				for j := range q {
					si += int32(q[j]) * int32(int8(a[2+j]))
				}
				sum += float32(si) * (d * f16(a))
			}
			return sum
		}, nil
	case Q4_1, Q5_1:
		bb := formats[t].BlockBytes
		dec := legacyDecoder(t)
		return func(n int, w, x []byte) float32 {
			var sum float32
			var q [32]int8
			for i := 0; i < n/32; i++ {
				b, a := w[bb*i:bb*i+bb], x[36*i:36*i+36]
				d := dec(b, &q)
				var si int32
				for j := range q {
					si += int32(q[j]) * int32(int8(a[4+j]))
				}
				sum += float32(si)*(d*f16(a)) + f16(b[2:])*f16(a[2:])
			}
			return sum
		}, nil
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K:
		bb := formats[t].BlockBytes
		return func(n int, w, x []byte) float32 {
			var sum float32
			var k KBlock
			for i := 0; i < n/256; i++ {
				k.Decode(t, w[bb*i:bb*i+bb])
				a := x[292*i : 292*i+292]
				dx := math.Float32frombits(binary.LittleEndian.Uint32(a))
				var si, sm int32
				for g := 0; g < 16; g++ {
					var s int32
					for l := 0; l < 16; l++ {
						s += int32(k.Q[16*g+l]) * int32(int8(a[4+16*g+l]))
					}
					si += int32(k.Scale[g]) * s
					sm += int32(k.Min[g]) * int32(int16(binary.LittleEndian.Uint16(a[260+2*g:])))
				}
				sum += dx*k.D*float32(si) - dx*k.DMin*float32(sm)
			}
			return sum
		}, nil
	}
	return nil, fmt.Errorf("quant: no dot product for type %v", t)
}

// VecDot is the checked form of VecDotFunc: the dot product of a weight row
// of n values of type t with an activation row in t's VecDotType.
func VecDot(t Type, n int, w, x []byte) (float32, error) {
	f, err := VecDotFunc(t)
	if err != nil {
		return 0, err
	}
	wn, err := RowBytes(t, n)
	if err != nil {
		return 0, err
	}
	xn, err := RowBytes(formats[t].VecDotType, n)
	if err != nil {
		return 0, err
	}
	if len(w) < wn || len(x) < xn {
		return 0, fmt.Errorf("quant: %v dot of %d values needs %d+%d bytes, have %d+%d", t, n, wn, xn, len(w), len(x))
	}
	return f(n, w, x), nil
}

// legacyDecoder returns a function that decodes the signed codes of one
// block of t (without the _1 formats' minimum) and returns its scale.
func legacyDecoder(t Type) func(b []byte, q *[32]int8) float32 {
	switch t {
	case Q4_0:
		return func(b []byte, q *[32]int8) float32 {
			for j := 0; j < 16; j++ {
				q[j], q[j+16] = int8(b[2+j]&15)-8, int8(b[2+j]>>4)-8
			}
			return f16(b)
		}
	case Q4_1:
		return func(b []byte, q *[32]int8) float32 {
			for j := 0; j < 16; j++ {
				q[j], q[j+16] = int8(b[4+j]&15), int8(b[4+j]>>4)
			}
			return f16(b)
		}
	case Q5_0:
		return func(b []byte, q *[32]int8) float32 {
			qh := binary.LittleEndian.Uint32(b[2:])
			for j := 0; j < 16; j++ {
				q[j] = int8(b[6+j]&15|byte(qh>>j&1)<<4) - 16
				q[j+16] = int8(b[6+j]>>4|byte(qh>>(j+16)&1)<<4) - 16
			}
			return f16(b)
		}
	case Q5_1:
		return func(b []byte, q *[32]int8) float32 {
			qh := binary.LittleEndian.Uint32(b[4:])
			for j := 0; j < 16; j++ {
				q[j] = int8(b[8+j]&15 | byte(qh>>j&1)<<4)
				q[j+16] = int8(b[8+j]>>4 | byte(qh>>(j+16)&1)<<4)
			}
			return f16(b)
		}
	}
	return func(b []byte, q *[32]int8) float32 { // Q8_0
		for j := range q {
			q[j] = int8(b[2+j])
		}
		return f16(b)
	}
}

// KBlock is one decoded K-format super-block: value i is
// D·Scale[i/16]·Q[i] − DMin·Min[i/16].
type KBlock struct {
	D, DMin    float32
	Scale, Min [16]int8
	Q          [256]int8
}

// Decode fills k from one block of type t (q2_K..q6_K); the block must be
// FormatOf(t).BlockBytes long.
func (k *KBlock) Decode(t Type, b []byte) {
	switch t {
	case Q2_K:
		k.D, k.DMin = f16(b[80:]), f16(b[82:])
		for g := 0; g < 16; g++ {
			k.Scale[g], k.Min[g] = int8(b[g]&15), int8(b[g]>>4)
		}
		for v := 0; v < 256; v++ {
			h, s, sl := v/128, v%128/32, v%32
			k.Q[v] = int8(b[16+32*h+sl] >> (2 * s) & 3)
		}
	case Q3_K:
		k.D, k.DMin = f16(b[108:]), 0
		for g := 0; g < 16; g++ {
			k.Scale[g], k.Min[g] = int8(scaleQ3K(g, b[96:108])-32), 0
		}
		for v := 0; v < 256; v++ {
			h, s, sl := v/128, v%128/32, v%32
			q := int8(b[32+32*h+sl] >> (2 * s) & 3)
			if b[sl]&(1<<(4*h+s)) == 0 {
				q -= 4
			}
			k.Q[v] = q
		}
	case Q4_K, Q5_K:
		k.D, k.DMin = f16(b), f16(b[2:])
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, b[4:16])
			k.Scale[2*j], k.Scale[2*j+1] = int8(sc), int8(sc)
			k.Min[2*j], k.Min[2*j+1] = int8(m), int8(m)
		}
		qs := b[16:]
		if t == Q5_K {
			qs = b[48:]
		}
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				lo, hi := qs[32*c+l]&15, qs[32*c+l]>>4
				if t == Q5_K {
					lo |= (b[16+l] >> (2 * c) & 1) << 4
					hi |= (b[16+l] >> (2*c + 1) & 1) << 4
				}
				k.Q[64*c+l], k.Q[64*c+32+l] = int8(lo), int8(hi)
			}
		}
	case Q6_K:
		k.D, k.DMin = f16(b[208:]), 0
		for g := 0; g < 16; g++ {
			k.Scale[g], k.Min[g] = int8(b[192+g]), 0
		}
		for h := 0; h < 2; h++ {
			ql, qh := b[64*h:], b[128+32*h:]
			for l := 0; l < 32; l++ {
				v := 128*h + l
				k.Q[v] = int8(ql[l]&15|(qh[l]&3)<<4) - 32
				k.Q[v+32] = int8(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
				k.Q[v+64] = int8(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				k.Q[v+96] = int8(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			}
		}
	}
}

func dotF32(n int, w, x []byte) float32 {
	var s float64
	for i := 0; i < n; i++ {
		s += float64(math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))) * float64(math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:])))
	}
	return float32(s)
}

func dotF16(n int, w, x []byte) float32 {
	var s float64
	for i := 0; i < n; i++ {
		s += float64(f16(w[2*i:])) * float64(f16(x[2*i:]))
	}
	return float32(s)
}

func dotBF16(n int, w, x []byte) float32 {
	var s float64
	for i := 0; i < n; i++ {
		s += float64(BF16ToFloat32(binary.LittleEndian.Uint16(w[2*i:]))) * float64(BF16ToFloat32(binary.LittleEndian.Uint16(x[2*i:])))
	}
	return float32(s)
}

// QuantizeActivations quantizes rows of activations to format t (one of
// the VecDotTypes: q8_0, q8_1, q8_K, f16, bf16, f32) the way ggml's x86 CPU
// backend does before a dot product. For q8_0/q8_1 exact ties round half to
// even (x86 behaviour, not quantize_row_q8_0_ref's half away from zero).
func QuantizeActivations(t Type, dst []byte, src []float32) error {
	n, err := RowBytes(t, len(src))
	if err != nil {
		return err
	}
	if len(dst) < n {
		return fmt.Errorf("quant: %v: %d values need %d bytes, have %d", t, len(src), n, len(dst))
	}
	switch t {
	case Q8_0:
		QuantizeQ8_0Activations(dst, src)
	case Q8_1, Q8_K, F16, BF16, F32:
		formats[t].Quantize(dst, src, nil)
	default:
		return fmt.Errorf("quant: %v is not an activation format", t)
	}
	return nil
}
