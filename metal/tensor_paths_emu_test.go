//go:build mslemu

package metal

import (
	"slices"
	"testing"

	"github.com/clefrt/clef/engine/backend/conformance"
)

// TestTensorConformanceEmulated: with the tensor path forced on the
// emulated GPU (CLEF_METAL_TENSOR=1), the conformance suite's MoE,
// attention, matmul and row-chunking cases pass at their tolerances (the
// MoE's q8_0 experts on moe_gu_t_*/moe_down_t_*, q4_K ones on the int8
// moe_gu_t8_*/moe_down_t8_* over quant_q8k_rows, q4_K and q6_K matmuls on
// the int8 mul_mm_t8_*, attention of head size 128 on flash_attn_t_d128,
// TolAttn unchanged), and the tensor
// kernels are the ones dispatched; f32 and bf16 experts and other head
// sizes keep the shader kernels.
func TestTensorConformanceEmulated(t *testing.T) {
	b := tensorEmulated(t)
	for _, f := range []string{tensorFamilyMatMul, tensorFamilyMoE, tensorFamilyMoE8, tensorFamilyAttn} {
		if !b.tensorFamilyOn(f) {
			t.Fatalf("tensor family %s off when forced", f)
		}
	}
	for _, c := range conformance.Cases() {
		if !slices.Contains([]string{"MatMul", "Attention", "MoE", "RowChunker"}, c.Name) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) { c.Run(t, b) })
	}
	st := b.Stats().Kernels
	for _, k := range []string{"moe_gu_t8_q4_K", "moe_down_t8_q4_K", "quant_q8k_rows", "quant_q8k_rows_h", "moe_gu_t_q8_0", "moe_down_t_q8_0",
		"mul_mm_t8_q4_K", "mul_mm_t8_q6_K", "mul_mm_t_q8_0", "flash_attn_t_d128", "attn_limbs_qk", "attn_limbs_v",
		"moe_gu_f32", "moe_gu_bf16", "flash_attn_mma_d72"} {
		if st[k].Dispatches == 0 {
			t.Errorf("%s was not dispatched", k)
		}
	}
	for _, k := range []string{"moe_gu_q4_K", "moe_down_q8_0", "flash_attn_mma_d128", "moe_gu_t_q4_K", "moe_down_t_q4_K", "mul_mm_q4_K", "mul_mm_q6_K"} {
		if st[k].Dispatches != 0 {
			t.Errorf("%s dispatched on the tensor path", k)
		}
	}
}
