package quant

import (
	"encoding/binary"
	"math"
)

// The legacy 32-value formats: one fp16 scale (and for the _1 formats an fp16
// minimum) per block of 32.

func dequantQ4_0(dst []float32, src []byte) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[18*i : 18*i+18]
		d := f16(b)
		y := dst[32*i : 32*i+32]
		for j := 0; j < 16; j++ {
			y[j] = float32(int(b[2+j]&15)-8) * d
			y[j+16] = float32(int(b[2+j]>>4)-8) * d
		}
	}
}

func dequantQ4_1(dst []float32, src []byte) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[20*i : 20*i+20]
		d, m := f16(b), f16(b[2:])
		y := dst[32*i : 32*i+32]
		for j := 0; j < 16; j++ {
			y[j] = float32(b[4+j]&15)*d + m
			y[j+16] = float32(b[4+j]>>4)*d + m
		}
	}
}

func dequantQ5_0(dst []float32, src []byte) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[22*i : 22*i+22]
		d := f16(b)
		qh := binary.LittleEndian.Uint32(b[2:])
		y := dst[32*i : 32*i+32]
		for j := 0; j < 16; j++ {
			lo := int(b[6+j]&15) | int(qh>>j&1)<<4
			hi := int(b[6+j]>>4) | int(qh>>(j+16)&1)<<4
			y[j] = float32(lo-16) * d
			y[j+16] = float32(hi-16) * d
		}
	}
}

func dequantQ5_1(dst []float32, src []byte) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[24*i : 24*i+24]
		d, m := f16(b), f16(b[2:])
		qh := binary.LittleEndian.Uint32(b[4:])
		y := dst[32*i : 32*i+32]
		for j := 0; j < 16; j++ {
			lo := uint32(b[8+j]&15) | (qh>>j&1)<<4
			hi := uint32(b[8+j]>>4) | (qh>>(j+16)&1)<<4
			y[j] = float32(lo)*d + m
			y[j+16] = float32(hi)*d + m
		}
	}
}

func dequantQ8_0(dst []float32, src []byte) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[34*i : 34*i+34]
		d := f16(b)
		y := dst[32*i : 32*i+32]
		for j := range y {
			y[j] = float32(int8(b[2+j])) * d
		}
	}
}

func dequantQ8_1(dst []float32, src []byte) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[36*i : 36*i+36]
		d := f16(b)
		y := dst[32*i : 32*i+32]
		for j := range y {
			y[j] = float32(int8(b[4+j])) * d
		}
	}
}

// weightsOf returns the importance of the n values starting at value off of
// a row: all ones without an importance matrix.
func weightsOf(imatrix []float32, off, n int, buf []float32) []float32 {
	w := buf[:n]
	if imatrix == nil {
		for i := range w {
			w[i] = 1
		}
		return w
	}
	off %= len(imatrix)
	return flushTiny(w, imatrix[off:off+n])
}

func quantizeQ4_0(dst []byte, src []float32, imatrix []float32) { encodeQ4_0(dst, src, imatrix, false) }

// encodeQ4_0 quantizes src to q4_0 with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ4_0(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [32]float32
	var q [32]int
	for i := 0; i < len(src)/32; i++ {
		x := flushTiny(xb[:], src[32*i:32*i+32])
		w := weightsOf(imatrix, 32*i, 32, wb[:])
		d := legacySym(x, w, -8, 7, exhaustive, imatrix == nil, q[:])
		b := dst[18*i : 18*i+18]
		putF16(b, d)
		for j := 0; j < 16; j++ {
			b[2+j] = byte(q[j]+8) | byte(q[j+16]+8)<<4
		}
	}
}

func quantizeQ5_0(dst []byte, src []float32, imatrix []float32) { encodeQ5_0(dst, src, imatrix, false) }

// encodeQ5_0 quantizes src to q5_0 with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ5_0(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	var wb, xb [32]float32
	var q [32]int
	for i := 0; i < len(src)/32; i++ {
		x := flushTiny(xb[:], src[32*i:32*i+32])
		w := weightsOf(imatrix, 32*i, 32, wb[:])
		d := legacySym(x, w, -16, 15, exhaustive, imatrix == nil, q[:])
		b := dst[22*i : 22*i+22]
		putF16(b, d)
		var qh uint32
		for j := 0; j < 16; j++ {
			lo, hi := q[j]+16, q[j+16]+16
			b[6+j] = byte(lo&15) | byte(hi&15)<<4
			qh |= uint32(lo>>4)<<j | uint32(hi>>4)<<(j+16)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
	}
}

func quantizeQ8_0(dst []byte, src []float32, imatrix []float32) {
	var wb, xb [32]float32
	var q [32]int
	for i := 0; i < len(src)/32; i++ {
		x := flushTiny(xb[:], src[32*i:32*i+32])
		w := weightsOf(imatrix, 32*i, 32, wb[:])
		d := bestSymScale(x, w, -127, 127, q[:])
		b := dst[34*i : 34*i+34]
		putF16(b, d)
		for j := range q {
			b[2+j] = byte(int8(q[j]))
		}
	}
}

// quantizeQ8_1 is the activation quantizer of the q4_1/q5_1 dot product
// (ggml's x86 CPU path: d = amax/127, q = x·(127/amax) rounded half to
// even, s = fp16(d·Σq)). The importance matrix is ignored.
func quantizeQ8_1(dst []byte, src []float32, _ []float32) {
	for i := 0; i < len(src)/32; i++ {
		b := dst[36*i : 36*i+36]
		d, sum := quantizeQ8Block(b[4:36], src[32*i:32*i+32])
		putF16(b, d)
		putF16(b[2:], d*float32(sum))
	}
}

// QuantizeQ8_0Activations quantizes activations to q8_0 as ggml's x86 CPU
// path does (d = amax/127, q = x·(127/amax) rounded half to even). Unlike the
// q8_0 weight quantizer it does not search the scale: it is the fast, exact
// counterpart of the dot-product kernels.
func QuantizeQ8_0Activations(dst []byte, src []float32) {
	for i := 0; i < len(src)/32; i++ {
		b := dst[34*i : 34*i+34]
		d, _ := quantizeQ8Block(b[2:34], src[32*i:32*i+32])
		putF16(b, d)
	}
}

// quantizeQ8Block writes 32 int8 codes of x to qs and returns the float32
// scale and the sum of the codes.
func quantizeQ8Block(qs []byte, x []float32) (float32, int) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	sum := 0
	for j, v := range x {
		q := int(math.RoundToEven(float64(v * id)))
		qs[j] = byte(int8(q))
		sum += q
	}
	return d, sum
}

func quantizeQ4_1(dst []byte, src []float32, imatrix []float32) { encodeQ4_1(dst, src, imatrix, false) }

// encodeQ4_1 quantizes src to q4_1 with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ4_1(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	ef := effortFor(imatrix)
	var wb, xb [32]float32
	var q [32]int
	for i := 0; i < len(src)/32; i++ {
		x := flushTiny(xb[:], src[32*i:32*i+32])
		w := weightsOf(imatrix, 32*i, 32, wb[:])
		d, m := legacyAffine(x, w, 15, exhaustive, ef, q[:])
		b := dst[20*i : 20*i+20]
		putF16(b, d)
		putF16(b[2:], m)
		for j := 0; j < 16; j++ {
			b[4+j] = byte(q[j]) | byte(q[j+16])<<4
		}
	}
}

func quantizeQ5_1(dst []byte, src []float32, imatrix []float32) { encodeQ5_1(dst, src, imatrix, false) }

// encodeQ5_1 quantizes src to q5_1 with the fast search, or with the
// exhaustive reference search when exhaustive is set.
func encodeQ5_1(dst []byte, src []float32, imatrix []float32, exhaustive bool) {
	ef := effortFor(imatrix)
	var wb, xb [32]float32
	var q [32]int
	for i := 0; i < len(src)/32; i++ {
		x := flushTiny(xb[:], src[32*i:32*i+32])
		w := weightsOf(imatrix, 32*i, 32, wb[:])
		d, m := legacyAffine(x, w, 31, exhaustive, ef, q[:])
		b := dst[24*i : 24*i+24]
		putF16(b, d)
		putF16(b[2:], m)
		var qh uint32
		for j := 0; j < 16; j++ {
			lo, hi := q[j], q[j+16]
			b[8+j] = byte(lo&15) | byte(hi&15)<<4
			qh |= uint32(lo>>4)<<j | uint32(hi>>4)<<(j+16)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}

// legacyAffine quantizes one q4_1/q5_1 block with the search of the given
// mode.
func legacyAffine(x, w []float32, nmax int, exhaustive bool, ef *effort, q []int) (float32, float32) {
	if exhaustive {
		return bestAffineScale(x, w, nmax, false, q)
	}
	return fastAffineScale(x, w, nmax, ef, q)
}

// legacySym quantizes one q4_0/q5_0 block with the search of the given mode.
func legacySym(x, w []float32, qmin, qmax int, exhaustive, unit bool, q []int) float32 {
	if exhaustive {
		return bestSymScale(x, w, qmin, qmax, q)
	}
	return fastSymScale(x, w, qmin, qmax, unit, q)
}
