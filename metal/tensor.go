package metal

// The M5 path: the prefill matmuls, the MoE's gathered matmuls and
// attention on Metal 4 tensor operations (matmul2d on the neural
// accelerators of the M5's GPU cores: shaders/tensor.metal mul_mm_t_*,
// tensor_q8.metal mul_mm_t8_* on q8_K activations, tensor_moe.metal moe_gu_t_* and moe_down_t_*, tensor_attn.metal
// flash_attn_t_d128), chosen at open by GPU family, with the
// simdgroup-matrix kernels (matmul.metal, moe.metal, attention.metal) as the
// fallback everywhere else.
//
// The choice, made once per open (tensorChoice):
//   - CLEF_METAL_TENSOR=1 forces the path on whatever the GPU family (on a
//     Mac the tensor library must still compile; the emulated GPU, which
//     compiles every kernel, selects it this way in tests), =0 off;
//   - otherwise it is on only when the GPU is of family Apple10 (M5, A19) and
//     the device compiled the tensor library (shaders.TensorLibrary, MSL 4.0:
//     a gpu that did says so through tensorLibraryGPU). This is ggml's rule
//     (Metal4 family, M5 and later, plus a compile test) and MLX's (NAX on
//     architecture generation 17+, macOS 26.2), with the family as the test
//     of the hardware: on M1-M4 the tensor operations compile but run on the
//     ordinary ALUs, and ggml measured no gain there.
//
// The tensor pipelines are prepared at open after the others
// (prepareTensor); one that fails to build turns the path off instead of
// failing the open, and stays in Pipelines() with its error, so selftest
// shows it. Each of the three families (the matmuls, the MoE, attention) is
// taken when every pipeline of that family was prepared.

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// TensorEnv is the environment variable that overrides the choice of the
// tensor path: "1" on, "0" off; anything else leaves it to the device.
const TensorEnv = "CLEF_METAL_TENSOR"

// tensorLibraryGPU is implemented by a gpu that compiles the tensor library
// (shaders.TensorLibrary) beside the main one: TensorLibrary reports
// whether it compiled (the compiler's log when not).
type tensorLibraryGPU interface {
	TensorLibrary() (bool, string)
}

// tensorTypes are the weight types mul_mm_t_* is written for: those whose
// values fit half once dequantized (f32 weights and activations keep the
// f32 kernels, whose tolerance is float32 arithmetic; bf16 ranges beyond
// half), but for those of the int8 path (tensorInt8Types).
var tensorTypes = []quant.Type{quant.F16, quant.Q8_0, quant.Q5_K, quant.MLXAffine4, quant.MLXAffine8}

// tensorInt8Types are the weight types of the int8 tensor path
// (shaders/tensor_q8.metal): x is quantized to q8_K rows (q8kKernel,
// byte-identical with the CPU reference's activations) and mul_mm_t8_*
// multiplies the weights' integer codes with them in int8 x int8 -> int32
// matmul2d, giving quant.VecDot's value of every output (the conformance
// suite's TolBlock, as the CPU backend). q6_K is there for clef quantize's
// q4_k_m, which stores attn_v in q6_K in half the layers.
var tensorInt8Types = []quant.Type{quant.Q4_K, quant.Q6_K}

// Tiles of mul_mm_t_* and mul_mm_t8_*: weight rows and tokens per
// threadgroup.
const (
	tensorTileRows       = 64
	tensorTileTokens     = 128
	tensorInt8TileTokens = 64
)

// tensorChoice decides whether this open takes the tensor path, and why.
func tensorChoice(info DeviceInfo, dev gpu) (bool, string) {
	switch os.Getenv(TensorEnv) {
	case "1":
		// Forced, on any GPU family; a device with a separate tensor
		// library (a Mac) must still compile it. The emulated GPU compiles
		// every kernel into its one library.
		if t, ok := dev.(tensorLibraryGPU); ok {
			if ok, why := t.TensorLibrary(); !ok {
				return false, TensorEnv + "=1, but the tensor library did not compile: " + why
			}
		}
		return true, TensorEnv + "=1"
	case "0":
		return false, TensorEnv + "=0"
	}
	if !slices.Contains(info.Families, "Apple10") {
		return false, "the GPU is not of family Apple10 (M5): no neural accelerators"
	}
	t, ok := dev.(tensorLibraryGPU)
	if !ok {
		return false, "this device does not compile the tensor library"
	}
	if ok, why := t.TensorLibrary(); !ok {
		return false, "the tensor library did not compile: " + why
	}
	return true, "GPU family Apple10 with Metal 4 tensor operations"
}

// tensorMoETypes are the expert formats moe_gu_t_* and moe_down_t_* are
// written for: those whose shader MoE kernels stage half tiles and pass h in
// half (moeHalf: every format but f32 and bf16, which keep float tiles).
var tensorMoETypes = []quant.Type{quant.F16, quant.Q8_0, quant.Q5_1, quant.Q5_0, quant.Q4_1, quant.Q4_0,
	quant.Q6_K, quant.Q5_K, quant.Q4_K, quant.Q3_K, quant.Q2_K, quant.MLXAffine4, quant.MLXAffine8}

// tensorMoE8Types are the expert formats with int8 tensor kernels
// (tensor_moe.metal moe_gu_t8_*, moe_down_t8_*: weight codes times the q8_K
// codes of the activations, which quant_q8k_rows writes); on the tensor path
// they take these instead of moe_gu_t_*/moe_down_t_* (tensorMoE8Kernels).
// q6_K is there for clef quantize's q4_k_m, whose ffn_down_exps are q6_K in
// half the layers (with q4_K gate and up: the pair mixes formats).
var tensorMoE8Types = []quant.Type{quant.Q4_K, quant.Q6_K}

// q8kKernel is the activation quantizer of the int8 kernels
// (tensor_q8.metal): f32 rows into quant's q8_K blocks.
const q8kKernel = "quant_q8k_rows"

// Attention on the tensor path: flash_attn_t_d128 takes head size 128 (the
// thinker's), 64 queries per threadgroup; the other head sizes keep the
// shader kernels.
const (
	tensorAttnDim     = 128
	tensorAttnQueries = 64
)

// The families of tensor kernels, each taken or left as a whole
// (tensorKernels lists them).
const (
	tensorFamilyMatMul = "matmul"    // mul_mm_t_*, mul_mm_t8_* and quant_q8k_rows
	tensorFamilyMoE    = "moe"       // moe_gu_t_* and moe_down_t_*
	tensorFamilyMoE8   = "moe8"      // moe_gu_t8_*, moe_down_t8_* and quant_q8k_rows
	tensorFamilyAttn   = "attention" // flash_attn_t_d128 and its limbs (attn_limbs_*)
)

// tensorKernels lists the kernels of the tensor path by family.
func tensorKernels() map[string][]string {
	fam := map[string][]string{}
	for _, t := range tensorTypes {
		s, _ := kernelSuffix(t)
		fam[tensorFamilyMatMul] = append(fam[tensorFamilyMatMul], "mul_mm_t_"+s)
	}
	for _, t := range tensorInt8Types {
		s, _ := kernelSuffix(t)
		fam[tensorFamilyMatMul] = append(fam[tensorFamilyMatMul], "mul_mm_t8_"+s)
	}
	fam[tensorFamilyMatMul] = append(fam[tensorFamilyMatMul], q8kKernel)
	for _, t := range tensorMoETypes {
		s, _ := kernelSuffix(t)
		fam[tensorFamilyMoE] = append(fam[tensorFamilyMoE], "moe_gu_t_"+s, "moe_down_t_"+s)
	}
	for _, t := range tensorMoE8Types {
		s, _ := kernelSuffix(t)
		fam[tensorFamilyMoE8] = append(fam[tensorFamilyMoE8], "moe_gu_t8_"+s, "moe_down_t8_"+s)
	}
	fam[tensorFamilyMoE8] = append(fam[tensorFamilyMoE8], q8kKernel, q8kHalfKernel)
	fam[tensorFamilyAttn] = []string{fmt.Sprintf("flash_attn_t_d%d", tensorAttnDim), attnLimbsQK, attnLimbsV}
	return fam
}

// isTensorKernel reports whether kernel belongs to the tensor library
// (shaders.TensorLibrary).
func isTensorKernel(kernel string) bool {
	for _, p := range []string{"mul_mm_t_", "mul_mm_t8_", "moe_gu_t_", "moe_down_t_", "moe_gu_t8_", "moe_down_t8_", q8kKernel, "flash_attn_t_", "attn_limbs_"} {
		if strings.HasPrefix(kernel, p) {
			return true
		}
	}
	return false
}

// tensorPipelineSpecs lists the pipelines of the tensor path: every family,
// in a fixed order, 128 threads each, a kernel of two families once.
func tensorPipelineSpecs() []pipelineSpec {
	var ps []pipelineSpec
	fam := tensorKernels()
	seen := map[string]bool{}
	for _, f := range []string{tensorFamilyMatMul, tensorFamilyMoE, tensorFamilyMoE8, tensorFamilyAttn} {
		for _, k := range fam[f] {
			if !seen[k] {
				seen[k] = true
				ps = append(ps, pipelineSpec{kernel: k, threads: 128})
			}
		}
	}
	return ps
}

// prepareTensor prepares the tensor pipelines when the path is chosen. A
// pipeline that fails is reported in b.pipes (selftest prints it) and the
// path stays off; the open goes on with the fallback kernels.
func (b *Backend) prepareTensor() {
	on, _ := tensorChoice(b.info, b.dev)
	if !on {
		return
	}
	ok := map[string]bool{}
	for _, p := range tensorPipelineSpecs() {
		r := b.preparePipeline(p)
		if r.Err != nil {
			r.Err = fmt.Errorf("%w (the prefill matmuls keep the simdgroup-matrix kernels)", r.Err)
		}
		ok[p.kernel] = r.Err == nil
		b.pipes = append(b.pipes, r)
	}
	// Each family is taken when every one of its pipelines was prepared:
	// decided once here, read by every matmul, MoE and attention call.
	b.tensorFams = map[string]bool{}
	for f, ks := range tensorKernels() {
		on := len(ks) > 0
		for _, k := range ks {
			on = on && ok[k]
		}
		b.tensorFams[f] = on
	}
}

// TensorPath reports whether this open runs the prefill matmuls on the
// tensor path (mul_mm_t_*), and why or why not.
func (b *Backend) TensorPath() (bool, string) {
	on, why := tensorChoice(b.info, b.dev)
	if !on {
		return false, why
	}
	if !b.tensorOn() {
		return false, "a tensor pipeline failed to build (see Pipelines)"
	}
	return true, why
}

// tensorOn reports whether every pipeline of the matmul family (mul_mm_t_*,
// mul_mm_t8_*, quant_q8k_rows) was prepared at open (the prefill matmuls'
// tensor path).
func (b *Backend) tensorOn() bool { return b.tensorFamilyOn(tensorFamilyMatMul) }

// tensorFamilyOn reports whether every pipeline of the tensor family was
// prepared at open without error (prepareTensor).
func (b *Backend) tensorFamilyOn(family string) bool { return b.tensorFams[family] }

// tensorMoEKernels returns the tensor kernels (gate-up, down) for experts of
// type t when this open takes the MoE's tensor path and t has them.
func (b *Backend) tensorMoEKernels(t quant.Type) (gu, down string, ok bool) {
	if !slices.Contains(tensorMoETypes, t) || !b.tensorFamilyOn(tensorFamilyMoE) {
		return "", "", false
	}
	s, err := kernelSuffix(t)
	if err != nil {
		return "", "", false
	}
	return "moe_gu_t_" + s, "moe_down_t_" + s, true
}

// tensorMoE8Kernels returns the int8 tensor kernels (gate-up, down) for
// experts whose gate and up are of type gu and down of type down, on rows
// of hidden inputs and ffn hidden units, when this open takes their tensor
// family: both types int8 ones, not necessarily the same (h passes between
// the two as q8_K rows, whatever the formats, where the half kernels pass
// it in half, so the pair is taken together) and hidden and ffn whole q8_K
// blocks (256).
func (b *Backend) tensorMoE8Kernels(gu, down quant.Type, hidden, ffn int) (string, string, bool) {
	if !slices.Contains(tensorMoE8Types, gu) || !slices.Contains(tensorMoE8Types, down) || hidden%256 != 0 || ffn%256 != 0 ||
		!b.tensorFamilyOn(tensorFamilyMoE8) {
		return "", "", false
	}
	sg, err := kernelSuffix(gu)
	if err != nil {
		return "", "", false
	}
	sd, err := kernelSuffix(down)
	if err != nil {
		return "", "", false
	}
	return "moe_gu_t8_" + sg, "moe_down_t8_" + sd, true
}

// tensorAttnKernel returns the tensor attention kernel for head size d when
// this open takes attention's tensor path and d has one.
func (b *Backend) tensorAttnKernel(d int) (string, bool) {
	if d != tensorAttnDim || !b.tensorFamilyOn(tensorFamilyAttn) {
		return "", false
	}
	return fmt.Sprintf("flash_attn_t_d%d", d), true
}

// tensorKernel returns the tensor kernel for weights of type t, if any:
// mul_mm_t8_* for the int8 path's types, mul_mm_t_* for the others.
func tensorKernel(t quant.Type) (string, bool) {
	prefix := "mul_mm_t_"
	switch {
	case slices.Contains(tensorInt8Types, t):
		prefix = "mul_mm_t8_"
	case !slices.Contains(tensorTypes, t):
		return "", false
	}
	s, err := kernelSuffix(t)
	if err != nil {
		return "", false
	}
	return prefix + s, true
}

// tensorMatMul computes y = x whᵀ on the tensor path when this open takes it,
// the weights have a tensor kernel and x has more than mvMaxTokens rows
// (fewer take the mat-vec kernels, bandwidth-bound either way): the int8
// path's types through tensorMatMulInt8 (matmul.go), the others on
// mul_mm_t_*. ok false: nothing was launched and the caller takes the
// simdgroup-matrix kernels.
func (b *Backend) tensorMatMul(xh, wh, y *tensor) (ok bool, err error) {
	M, N, K := wh.rows, xh.rows, wh.cols
	kernel, has := tensorKernel(wh.typ)
	if !has || N <= mvMaxTokens || M == 0 || !b.tensorOn() {
		return false, nil
	}
	if slices.Contains(tensorInt8Types, wh.typ) {
		if K%256 != 0 { // a whole number of q8_K blocks (K-format rows always are)
			return false, nil
		}
		return true, b.tensorMatMulInt8(kernel, xh, wh, y)
	}
	sBuf, sOff, bBuf, bOff := wh.sBuf, wh.sOff, wh.bBuf, wh.bOff
	if sBuf == nil { // ggml formats: bind W again
		sBuf, sOff, bBuf, bOff = wh.buf, wh.off, wh.buf, wh.off
	}
	step := b.tensorStep(M, N, K, wh)
	for n0 := 0; n0 < N; n0 += step {
		n := min(step, N-n0)
		a := shaders.KargsMatmul{M: int32(M), N: int32(n), K: int32(K), XStride: int32(xh.cols), YStride: int32(y.cols),
			GroupSize: int32(wh.groupSize), RowBytes: uint64(wh.rowBytes), SRowBytes: uint64(wh.sRowBytes), ScaleBF16: b2i(wh.scaleBF16)}
		bufs := []arg{in(1, wh), {Index: 2, Buf: sBuf, Off: sOff}, {Index: 3, Buf: bBuf, Off: bOff},
			{Index: 4, Buf: xh.buf, Off: xh.off + 4*n0*xh.cols}, {Index: 5, Buf: y.buf, Off: y.off + 4*n0*y.cols, Out: true}}
		err := b.launch(&dispatch{Kernel: kernel, Grid: [3]int{groups(n, tensorTileTokens), groups(M, tensorTileRows), 1},
			Group: [3]int{128, 1, 1}, Args: shaders.Bytes(&a), Bufs: bufs}, matmulCost(M, n, K, wh.rowBytes, wh.sRowBytes))
		if err != nil {
			return true, err
		}
	}
	return true, nil
}
