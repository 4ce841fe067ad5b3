package metal

import (
	"fmt"
	"strings"
)

// pipelineSpec is one pipeline the ops can launch: a kernel and its
// function-constant values.
type pipelineSpec struct {
	kernel string
	consts []fconst
	// threads is the largest threadgroup the ops launch it with.
	threads int
}

// simdWidth is the SIMD-group width the kernels are written for (their
// simd_* reductions and simdgroup matrices assume 32 lanes).
const simdWidth = 32

// groupThreads is the largest threadgroup the ops launch kernel with
// (matmul.go, moe.go, attention.go, norm.go, rope.go, eltwise.go).
func groupThreads(kernel string) int {
	switch {
	case strings.HasPrefix(kernel, "mul_mm_"), strings.HasPrefix(kernel, "flash_attn"), kernel == "group_matmul_f32",
		strings.HasPrefix(kernel, "moe_gu_"), strings.HasPrefix(kernel, "moe_down_"):
		return 128
	case strings.HasPrefix(kernel, "get_rows_"), strings.HasPrefix(kernel, "gather_blend_"),
		strings.HasPrefix(kernel, "mul_mv_"), kernel == "moe_topk_f32":
		return 64
	case kernel == "rope_f32", kernel == "moe_grid":
		return 32
	}
	return 256
}

// name is how reports and errors name the pipeline: kernel[fcN=v,...].
func (p pipelineSpec) name() string {
	if len(p.consts) == 0 {
		return p.kernel
	}
	var parts []string
	for _, c := range p.consts {
		parts = append(parts, fmt.Sprintf("fc%d=%d", c.Index, c.Value))
	}
	return p.kernel + "[" + strings.Join(parts, ",") + "]"
}

// pipeKey names the pipeline of kernel specialised with consts.
func pipeKey(kernel string, consts []fconst) string {
	return pipelineSpec{kernel: kernel, consts: consts}.name()
}

// pipelineSpecs lists every pipeline an op of this backend can launch,
// mirroring the ops' kernel choices: by weight type for the matmuls, gathers
// and experts (mul_mm_* in both FC_mm_direct specialisations; moe_gu_* and
// moe_down_*), the flash attention kernels, and the fixed kernels of the
// other ops.
func pipelineSpecs() []pipelineSpec {
	var ps []pipelineSpec
	add := func(k string, cs ...fconst) {
		ps = append(ps, pipelineSpec{kernel: k, consts: cs, threads: groupThreads(k)})
	}
	for _, t := range SupportedTypes() {
		s, _ := kernelSuffix(t)
		add("get_rows_" + s)
		add("mul_mv_" + s)
		add("mul_mm_"+s, fconst{Index: 0, Bool: true, Value: 0})
		add("mul_mm_"+s, fconst{Index: 0, Bool: true, Value: 1})
		add("moe_gu_" + s)
		add("moe_down_" + s)
	}
	for _, s := range []string{"f32", "f16", "bf16"} {
		add("gather_blend_" + s)
	}
	if attnHalf { // the half-operand attention twins, off (attention.go)
		for _, d := range []int{32, 64, 72, 128} {
			add(fmt.Sprintf("flash_attn_mma_half_d%d", d))
		}
	}
	for _, k := range []string{
		"group_matmul_f32",
		"flash_attn_f32", "flash_attn_mma_d32", "flash_attn_mma_d64", "flash_attn_mma_d72", "flash_attn_mma_d128",
		"rope_f32",
		"rms_norm_f32", "layer_norm_f32", "softmax_f32", "row_dots_f32",
		"add_f32", "copy_f32", "add_rows_f32", "im2col_f32", "gelu_f32", "gelu_tanh_f32", "add_bias_f32",
		"transpose_f32", "pair_features_f32", "span_means_f32", "silu_mul_f32",
		"moe_topk_f32", "moe_map", "moe_tiles", "moe_grid", "moe_combine_f32", "moe_combine_bf16",
	} {
		add(k)
	}
	return ps
}

// PipelineReport is one pipeline prepared at open: its name
// (kernel[fcN=v]), its limits, or the error that building it gave.
type PipelineReport struct {
	Name string
	Info PipelineInfo
	Err  error
}

// PrepareError says that pipelines did not build at open (or cannot run
// the threadgroups the ops launch them with). Pipelines holds every
// pipeline's result, so that selftest can print them all.
type PrepareError struct {
	Pipelines []PipelineReport
	Failed    int
	First     error // the first failure, with the compiler's log
}

func (e *PrepareError) Error() string {
	if e.Failed > 1 {
		return fmt.Sprintf("%v (and %d more of %d pipelines failed)", e.First, e.Failed-1, len(e.Pipelines))
	}
	return e.First.Error()
}

func (e *PrepareError) Unwrap() error { return e.First }

// preparePipeline builds pipeline p on the device and checks it runs the
// threadgroups its op launches (checkPipeline).
func (b *Backend) preparePipeline(p pipelineSpec) PipelineReport {
	r := PipelineReport{Name: p.name()}
	if r.Err = b.dev.Prepare(p.kernel, p.consts); r.Err == nil {
		r.Info, r.Err = b.dev.PipelineInfo(p.kernel, p.consts)
	}
	if r.Err == nil {
		r.Err = checkPipeline(r.Info, p.threads)
	}
	return r
}

// prepare builds every pipeline of pipelineSpecs on the device and checks
// that it runs the threadgroups its op launches (maxTotalThreadsPerThreadgroup,
// which a kernel short of registers lowers) with 32-lane SIMD groups, so
// that such a pipeline fails the open rather than a request. Every result
// is kept for Pipelines; a failure is returned as a *PrepareError.
func (b *Backend) prepare() error {
	pe := &PrepareError{}
	for _, p := range pipelineSpecs() {
		r := b.preparePipeline(p)
		if r.Err != nil {
			pe.Failed++
			if pe.First == nil {
				pe.First = fmt.Errorf("metal: preparing pipeline %s: %w", r.Name, r.Err)
			}
		}
		b.pipes = append(b.pipes, r)
	}
	if pe.Failed == 0 {
		b.prepareTensor() // the M5 path (tensor.go): never fails the open
		return nil
	}
	pe.Pipelines = append([]PipelineReport(nil), b.pipes...)
	return pe
}

// checkPipeline checks a pipeline's limits against what its op launches.
func checkPipeline(info PipelineInfo, threads int) error {
	if info.MaxThreads < threads {
		return fmt.Errorf("it allows %d threads per threadgroup, its op launches %d (the kernel needs too many registers on this GPU)",
			info.MaxThreads, threads)
	}
	if info.ExecWidth != simdWidth {
		return fmt.Errorf("its SIMD groups are %d lanes wide, the kernels are written for %d", info.ExecWidth, simdWidth)
	}
	return nil
}

// Pipelines reports every pipeline prepared at open, with its limits
// (maxTotalThreadsPerThreadgroup, threadExecutionWidth, static threadgroup
// memory).
func (b *Backend) Pipelines() []PipelineReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]PipelineReport(nil), b.pipes...)
}
