package kernels

import (
	"encoding/binary"
	"math"

	"github.com/clefrt/clef/quant"
)

// kRow is one K-format weight row decoded for the integer dot product:
// codes (256 per super-block), each group-of-16 scale repeated for the
// sixteen int16 lanes of a 32-code chunk (128 per super-block), minimums
// and the two float scales.
type kRow struct {
	q      []int8
	sc     []int16
	min    [][16]int8
	d, dm  []float32
	sums   []int32
	hasMin bool
}

func newKRow(nb int) *kRow {
	return &kRow{q: make([]int8, nb*256), sc: make([]int16, nb*128), min: make([][16]int8, nb),
		d: make([]float32, nb), dm: make([]float32, nb), sums: make([]int32, nb)}
}

// decode fills r from a weight row of type typ.
func (r *kRow) decode(typ quant.Type, w []byte, bb int) {
	var kb quant.KBlock
	r.hasMin = false
	for b := range r.d {
		kb.Decode(typ, w[b*bb:(b+1)*bb])
		copy(r.q[256*b:256*b+256], kb.Q[:])
		for g := 0; g < 16; g++ {
			// Chunk c = g/2 holds groups 2c (lanes 0-7) and 2c+1 (8-15).
			for l := 0; l < 8; l++ {
				r.sc[128*b+8*g+l] = int16(kb.Scale[g])
			}
			if kb.Min[g] != 0 {
				r.hasMin = true
			}
		}
		r.min[b] = kb.Min
		r.d[b], r.dm[b] = kb.D, kb.DMin
	}
}

// gemmK is the K-format GEMM: each weight row is decoded once (kRow) and
// every q8_K activation row is dotted with it in integer arithmetic, one
// int32 sum Σ scale·code·act per super-block (kSums).
func gemmK(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	nb := k / 256
	bb := wRow / max(nb, 1)
	r := newKRow(nb)
	for j := 0; j < n; j++ {
		r.decode(typ, w[j*wRow:(j+1)*wRow], bb)
		for i := 0; i < m; i++ {
			x := xq[i*xRow : (i+1)*xRow]
			kSums(r, x)
			var sum float32
			for b := 0; b < nb; b++ {
				a := x[292*b : 292*b+292]
				dx := math.Float32frombits(binary.LittleEndian.Uint32(a))
				sum += dx * r.d[b] * float32(r.sums[b])
				if r.hasMin {
					var sm int32
					for g := 0; g < 16; g++ {
						sm += int32(r.min[b][g]) * int32(int16(binary.LittleEndian.Uint16(a[260+2*g:])))
					}
					sum -= dx * r.dm[b] * float32(sm)
				}
			}
			out[i*ldOut+j] = sum
		}
	}
}

// kSumsGeneric sets r.sums[b] = Σ_i sc(i)·q[i]·act[i] over super-block b.
func kSumsGeneric(r *kRow, x []byte) {
	for b := range r.sums {
		q, qs, sc := r.q[256*b:256*b+256], x[292*b+4:292*b+260], r.sc[128*b:128*b+128]
		var si int32
		for g := 0; g < 16; g++ {
			var t int32
			for l := 0; l < 16; l++ {
				t += int32(q[16*g+l]) * int32(int8(qs[16*g+l]))
			}
			si += int32(sc[8*g]) * t
		}
		r.sums[b] = si
	}
}

// gemmFloat is the GEMM of the float formats: rows are widened to float32
// once and dotted in float32 with four accumulators.
func gemmFloat(typ quant.Type, w []byte, wRow, n, k int, xq []byte, xRow, m int, out []float32, ldOut int) {
	f, _ := quant.FormatOf(typ)
	xf := make([]float32, m*k)
	for i := 0; i < m; i++ {
		f.Dequantize(xf[i*k:(i+1)*k], xq[i*xRow:(i+1)*xRow])
	}
	wf := make([]float32, k)
	for j := 0; j < n; j++ {
		f.Dequantize(wf, w[j*wRow:(j+1)*wRow])
		for i := 0; i < m; i++ {
			out[i*ldOut+j] = dotF32(wf, xf[i*k:(i+1)*k])
		}
	}
}

// dotF32 is a float32 dot product with four partial sums.
func dotF32(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
