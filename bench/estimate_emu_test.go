//go:build mslemu

package bench

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/metal"
	"github.com/clefrt/clef/quant"
)

// The tests here run a thinker prefill on the Metal backend over the
// emulated GPU and compare the backend's own accounting (launches,
// cost-model bytes and FLOPs per kernel) with the pass the estimate
// enumerates for the same shapes: 40 tokens in 16-row chunks (so the last
// chunk's projections take mul_mv and the layer concatenates its chunks).
// A change to the backend's op sequence, kernel choice or cost model fails
// them until Pass and PassTensor follow.

const (
	emuTokens = 40
	emuChunk  = 16
)

// TestPassMatchesBackend: the shader set (Pass, fused MoE) against the
// tiny model's f32 thinker.
func TestPassMatchesBackend(t *testing.T) {
	b := metal.EmulatedForTest(t)
	tc, m := tinyWeights(t)
	got := backendLaunches(t, b, m, tc)
	_, parted := got["moe_grid"]
	ls, err := Pass(shapeOf(tc, FormatF32, FormatF32, FormatF32, parted), emuTokens, true)
	if err != nil {
		t.Fatal(err)
	}
	compareLaunches(t, got, ls)
	t.Logf("%d kernels, %d launches (experts parted: %v)", len(got), len(ls), parted)
}

// TestPassTensorMatchesBackend: the tensor set (PassTensor) against the
// backend with the M5 path forced (CLEF_METAL_TENSOR=1, which compiles the
// emulated tensor library). The tiny model's f32 weights and head size 16
// have no tensor kernels, so the thinker is also run at the tiny model's
// sizes with the 4-bit release's formats and head size (q4_K matrices and
// embedding, a bf16 router, experts stacked as in a GGUF file, head size
// 128): its projections, MoE and attention must take the int8 kernels
// (quant_q8k_rows, mul_mm_t8_q4_K, moe_gu_t8_q4_K/moe_down_t8_q4_K) and
// flash_attn_t_d128 on the limbs of attn_limbs_qk/attn_limbs_v, and
// PassTensor must name exactly the launches the backend makes.
func TestPassTensorMatchesBackend(t *testing.T) {
	t.Setenv(metal.TensorEnv, "1")
	b := metal.EmulatedForTest(t)
	if on, why := b.TensorPath(); !on {
		t.Fatalf("tensor path off with %s=1: %s", metal.TensorEnv, why)
	}
	t.Run("tiny-f32", func(t *testing.T) {
		tc, m := tinyWeights(t)
		got := backendLaunches(t, b, m, tc)
		_, parted := got["moe_grid"]
		ls, err := PassTensor(shapeOf(tc, FormatF32, FormatF32, FormatF32, parted), emuTokens)
		if err != nil {
			t.Fatal(err)
		}
		compareLaunches(t, got, ls)
	})
	t.Run("q4_K-d128", func(t *testing.T) {
		tc := release.Text{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 128, Experts: 8, TopK: 2, ExpertFFN: 256,
			Vocab: 512, NormEps: 1e-6, RopeTheta: 1e6, MRoPESections: [3]int{24, 20, 20}, MRoPEInterleaved: true, NormTopK: true}
		m := synthWeights(t, tc, quant.Q4_K, quant.BF16)
		got := backendLaunches(t, b, m, tc)
		ls, err := PassTensor(shapeOf(tc, FormatQ4K, FormatBF16, FormatQ4K, false), emuTokens)
		if err != nil {
			t.Fatal(err)
		}
		compareLaunches(t, got, ls)
		// Not vacuous: the backend took every tensor family.
		for _, k := range []string{"quant_q8k_rows", "mul_mm_t8_q4_K", "moe_gu_t8_q4_K", "moe_down_t8_q4_K", "flash_attn_t_d128",
			"attn_limbs_qk", "attn_limbs_v"} {
			if got[k].Launches == 0 {
				t.Errorf("the backend launched no %s on the tensor path", k)
			}
		}
		t.Logf("%d kernels, %d launches", len(got), len(ls))
	})
	t.Run("q4_k_m-d128", func(t *testing.T) {
		// clef quantize's q4_k_m over 2 layers: layer 1 holds attn_v and
		// ffn_down_exps in q6_K (the router f32), so the MoE pairs
		// moe_gu_t8_q4_K with moe_down_t8_q6_K.
		tc := release.Text{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 128, Experts: 8, TopK: 2, ExpertFFN: 256,
			Vocab: 512, NormEps: 1e-6, RopeTheta: 1e6, MRoPESections: [3]int{24, 20, 20}, MRoPEInterleaved: true, NormTopK: true}
		ft, err := convert.ParseFileType("q4_k_m")
		if err != nil {
			t.Fatal(err)
		}
		m := synthMixed(t, tc, func(row release.Tensor) quant.Type {
			return convert.TensorType(ft, row.Role, row.Layer, tc.Layers, tc.Heads/tc.KVHeads)
		})
		got := backendLaunches(t, b, m, tc)
		sh := shapeOf(tc, FormatQ4K, FormatBF16, FormatQ4K, false)
		sh.File = "q4_k_m"
		ls, err := PassTensor(sh, emuTokens)
		if err != nil {
			t.Fatal(err)
		}
		compareLaunches(t, got, ls)
		for _, k := range []string{"mul_mm_t8_q4_K", "mul_mm_t8_q6_K", "moe_gu_t8_q4_K", "moe_down_t8_q4_K", "moe_down_t8_q6_K", "mul_mm_f32"} {
			if got[k].Launches == 0 {
				t.Errorf("the backend launched no %s on the tensor path", k)
			}
		}
	})
}

// tinyWeights opens the embedded tiny model.
func tinyWeights(t *testing.T) (release.Text, weights.Model) {
	dir, cleanup, err := tinymodel.WriteDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	r, err := release.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.Config.Thinker.Text, r.Weights
}

// shapeOf is the estimate's shape of the thinker tc in emuChunk-row
// chunks.
func shapeOf(tc release.Text, weights, router, embed WeightFormat, parted bool) ModelShape {
	return ModelShape{Layers: tc.Layers, Hidden: tc.Hidden, Heads: tc.Heads, KVHeads: tc.KVHeads, HeadDim: tc.HeadDim,
		Experts: tc.Experts, TopK: tc.TopK, FFN: tc.ExpertFFN, Weights: weights, Router: router, Embed: embed,
		Chunk: emuChunk, Parted: parted}
}

// backendLaunches runs a prefill of emuTokens tokens of the thinker tc with
// weights m on b and returns what the backend accounted for it, by kernel.
func backendLaunches(t *testing.T, b *metal.Backend, m weights.Model, tc release.Text) map[string]KernelEstimate {
	t.Helper()
	md, err := qwen3moe.Load(m, tc, b)
	if err != nil {
		t.Fatal(err)
	}
	md.Chunk = emuChunk
	ids := make([]int, emuTokens)
	for i := range ids {
		ids[i] = (7*i + 3) % tc.Vocab
	}
	before := b.Stats().Kernels
	out, err := md.Forward(context.Background(), qwen3moe.Input{IDs: ids}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	b.Free(out)
	got := map[string]KernelEstimate{}
	for k, v := range b.Stats().Kernels {
		p := before[k]
		if d := v.Dispatches - p.Dispatches; d > 0 {
			got[k] = KernelEstimate{Kernel: k, Launches: d, Bytes: v.Bytes - p.Bytes, FLOPs: v.FLOPs - p.FLOPs}
		}
	}
	return got
}

// compareLaunches checks that the pass ls has, per kernel, the launches,
// bytes and FLOPs the backend accounted (got), and no kernel either lacks.
func compareLaunches(t *testing.T, got map[string]KernelEstimate, ls []Launch) {
	t.Helper()
	want := map[string]KernelEstimate{}
	for _, l := range ls {
		k := want[l.Kernel]
		k.Launches++
		k.Bytes += l.Bytes
		k.FLOPs += l.FLOPs
		want[l.Kernel] = k
	}
	for _, k := range sortedKeys(want) {
		w, g := want[k], got[k]
		if g.Launches != w.Launches || !relNear(g.Bytes, w.Bytes, 1e-9) || !relNear(g.FLOPs, w.FLOPs, 1e-9) {
			t.Errorf("%s: backend %d launches, %.6g bytes, %.6g FLOPs; the pass %d, %.6g, %.6g", k, g.Launches, g.Bytes, g.FLOPs, w.Launches, w.Bytes, w.FLOPs)
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %d launches the backend made are not in the pass", k, got[k].Launches)
		}
	}
}

func sortedKeys(m map[string]KernelEstimate) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// memWeights is a weights.Model held in memory.
type memWeights map[string]*weights.Tensor

func (m memWeights) Tensor(name string) (*weights.Tensor, error) {
	if t, ok := m[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("memWeights: no tensor %q", name)
}
func (m memWeights) Has(name string) bool { _, ok := m[name]; return ok }
func (m memWeights) Names() []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
func (m memWeights) Close() error { return nil }

// synthWeights builds seeded random weights for the thinker tc under its
// GGUF names (experts stacked): matrices and the embedding in mat, the
// router in router, norms in f32 near 1.
func synthWeights(t *testing.T, tc release.Text, mat, router quant.Type) memWeights {
	return synthMixed(t, tc, func(row release.Tensor) quant.Type {
		if row.Role == release.RoleRouter {
			return router
		}
		return mat
	})
}

// synthMixed is synthWeights with each matrix of the type typeOf gives
// its row (norms in f32 whatever it says).
func synthMixed(t *testing.T, tc release.Text, typeOf func(release.Tensor) quant.Type) memWeights {
	t.Helper()
	rng := rand.New(rand.NewSource(14))
	m := memWeights{}
	for _, row := range release.DecoderTensors(tc) {
		if row.Role == release.RoleOutput {
			continue
		}
		typ, scale, bias := typeOf(row), 0.05, 0.0
		if row.Role == release.RoleNorm {
			typ, scale, bias = quant.F32, 0.1, 1
		}
		n := 1
		for _, d := range row.Shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(bias + scale*rng.NormFloat64())
		}
		cols := row.Shape[len(row.Shape)-1]
		rb, err := quant.RowBytes(typ, cols)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, n/cols*rb)
		if err := quant.QuantizeRows(typ, data, v, n/cols, cols, nil, 1); err != nil {
			t.Fatalf("%s: %v", row.GGUF, err)
		}
		m[row.GGUF] = &weights.Tensor{Name: row.GGUF, Type: typ, Shape: row.Shape, Data: data}
	}
	return m
}
