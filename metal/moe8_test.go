package metal

import (
	"testing"

	"github.com/clefrt/clef/quant"
)

// TestMoEInt8Choice: on an M5 (fake) the routed experts take the int8
// kernels only when gate-up and down are each q4_K or q6_K (q4_k_m pairs
// q4_K gate-up with q6_K down), each its own format's kernel, and hidden
// and the expert FFN are whole q8_K blocks; a failed int8 pipeline (the activation
// quantizer here) turns the int8 family off and leaves the half tensor
// kernels on; the pipeline list holds every kernel once (quant_q8k_rows
// belongs to two families).
func TestMoEInt8Choice(t *testing.T) {
	yes := true
	m5 := []string{"Apple7", "Apple8", "Apple9", "Apple10", "Metal3", "Metal4"}
	open := func(fail string) *Backend {
		t.Setenv(TensorEnv, "")
		b, err := newBackend(tensorLibFake{&tensorFake{fakeGPU: newFakeGPU(), families: m5, lib: &yes, fail: fail}}, "fake")
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := open("")
	for _, c := range []struct {
		gu, down    quant.Type
		hidden, ffn int
		want        bool
		wantGU      string
		wantDown    string
	}{
		{quant.Q4_K, quant.Q4_K, 2048, 768, true, "moe_gu_t8_q4_K", "moe_down_t8_q4_K"},
		{quant.Q4_K, quant.Q4_K, 256, 256, true, "moe_gu_t8_q4_K", "moe_down_t8_q4_K"},
		{quant.Q4_K, quant.Q6_K, 2048, 768, true, "moe_gu_t8_q4_K", "moe_down_t8_q6_K"}, // q4_k_m
		{quant.Q6_K, quant.Q6_K, 2048, 768, true, "moe_gu_t8_q6_K", "moe_down_t8_q6_K"},
		{quant.Q6_K, quant.Q4_K, 2048, 768, true, "moe_gu_t8_q6_K", "moe_down_t8_q4_K"},
		{quant.Q4_K, quant.Q8_0, 2048, 768, false, "", ""}, // the int8 path takes both
		{quant.Q8_0, quant.Q8_0, 2048, 768, false, "", ""},
		{quant.Q4_K, quant.Q4_K, 2048, 800, false, "", ""}, // h rows not whole q8_K blocks
		{quant.Q4_K, quant.Q4_K, 2080, 768, false, "", ""},
	} {
		gu, down, ok := b.tensorMoE8Kernels(c.gu, c.down, c.hidden, c.ffn)
		if ok != c.want {
			t.Errorf("%v/%v hidden %d ffn %d: int8 kernels %v, want %v", c.gu, c.down, c.hidden, c.ffn, ok, c.want)
		}
		if ok && (gu != c.wantGU || down != c.wantDown) {
			t.Errorf("%v/%v: kernels %s, %s; want %s, %s", c.gu, c.down, gu, down, c.wantGU, c.wantDown)
		}
	}
	seen := map[string]bool{}
	for _, p := range tensorPipelineSpecs() {
		if seen[p.kernel] {
			t.Errorf("tensor pipeline %s listed twice", p.kernel)
		}
		seen[p.kernel] = true
	}
	for _, k := range []string{"moe_gu_t8_q4_K", "moe_down_t8_q4_K", "moe_gu_t8_q6_K", "moe_down_t8_q6_K", q8kKernel} {
		if !seen[k] || !isTensorKernel(k) {
			t.Errorf("%s: in the tensor pipelines %v, a tensor-library kernel %v", k, seen[k], isTensorKernel(k))
		}
	}

	b = open(q8kKernel)
	if _, _, ok := b.tensorMoE8Kernels(quant.Q4_K, quant.Q4_K, 2048, 768); ok {
		t.Error("the int8 kernels were chosen with quant_q8k_rows failed")
	}
	if gu, _, ok := b.tensorMoEKernels(quant.Q4_K); !ok || gu != "moe_gu_t_q4_K" {
		t.Errorf("with the int8 family off, q4_K experts get %q, %v; want the half tensor kernels", gu, ok)
	}
}
