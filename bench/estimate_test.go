package bench

import (
	"bytes"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/chips"
)

// sum adds the FLOPs and bytes of the launches of layer (all layers when
// layer < -1) whose class is in classes.
func sumLaunches(ls []Launch, layer int, classes ...Class) (flops, bytes float64) {
	for _, l := range ls {
		if layer >= -1 && l.Layer != layer {
			continue
		}
		for _, c := range classes {
			if l.Class == c {
				flops += l.FLOPs
				bytes += l.Bytes
			}
		}
	}
	return
}

func relNear(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// TestPassFLOPs: the enumerated pass does the model's arithmetic: per
// layer at 1k tokens 116 G of matmuls (q, k, v, o, router, gate, up, down)
// and 8.6 G of causal attention (shaders/README.md's roofline), 1.63
// T + 1.68 T per layer at 14k, and 5.6 T + 0.41 T over the 1k pass; each
// also exactly as the closed forms give them, chunked or not.
func TestPassFLOPs(t *testing.T) {
	s := Thinker
	for _, c := range []struct {
		L                  int
		layerMM, layerAttn float64 // rounded, as published in the README
		passMM, passAttn   float64
	}{
		{1024, 116e9, 8.6e9, 5.6e12, 0.41e12},
		{14336, 1.63e12, 1.68e12, 78e12, 81e12},
	} {
		L := float64(c.L)
		// Closed forms: 2·L·(in·out) per projection; attention 4·d per
		// query-key pair of each head, L(L+1)/2 pairs when causal.
		proj := 2 * L * float64(s.Hidden) * float64(2*s.Heads*s.HeadDim+2*s.KVHeads*s.HeadDim+s.Experts)
		experts := 2 * L * float64(s.TopK) * 3 * float64(s.Hidden) * float64(s.FFN)
		attn := 4 * float64(s.Heads*s.HeadDim) * L * (L + 1) / 2
		for _, fused := range []bool{false, true} {
			for _, chunk := range []int{s.Chunk, 0, 100} {
				sh := s
				sh.Chunk = chunk
				ls, err := Pass(sh, c.L, fused)
				if err != nil {
					t.Fatal(err)
				}
				mm, _ := sumLaunches(ls, 0, ClassMatMul, ClassMatMulF, ClassMatVec, ClassMoE)
				at, _ := sumLaunches(ls, 0, ClassAttention)
				if !relNear(mm, proj+experts, 1e-12) || !relNear(at, attn, 1e-12) {
					t.Errorf("L=%d chunk %d fused %v: layer 0 %.6g matmul + %.6g attention FLOPs, want %.6g + %.6g", c.L, chunk, fused, mm, at, proj+experts, attn)
				}
				if !relNear(mm, c.layerMM, 0.01) || !relNear(at, c.layerAttn, 0.01) {
					t.Errorf("L=%d: layer 0 %.4g + %.4g FLOPs, the README says %.4g + %.4g", c.L, mm, at, c.layerMM, c.layerAttn)
				}
				pmm, _ := sumLaunches(ls, -2, ClassMatMul, ClassMatMulF, ClassMatVec, ClassMoE)
				pat, _ := sumLaunches(ls, -2, ClassAttention)
				if !relNear(pmm, 48*(proj+experts), 1e-12) || !relNear(pmm, c.passMM, 0.02) || !relNear(pat, c.passAttn, 0.02) {
					t.Errorf("L=%d: pass %.4g + %.4g FLOPs, want %.4g + %.4g", c.L, pmm, pat, c.passMM, c.passAttn)
				}
			}
		}
	}
}

// TestPassLaunches: the per-layer launch list at 1k tokens in 512-row
// chunks (the backend's op sequence) of q4_k_m's layers (layer 0 has q6_K
// attn_v and ffn_down_exps, layer 6 is all q4_K; 24 layers of each), and
// what fusing gate and up changes.
func TestPassLaunches(t *testing.T) {
	count := func(ls []Launch, layer int) map[string]int {
		m := map[string]int{}
		for _, l := range ls {
			if l.Layer == layer {
				m[l.Kernel]++
			}
		}
		return m
	}
	ls, err := Pass(Thinker, 1024, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		// attn_norm (all rows, then per chunk), k norm, q norm, ffn norm
		"rms_norm_f32": 1 + 1 + 2*3, "mul_mm_q4_K": 2 + 2*2, "rope_f32": 1 + 2, "flash_attn_mma_d128": 2,
		"add_f32": 2 * 2, "mul_mm_f32": 2, "moe_topk_f32": 2, "moe_map": 2, "moe_tiles": 2 * 3, "mul_mm_id_q4_K": 2 * 3,
		"silu_mul_f32": 2, "moe_combine_f32": 2, "copy_f32": 2,
	}
	if got := count(ls, 6); !equalCounts(got, want) {
		t.Errorf("layer 6 launches %v, want %v", got, want)
	}
	want0 := maps.Clone(want)
	want0["mul_mm_q4_K"], want0["mul_mm_q6_K"] = 1+2*2, 1     // v
	want0["mul_mm_id_q4_K"], want0["mul_mm_id_q6_K"] = 2*2, 2 // down
	if got := count(ls, 0); !equalCounts(got, want0) {
		t.Errorf("layer 0 launches %v, want %v", got, want0)
	}
	q6 := 0
	for _, l := range ls {
		if l.Kernel == "mul_mm_id_q6_K" {
			q6++
		}
	}
	if n := len(ls); n != 1+48*sumCounts(want)+1 || q6 != 24*2 {
		t.Errorf("%d launches in the pass (%d of q6_K experts), want %d (48)", n, q6, 1+48*sumCounts(want)+1)
	}
	fl, err := Pass(Thinker, 1024, true)
	if err != nil {
		t.Fatal(err)
	}
	got := count(fl, 0)
	if got["silu_mul_f32"] != 0 || got["mul_mm_id_q4_K"] != 0 || got["moe_gu_q4_K"] != 2 || got["moe_down_q6_K"] != 2 || got["moe_tiles"] != 2 {
		t.Errorf("fused layer 0 launches %v", got)
	}
	f0, b0 := sumLaunches(ls, -2, ClassMoE, ClassStream)
	f1, b1 := sumLaunches(fl, -2, ClassMoE, ClassStream)
	// Fusing (as the backend costs it: moeLaunchCost) reads the same
	// weights and saves, per routed entry, the rows between the ops: the
	// unfused gate, up and down each read and write f32 rows (12 of hidden,
	// 12 of FFN), silu_mul reads two and writes one (12 of FFN), the
	// combine reads k f32 outputs and k weights; fused, gate-up reads x once
	// and writes h in half (4 of hidden, 2 of FFN), down writes bf16 (2 of
	// FFN, 2 of hidden) and the combine reads bf16 rows: 8 bytes of hidden
	// and 20 of FFN saved an entry, silu_mul's 4 FLOPs a value, and two of
	// the three moe_tiles per chunk (its one table has 64-token tiles
	// instead of 32).
	entries := 1024.0 * 8 * 48
	tiles := 2 * 48 * (3*(4*128+8*(512*8/32+128+1)) - (4*128 + 8*(512*8/64+128+1)))
	wantSaved := entries*(8*2048+20*768) + float64(tiles)
	if !relNear(b0-b1, wantSaved, 1e-12) || !relNear(f0-f1, entries*768*4, 1e-12) {
		t.Errorf("fusing saved %.6g bytes and %.6g FLOPs, want %.6g and %.6g", b0-b1, f0-f1, wantSaved, entries*768*4)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestPassAttentionSplit: at 64k the later chunks' attention splits into
// query chunks (as metal's queryChunk) without changing the FLOPs, and no
// launch stays above the backend's op budget unless it is one threadgroup.
func TestPassAttentionSplit(t *testing.T) {
	ls, err := Pass(Thinker, 65536, false)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range ls {
		if l.Layer == 0 && l.Class == ClassAttention {
			n++
			if costSeconds(l.Bytes, l.FLOPs) > costOpSeconds {
				t.Errorf("attention launch of %.3g s on the conservative chip", costSeconds(l.Bytes, l.FLOPs))
			}
		}
	}
	if chunks := 65536 / Thinker.Chunk; n <= chunks {
		t.Errorf("%d attention launches per layer at 64k, want more than the %d chunks", n, chunks)
	}
}

// TestEstimate: times are at least each roofline floor, the tensor set
// falls back to the shader set without neural accelerators, more
// efficiency is never slower, and BreakEven's efficiency gives the target.
func TestEstimate(t *testing.T) {
	m4, _ := chips.ByKey("m4-max")
	m5, _ := chips.ByKey("m5-max")
	shader, _ := SetByName("shader")
	tensor, _ := SetByName("tensor")
	for _, c := range []chips.Chip{m4, m5} {
		for _, set := range Sets {
			e, err := Estimate(Thinker, 1024, c, set)
			if err != nil {
				t.Fatal(err)
			}
			peak := math.Max(c.F16(), math.Max(c.TensorTFLOPs, c.TensorInt8TOPs)) * 1e12
			if e.Seconds < e.FLOPs/peak || e.Seconds < float64(e.Launches)*launchOverhead {
				t.Errorf("%s %s: %.3g s is under a floor", c.Name, set.Name, e.Seconds)
			}
			tot := 0.0
			for _, k := range e.Kernels {
				tot += k.Seconds
			}
			if !relNear(tot, e.Seconds, 1e-9) {
				t.Errorf("%s %s: kernels add to %.6g s of %.6g", c.Name, set.Name, tot, e.Seconds)
			}
		}
	}
	a, _ := Estimate(Thinker, 14336, m4, tensor)
	b, _ := Estimate(Thinker, 14336, m4, shader)
	if a.Set.Name != "shader" || a.Seconds != b.Seconds {
		t.Errorf("tensor on the M4 Max: set %s, %.4g s; want the shader set's %.4g s", a.Set.Name, a.Seconds, b.Seconds)
	}
	s5, _ := Estimate(Thinker, 14336, m5, shader)
	t5, _ := Estimate(Thinker, 14336, m5, tensor)
	if t5.Seconds >= s5.Seconds {
		t.Errorf("M5 Max: tensor %.4g s not faster than shader %.4g s", t5.Seconds, s5.Seconds)
	}
	for _, target := range []float64{0.19, 0.3} {
		x, err := BreakEven(Thinker, 1024, m5, tensor, target)
		if err != nil || x <= 0 || x > 1 {
			t.Fatalf("BreakEven(%v) = %v, %v", target, x, err)
		}
		set := tensor
		set.Eff = map[Class]Efficiency{}
		for k, v := range tensor.Eff {
			if isCompute(k) {
				v.Compute = x
			}
			set.Eff[k] = v
		}
		e, _ := Estimate(Thinker, 1024, m5, set)
		if !relNear(e.Seconds, target, 1e-6) {
			t.Errorf("at the break-even %.4f: %.6g s, want %v", x, e.Seconds, target)
		}
	}
	if x, _ := BreakEven(Thinker, 1024, m4, shader, 0.01); x <= 1 {
		t.Errorf("10 ms on an M4 Max reachable at %.3g", x)
	}
}

// TestSets: every set prices every class with an efficiency in (0, 1],
// a known rate and a stated reason.
func TestSets(t *testing.T) {
	for _, s := range Sets {
		classes := []Class{ClassStream, ClassMatVec, ClassMatMul, ClassMatMulF, ClassMoE, ClassAttention}
		if s.NeedsTensor {
			classes = append(classes, ClassMatMulT, ClassMoET, ClassMatMul8, ClassMoE8, ClassMatMul8Q6, ClassMoE8Q6)
		}
		for _, c := range classes {
			e, ok := s.Eff[c]
			if !ok || !(e.Compute > 0 && e.Compute <= 1 && e.Bandwidth > 0 && e.Bandwidth <= 1 && e.DRAM > 0 && e.DRAM <= 1) || e.Why == "" {
				t.Errorf("%s/%s: %+v", s.Name, c, e)
			}
			if e.Rate != "f32" && e.Rate != "f16" && e.Rate != "tensor" && e.Rate != "int8" {
				t.Errorf("%s/%s: rate %q", s.Name, c, e.Rate)
			}
			if e.Ops < 0 || (e.Ops > 0 && e.Ops < 1) {
				t.Errorf("%s/%s: %v operations a FLOP", s.Name, c, e.Ops)
			}
			if (e.Rate == "tensor" || e.Rate == "int8") && !s.NeedsTensor {
				t.Errorf("%s/%s runs on the accelerators but the set does not need them", s.Name, c)
			}
		}
		if _, ok := SetByName(s.FallBack); !ok {
			t.Errorf("%s: no fallback set %q", s.Name, s.FallBack)
		}
	}
}

// TestPassBadShape: a shape that cannot be enumerated is an error.
func TestPassBadShape(t *testing.T) {
	bad := Thinker
	bad.KVHeads = 3
	if _, err := Pass(bad, 1024, false); err == nil {
		t.Error("32 heads over 3 kv heads accepted")
	}
	if _, err := Pass(Thinker, 0, false); err == nil {
		t.Error("0 tokens accepted")
	}
	bad = Thinker
	bad.File = "" // Weights, not the mixture
	bad.Weights = WeightFormat{"q4_K", 256, 144}
	bad.FFN = 100
	if _, err := Pass(bad, 16, false); err == nil {
		t.Error("FFN of 100 in 256-weight blocks accepted")
	}
}

// TestWriteEstimate: the printout names every chip of "all", the sets, the
// token counts and the MLX figures, and says it is an estimate.
func TestWriteEstimate(t *testing.T) {
	cs, err := EstimateChips("all")
	if err != nil || len(cs) != 5 {
		t.Fatalf("all: %d chips, %v", len(cs), err)
	}
	if _, err := EstimateChips("m9-max"); err == nil {
		t.Error("m9-max accepted")
	}
	var b bytes.Buffer
	if err := WriteEstimate(&b, cs, Sets); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"ESTIMATES, not measurements", "M1 Max", "M5 Max, tensor, 14336 tokens", "MLX published: 190.0 ms", "MLX published: 4.50 s",
		"M4 Max, shader, 65536 tokens", "no neural accelerators on the M4 Max", "moe_gu_q4_K"} {
		if !strings.Contains(out, want) {
			t.Errorf("printout lacks %q", want)
		}
	}
}

// TestPassTensorClasses: on the M5 path the q4_k_m thinker's launches take
// the efficiency class of their kernel's format (q6_K's int8 kernels their
// own, the f32 router the float tiles'), and an estimate whose set lacks a
// launch's class is an error, not a NaN.
func TestPassTensorClasses(t *testing.T) {
	ls, err := PassTensor(Thinker, 1024)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Class{"mul_mm_t8_q4_K": ClassMatMul8, "mul_mm_t8_q6_K": ClassMatMul8Q6, "moe_gu_t8_q4_K": ClassMoE8,
		"moe_down_t8_q4_K": ClassMoE8, "moe_down_t8_q6_K": ClassMoE8Q6, "mul_mm_f32": ClassMatMulF, "flash_attn_t_d128": ClassAttention}
	seen := map[string]bool{}
	for _, l := range ls {
		if c, ok := want[l.Kernel]; ok {
			seen[l.Kernel] = true
			if l.Class != c {
				t.Errorf("%s: class %s, want %s", l.Kernel, l.Class, c)
			}
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no %s launch in the q4_k_m pass", k)
		}
	}
	set, _ := SetByName("tensor")
	c, _ := chips.ByKey("m5-max")
	broken := set
	broken.Eff = maps.Clone(set.Eff)
	delete(broken.Eff, ClassMoE8Q6)
	if _, err := Estimate(Thinker, 1024, c, broken); err == nil {
		t.Error("an estimate without moe8-q6's efficiency did not fail")
	}
}
