//go:build mslemu

package metal

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
)

// launchCounter counts launches by kernel name.
type launchCounter struct {
	gpu
	n map[string]int
}

func (c *launchCounter) Dispatch(d *dispatch) error {
	c.n[d.Kernel]++
	return c.gpu.Dispatch(d)
}

// TestMoEStacked: a contiguous stack of experts (a GGUF *_exps tensor)
// takes the one-launch gathered path (one moe_tiles table per layer, one
// moe_gu launch for gate and up with SiLU·up in its epilogue, one moe_down,
// no silu_mul), a parted one (experts stored one by one) one moe_grid and
// one launch per expert and kernel, and both give the same bits.
func TestMoEStacked(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates the kernels")
	}
	b := emulated(t)
	cnt := &launchCounter{gpu: b.dev, n: map[string]int{}}
	b.dev = cnt
	defer func() { b.dev = cnt.gpu }()
	rng := rand.New(rand.NewSource(7))
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q8_0} {
		const L, E, k, hidden, ffn = 100, 4, 3, 256, 256 // ~75 entries per expert: two 64-token tiles
		rb, err := quant.RowBytes(typ, hidden)
		if err != nil {
			t.Fatal(err)
		}
		n := ffn * rb // hidden == ffn: every matrix has the same size
		stacked := [3][]byte{}
		for p := range stacked {
			stacked[p] = make([]byte, E*n)
			for e := 0; e < E; e++ {
				v := make([]float32, ffn*hidden)
				for i := range v {
					v[i] = float32(rng.NormFloat64() / 16)
				}
				if err := quant.Quantize(typ, stacked[p][e*n:(e+1)*n], v, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		bind := func(parted bool) backend.Experts {
			var ts [3]*backend.Tensor
			for p := range ts {
				w := &weights.Tensor{Name: "experts", Type: typ, Shape: []int{E, ffn, hidden}, Data: stacked[p]}
				if parted {
					w.Data, w.Parts = nil, make([][]byte, E)
					for e := range w.Parts {
						w.Parts[e] = append([]byte(nil), stacked[p][e*n:(e+1)*n]...)
					}
				}
				ts[p], err = b.Weight(w)
				if err != nil {
					t.Fatal(err)
				}
			}
			return backend.Experts{Gate: ts[0], Up: ts[1], Down: ts[2]}
		}
		x := make([]float32, L*hidden)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		logits := make([]float32, L*E)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		run := func(ex backend.Experts) []float32 {
			lg, _ := b.Upload(logits, L, E)
			ids, ws, err := b.Route(lg, k, true)
			if err != nil {
				t.Fatal(err)
			}
			tx, _ := b.Upload(x, L, hidden)
			y, err := b.MoE(tx, ids, ws, ex)
			if err != nil {
				t.Fatal(err)
			}
			out, err := b.Read(context.Background(), y)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		clear(cnt.n)
		one := run(bind(false))
		s := kernelName(t, typ)
		if cnt.n["moe_tiles"] != 1 || cnt.n["moe_gu_"+s] != 1 || cnt.n["moe_down_"+s] != 1 || cnt.n["moe_grid"] != 0 ||
			cnt.n["silu_mul_f32"] != 0 {
			t.Fatalf("%v contiguous experts: launches %v, want one moe_tiles, one moe_gu and one moe_down", typ, cnt.n)
		}
		clear(cnt.n)
		per := run(bind(true))
		if cnt.n["moe_grid"] != 1 || cnt.n["moe_gu_"+s] != E || cnt.n["moe_down_"+s] != E || cnt.n["moe_tiles"] != 0 || cnt.n["silu_mul_f32"] != 0 {
			t.Fatalf("%v parted experts: launches %v, want one moe_grid, one moe_gu and one moe_down per expert", typ, cnt.n)
		}
		var nonzero int
		for i := range one {
			if math.Float32bits(one[i]) != math.Float32bits(per[i]) {
				t.Fatalf("%v element %d: one launch %g, per expert %g", typ, i, one[i], per[i])
			}
			if one[i] != 0 && !math.IsNaN(float64(one[i])) {
				nonzero++
			}
		}
		if nonzero < len(one)/2 {
			t.Fatalf("%v: only %d of %d outputs are finite and nonzero", typ, nonzero, len(one))
		}
	}
}

func kernelName(t *testing.T, typ quant.Type) string {
	s, err := kernelSuffix(typ)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
