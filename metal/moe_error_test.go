//go:build mslemu

package metal

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
)

// TestMoEHalfError measures the MoE block's error against an exact
// (float64) evaluation of the same dequantized experts: the gathered
// matmuls stage x, h and the weights in half for every format but f32
// (float accumulation), so this is the price of the half tiles. It must
// stay within the conformance suite's tolerance of the weight type (f32
// keeps float tiles and is held to float32 rounding); the NMSE is logged.
// 100 tokens give each expert a full and a partial 64-token tile.
func TestMoEHalfError(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates the kernels")
	}
	b := emulated(t)
	rng := rand.New(rand.NewSource(11))
	for _, c := range []struct {
		typ quant.Type
		tol float64
	}{{quant.F32, conformance.TolFloat}, {quant.BF16, conformance.TolHalf}, {quant.Q8_0, conformance.TolBlock}, {quant.Q4_K, conformance.TolBlock}} {
		const L, E, k, hidden, ffn = 100, 4, 3, 256, 256
		var ts [3]*backend.Tensor
		deq := [3][]float32{}
		for p := range ts {
			rows, cols := ffn, hidden
			if p == 2 {
				rows, cols = hidden, ffn
			}
			rb, err := quant.RowBytes(c.typ, cols)
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, E*rows*rb)
			deq[p] = make([]float32, E*rows*cols)
			for e := 0; e < E; e++ {
				v := make([]float32, rows*cols)
				for i := range v {
					v[i] = float32(rng.NormFloat64() / math.Sqrt(float64(cols)))
				}
				part := data[e*rows*rb : (e+1)*rows*rb]
				if err := quant.Quantize(c.typ, part, v, nil); err != nil {
					t.Fatal(err)
				}
				if err := quant.Dequantize(c.typ, deq[p][e*rows*cols:(e+1)*rows*cols], part); err != nil {
					t.Fatal(err)
				}
			}
			ts[p], err = b.Weight(&weights.Tensor{Name: "experts", Type: c.typ, Shape: []int{E, rows, cols}, Data: data})
			if err != nil {
				t.Fatal(err)
			}
		}
		x := make([]float32, L*hidden)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		logits := make([]float32, L*E)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		lg, _ := b.Upload(logits, L, E)
		ids, ws, err := b.Route(lg, k, true)
		if err != nil {
			t.Fatal(err)
		}
		tx, _ := b.Upload(x, L, hidden)
		y, err := b.MoE(tx, ids, ws, backend.Experts{Gate: ts[0], Up: ts[1], Down: ts[2]})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Read(context.Background(), y)
		if err != nil {
			t.Fatal(err)
		}
		idv, err := b.Read(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		wv, err := b.Read(context.Background(), ws)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, L*hidden)
		for r := 0; r < L; r++ {
			acc := make([]float64, hidden)
			for j := 0; j < k; j++ {
				e := int(idv[r*k+j]) // Read converts I32 to float
				hv := make([]float64, ffn)
				for m := range hv {
					var g, u float64
					for i := 0; i < hidden; i++ {
						xi := float64(x[r*hidden+i])
						g += xi * float64(deq[0][(e*ffn+m)*hidden+i])
						u += xi * float64(deq[1][(e*ffn+m)*hidden+i])
					}
					hv[m] = g / (1 + math.Exp(-g)) * u
				}
				for o := range acc {
					var s float64
					for m, h := range hv {
						s += h * float64(deq[2][(e*hidden+o)*ffn+m])
					}
					acc[o] += float64(wv[r*k+j]) * s
				}
			}
			for o, v := range acc {
				want[r*hidden+o] = float32(v)
			}
		}
		nmse := conformance.NMSE(got, want)
		t.Logf("MoE %v: NMSE %.3g against the exact experts (tolerance %.3g)", c.typ, nmse, c.tol)
		if !(nmse <= c.tol) {
			t.Errorf("MoE %v: NMSE %.3g > %.3g", c.typ, nmse, c.tol)
		}
	}
}
