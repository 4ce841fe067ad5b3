package cpu

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

func f32Tensor(name string, v []float32, shape ...int) *weights.Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return &weights.Tensor{Name: name, Type: quant.F32, Shape: shape, Data: b}
}

// TestMLXWeights binds MLX affine 4- and 8-bit weights and checks the
// decoded rows and a matmul against the quant reference decoder.
func TestMLXWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	b := New(backend.Options{Threads: 2})
	for _, tc := range []struct {
		typ  quant.Type
		bits int
	}{{quant.MLXAffine4, 4}, {quant.MLXAffine8, 8}} {
		const rows, cols, g = 5, 128, 64
		packed := make([]byte, rows*cols*tc.bits/8)
		for i := range packed {
			packed[i] = byte(rng.Uint32())
		}
		sc := make([]float32, rows*cols/g)
		bi := make([]float32, rows*cols/g)
		for i := range sc {
			sc[i], bi[i] = float32(rng.Float64()*0.1), float32(rng.NormFloat64()*0.1)
		}
		wt := &weights.Tensor{Name: "w", Type: tc.typ, Shape: []int{rows, cols}, Data: packed, GroupSize: g,
			Scales: f32Tensor("w.scales", sc, rows, cols/g), Biases: f32Tensor("w.biases", bi, rows, cols/g)}
		w, err := b.Weight(wt)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, rows*cols)
		for r := 0; r < rows; r++ {
			rb := cols * tc.bits / 8
			if err := quant.DequantizeMLXAffine(want[r*cols:(r+1)*cols], packed[r*rb:(r+1)*rb], sc[r*cols/g:], bi[r*cols/g:], tc.bits, g); err != nil {
				t.Fatal(err)
			}
		}
		got, err := b.Read(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: value %d decoded %v, want %v", tc.typ, i, got[i], want[i])
			}
		}
		x := make([]float32, 3*cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		tx, _ := b.Upload(x, 3, cols)
		y, err := b.MatMul(tx, w)
		if err != nil {
			t.Fatal(err)
		}
		yv, _ := b.Read(context.Background(), y)
		for i := 0; i < 3; i++ {
			for j := 0; j < rows; j++ {
				var s float64
				for k := 0; k < cols; k++ {
					s += float64(x[i*cols+k]) * float64(want[j*cols+k])
				}
				if math.Abs(s-float64(yv[i*rows+j])) > 1e-4*(1+math.Abs(s)) {
					t.Fatalf("%v: out[%d,%d] = %v, want %v", tc.typ, i, j, yv[i*rows+j], s)
				}
			}
		}
		// Damaged: scales of the wrong shape, missing biases.
		bad := *wt
		bad.Scales = f32Tensor("w.scales", sc[:rows], rows, 1)
		if _, err := b.Weight(&bad); err == nil {
			t.Errorf("%v: wrong scales shape accepted", tc.typ)
		}
		bad = *wt
		bad.Biases = nil
		if _, err := b.Weight(&bad); err == nil {
			t.Errorf("%v: missing biases accepted", tc.typ)
		}
	}
}
