//go:build mslemu

package metal

import (
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
)

// moeTol is the conformance suite's MoE tolerance of experts stored as typ
// (its tolFor): f32 to float rounding, f16 and bf16 to float accumulation
// of their products, block formats to 8-bit activations.
func moeTol(typ quant.Type) float64 {
	switch typ {
	case quant.F32:
		return conformance.TolFloat
	case quant.F16, quant.BF16:
		return conformance.TolHalf
	}
	return conformance.TolBlock
}

// TestMoEHalfRowsEmulated: the MoE of every expert format the gathered
// kernels take (MLX affine aside: the suite binds no MLX experts) against
// the float64 product of the dequantized weights, with the routing the
// device chose, on the shader path and on the tensor path: NMSE within the
// conformance suite's tolerance of the format (logged: the error the 16-bit
// activations cost), and the routed entries' outputs pass from moe_down_*
// to the combine in bf16 exactly for the block formats (moe_combine_bf16),
// in f32 for f32, bf16 and f16 (moe_combine_f32). A combine that read the
// bf16 rows as f32 would read each pair of them as one float: garbage far
// outside the tolerance.
func TestMoEHalfRowsEmulated(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates the kernels")
	}
	types := []quant.Type{quant.F32, quant.BF16, quant.F16, quant.Q8_0, quant.Q5_1, quant.Q5_0, quant.Q4_1, quant.Q4_0,
		quant.Q6_K, quant.Q5_K, quant.Q4_K, quant.Q3_K, quant.Q2_K}
	for _, path := range []struct {
		name, env string
	}{{"shader", ""}, {"tensor", "1"}} {
		t.Run(path.name, func(t *testing.T) {
			t.Setenv(TensorEnv, path.env)
			b, err := NewEmulated()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			rng := rand.New(rand.NewSource(141))
			for _, typ := range types {
				measureMoE(t, b, rng, typ)
			}
		})
	}
}

// measureMoE runs one MoE of experts stored as typ (40 tokens, top-2 of 8
// experts, hidden and expert FFN of two blocks, or 64 for f32/f16/bf16) and
// checks it against the exact product.
func measureMoE(t *testing.T, b *Backend, rng *rand.Rand, typ quant.Type) {
	t.Helper()
	f, err := quant.FormatOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	const L, E, k = 40, 8, 2
	hidden := 2 * max(f.BlockElems, 32)
	ffn := hidden
	randn := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	type proj struct {
		raw  []byte
		deq  []float32
		rows int
		cols int
	}
	mk := func(rows, cols int) proj {
		rb, err := quant.RowBytes(typ, cols)
		if err != nil {
			t.Fatal(err)
		}
		p := proj{raw: make([]byte, E*rows*rb), deq: make([]float32, E*rows*cols), rows: rows, cols: cols}
		if err := quant.Quantize(typ, p.raw, randn(E*rows*cols, 1/math.Sqrt(float64(cols))), nil); err != nil {
			t.Fatal(err)
		}
		if err := quant.Dequantize(typ, p.deq, p.raw); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gate, up, down := mk(ffn, hidden), mk(ffn, hidden), mk(hidden, ffn)
	var ex backend.Experts
	for _, p := range []struct {
		dst  **backend.Tensor
		p    proj
		name string
	}{{&ex.Gate, gate, "gate"}, {&ex.Up, up, "up"}, {&ex.Down, down, "down"}} {
		w, err := b.Weight(&weights.Tensor{Name: p.name, Type: typ, Shape: []int{E, p.p.rows, p.p.cols}, Data: p.p.raw})
		if err != nil {
			t.Fatal(err)
		}
		*p.dst = w
	}
	x := randn(L*hidden, 1)
	lt, err := b.Upload(randn(L*E, 2), L, E)
	if err != nil {
		t.Fatal(err)
	}
	ids, ws, err := b.Route(lt, k, true)
	if err != nil {
		t.Fatal(err)
	}
	xt, err := b.Upload(x, L, hidden)
	if err != nil {
		t.Fatal(err)
	}
	out, idv, wv, ran := runMoE(t, b, xt, ids, ws, ex)
	bf16 := moeBF16Rows(typ)
	if ran("moe_combine_bf16") != bf16 || ran("moe_combine_f32") == bf16 {
		t.Errorf("%v: moe_combine_bf16 ran %v, moe_combine_f32 ran %v; want the bf16 rows' combine %v", typ,
			ran("moe_combine_bf16"), ran("moe_combine_f32"), bf16)
	}
	want := make([]float32, L*hidden)
	h := make([]float64, ffn)
	for r := range L {
		acc := make([]float64, hidden)
		for j := range k {
			e, w := int(idv[r*k+j]), float64(wv[r*k+j])
			for i := range ffn {
				var g, u float64
				for c := range hidden {
					xv := float64(x[r*hidden+c])
					g += float64(gate.deq[(e*ffn+i)*hidden+c]) * xv
					u += float64(up.deq[(e*ffn+i)*hidden+c]) * xv
				}
				h[i] = g / (1 + math.Exp(-g)) * u
			}
			for o := range hidden {
				var s float64
				for c := range ffn {
					s += float64(down.deq[(e*hidden+o)*ffn+c]) * h[c]
				}
				acc[o] += w * s
			}
		}
		for o := range hidden {
			want[r*hidden+o] = float32(acc[o])
		}
	}
	e := conformance.NMSE(out, want)
	t.Logf("%-5v NMSE %.3g (tolerance %.0g)", typ, e, moeTol(typ))
	if !(e <= moeTol(typ)) {
		t.Errorf("%v: NMSE %.3g > %.3g", typ, e, moeTol(typ))
	}
}
