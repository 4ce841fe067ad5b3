package metal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/chips"
	"github.com/clefrt/clef/quant"
)

// SelfTestOptions configure SelfTest.
type SelfTestOptions struct {
	// Timed measures GB/s and TFLOP/s (meaningful on a real GPU only).
	Timed bool
	// Device names the GPU for the peak table ("" if none).
	Device string
	// Trace says the backend runs every dispatch as its own command buffer
	// (Backend.SetTrace, set by the caller): the checks stop at the first
	// GPU fault, which then names its kernel and shapes.
	Trace bool
}

// FaultHint returns what to do after err, when err is a GPU fault (a failed
// command buffer): rerun with --trace (unless traced) and Metal's validation
// layers. It returns "" for any other error.
func FaultHint(err error, traced bool) string {
	var be *BufferError
	if !errors.As(err, &be) {
		return ""
	}
	s := "a command buffer failed on the GPU. To find the kernel and what it did wrong, run again with Metal's validation:\n" +
		"  MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1 METAL_DEVICE_WRAPPER_TYPE=1 clef selftest --trace\n"
	if traced {
		s = "the failing dispatch is named above (--trace: one dispatch per command buffer). For the exact fault (the\n" +
			"out-of-bounds access, its buffer and thread), run again with Metal's validation:\n" +
			"  MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1 METAL_DEVICE_WRAPPER_TYPE=1 clef selftest --trace\n"
	}
	return s + "(MTL_DEBUG_LAYER checks the API calls, MTL_SHADER_VALIDATION every device-memory access of the kernels;\n" +
		"both are slow, and report on stderr)"
}

// PipelineTable prints every pipeline prepared at open with its limits,
// and returns how many failed to build.
func PipelineTable(w io.Writer, ps []PipelineReport) int {
	failed := 0
	fmt.Fprintf(w, "%d pipelines (max threads per threadgroup, SIMD width, static threadgroup memory):\n", len(ps))
	for _, p := range ps {
		if p.Err != nil {
			fmt.Fprintf(w, "FAIL pipeline %-40s %v\n", p.Name, p.Err)
			failed++
			continue
		}
		fmt.Fprintf(w, "     pipeline %-40s max threads %4d  exec width %2d  static tg memory %5d B\n",
			p.Name, p.Info.MaxThreads, p.Info.ExecWidth, p.Info.StaticTGMemory)
	}
	return failed
}

// check is one op run on both backends.
type check struct {
	name string
	tol  float64 // NMSE bound
	run  func(b backend.Backend) (*backend.Tensor, error)
}

// SelfTest runs the backend conformance suite on b (the GPU backend), then
// every op of b and ref (the CPU backend) on the same random inputs at the
// model's sizes, and prints the max abs error and NMSE of each; with Timed
// it then measures the matmul kernels' GB/s and TFLOP/s against the chip's
// peak. It returns the number of failed checks.
func SelfTest(ctx context.Context, w io.Writer, b, ref backend.Backend, opts SelfTestOptions) (int, error) {
	failed := 0
	gb, _ := b.(*Backend)
	if gb != nil {
		failed += PipelineTable(w, gb.Pipelines())
	}
	failed += conformance.Report(w, b)
	rng := rand.New(rand.NewPCG(7, 11))
	randn := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	weight := func(typ quant.Type, rows, cols int) *weights.Tensor {
		v := randn(rows*cols, 1/math.Sqrt(float64(cols)))
		rb, err := quant.RowBytes(typ, cols)
		if err != nil {
			panic(err)
		}
		data := make([]byte, rows*rb)
		for r := 0; r < rows; r++ {
			if err := quant.Quantize(typ, data[r*rb:(r+1)*rb], v[r*cols:(r+1)*cols], nil); err != nil {
				panic(err)
			}
		}
		return &weights.Tensor{Name: "selftest." + typ.String(), Type: typ, Shape: []int{rows, cols}, Data: data}
	}
	var checks []check

	// Mat-vec (4 tokens: bandwidth-bound) and mat-mat (prefill tiles) per format.
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q6_K, quant.Q5_K, quant.Q4_K, quant.Q3_K, quant.Q2_K, quant.Q5_1, quant.Q5_0, quant.Q4_1, quant.Q4_0} {
		for _, tokens := range []int{4, 67} {
			n, k := 512, 1024
			wt := weight(typ, n, k)
			x := randn(tokens*k, 1)
			kind := "mul_mv"
			if tokens > mvMaxTokens {
				kind = "mul_mm"
			}
			tol := 5e-4
			if typ == quant.F32 {
				tol = 1e-9
			} else if typ == quant.F16 || typ == quant.BF16 {
				tol = 1e-6
			}
			checks = append(checks, check{
				name: fmt.Sprintf("%s_%v %dx%dx%d", kind, typ, tokens, n, k),
				tol:  tol,
				run: func(be backend.Backend) (*backend.Tensor, error) {
					wb, err := be.Weight(wt)
					if err != nil {
						return nil, err
					}
					xb, err := be.Upload(x, tokens, k)
					if err != nil {
						return nil, err
					}
					return be.MatMul(xb, wb)
				}})
		}
	}
	L, hidden := 67, 256
	xs := randn(L*hidden, 1)
	normW := randn(hidden, 0.1)
	for i := range normW {
		normW[i]++
	}
	normT := &weights.Tensor{Name: "selftest.norm", Type: quant.F32, Shape: []int{hidden}, Data: f32Bytes(normW)}
	checks = append(checks, check{name: fmt.Sprintf("rms_norm %dx%d", L, hidden), tol: 1e-8,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			x, err := be.Upload(xs, L, hidden)
			if err != nil {
				return nil, err
			}
			nw, err := be.Weight(normT)
			if err != nil {
				return nil, err
			}
			return be.RMSNorm(x, nw, 1e-6)
		}})
	emb := weight(quant.Q4_K, 1000, hidden)
	ids := make([]int, L)
	for i := range ids {
		ids[i] = rng.IntN(1000)
	}
	checks = append(checks, check{name: fmt.Sprintf("get_rows_q4_K %d rows", L), tol: 1e-10,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			t, err := be.Weight(emb)
			if err != nil {
				return nil, err
			}
			return be.Embed(t, ids)
		}})
	const nh, nkv, hd = 32, 4, 128
	q, kk, vv := randn(L*nh*hd, 1), randn(L*nkv*hd, 1), randn(L*nkv*hd, 1)
	pos := make([][3]int, L)
	for i := range pos {
		pos[i] = [3]int{i, i + i%7, i + i%5}
	}
	rope, err := backend.MRoPE(hd, 1e6, [3]int{24, 20, 20}, true)
	if err != nil {
		return 0, err
	}
	checks = append(checks, check{name: fmt.Sprintf("rope_f32 M-RoPE %dx%dx%d", L, nh, hd), tol: 1e-7,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			x, err := be.Upload(q, L, nh*hd)
			if err != nil {
				return nil, err
			}
			return be.RoPE(x, pos, rope)
		}})
	checks = append(checks, check{name: fmt.Sprintf("flash_attn_mma_d128 causal L=%d %d/%d heads", L, nh, nkv),
		tol: 1e-8,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			qt, err := be.Upload(q, L, nh*hd)
			if err != nil {
				return nil, err
			}
			kt, err := be.Upload(kk, L, nkv*hd)
			if err != nil {
				return nil, err
			}
			vt, err := be.Upload(vv, L, nkv*hd)
			if err != nil {
				return nil, err
			}
			return be.Attention(qt, kt, vt, backend.AttentionOptions{Heads: nh, KVHeads: nkv, Scale: float32(1 / math.Sqrt(hd)), Causal: true})
		}})
	const vh, vd = 16, 72 // the vision encoder's head size: the scalar kernel
	checks = append(checks, check{name: fmt.Sprintf("flash_attn_f32 causal L=%d %d heads d=%d", L, vh, vd), tol: 1e-8,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			qt, err := be.Upload(q[:L*vh*vd], L, vh*vd)
			if err != nil {
				return nil, err
			}
			kt, err := be.Upload(q[L*vh*vd:2*L*vh*vd], L, vh*vd)
			if err != nil {
				return nil, err
			}
			return be.Attention(qt, kt, qt, backend.AttentionOptions{Heads: vh, KVHeads: vh, Scale: float32(1 / math.Sqrt(vd)), Causal: true})
		}})
	ys := randn(3*hidden, 1)
	checks = append(checks, check{name: fmt.Sprintf("add_f32 + copy_f32/add_rows_f32 %dx%d", L, hidden), tol: 1e-12,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			x, err := be.Upload(xs, L, hidden)
			if err != nil {
				return nil, err
			}
			s, err := be.Add(x, x)
			if err != nil {
				return nil, err
			}
			y, err := be.Upload(ys, 3, hidden)
			if err != nil {
				return nil, err
			}
			return be.AddRows(s, []int{L - 1, 0, L / 2}, y)
		}})
	// The vision tower's position embeddings (a 48x48 grid of 1152, bf16)
	// interpolated bilinearly to L patches, and the audio tower's second
	// convolution (3x3, stride 2, 480 channels) unfolded.
	const grid, vdim = 48, 1152
	posT := weight(quant.BF16, grid*grid, vdim)
	pids := make([]int, 4*L)
	pws := make([]float32, 4*L)
	for i := 0; i < L; i++ {
		y, x := rng.IntN(grid-1), rng.IntN(grid-1)
		dy, dx := float32(rng.Float64()), float32(rng.Float64())
		copy(pids[4*i:], []int{y*grid + x, y*grid + x + 1, (y+1)*grid + x, (y+1)*grid + x + 1})
		copy(pws[4*i:], []float32{(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx})
	}
	checks = append(checks, check{name: fmt.Sprintf("gather_blend_bf16 %d rows of %d, k=4", L, vdim), tol: 1e-10,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			t, err := be.Weight(posT)
			if err != nil {
				return nil, err
			}
			return be.GatherBlend(t, pids, pws, 4)
		}})
	conv := backend.Conv2D{N: 2, H: 16, W: 25, C: 480, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1}
	cx := randn(conv.N*conv.H*conv.W*conv.C, 1)
	checks = append(checks, check{name: fmt.Sprintf("im2col_f32 %dx%dx%dx%d 3x3 stride 2", conv.N, conv.H, conv.W, conv.C), tol: 0,
		run: func(be backend.Backend) (*backend.Tensor, error) {
			x, err := be.Upload(cx, conv.N*conv.H*conv.W, conv.C)
			if err != nil {
				return nil, err
			}
			return be.Im2Col(x, conv)
		}})
	const E, topk = 16, 4
	ffn := 256
	logits := make([]float32, L*E)
	for r := 0; r < L; r++ {
		for e, p := range rng.Perm(E) {
			logits[r*E+e] = float32(p)*0.05 - 0.4
		}
	}
	// Each projection's experts stacked [E, out, in] both ways: back to back
	// in one array, as a GGUF *_exps tensor holds them (the one-launch
	// gathered path), and one slice per expert, as the bf16 release stores
	// them (one launch per expert).
	experts := make([][3]*weights.Tensor, E)
	for e := range experts {
		experts[e] = [3]*weights.Tensor{weight(quant.Q4_K, ffn, hidden), weight(quant.Q4_K, ffn, hidden), weight(quant.Q6_K, hidden, ffn)}
	}
	var parted, contiguous [3]*weights.Tensor
	for p := range parted {
		e0 := experts[0][p]
		parts := make([][]byte, E)
		var all []byte
		for e := range parts {
			parts[e] = experts[e][p].Data
			all = append(all, parts[e]...)
		}
		shape := []int{E, e0.Shape[0], e0.Shape[1]}
		parted[p] = &weights.Tensor{Name: "selftest.experts", Type: e0.Type, Shape: shape, Parts: parts}
		contiguous[p] = &weights.Tensor{Name: "selftest.experts", Type: e0.Type, Shape: shape, Data: all}
	}
	for _, set := range []struct {
		what    string
		experts [3]*weights.Tensor
	}{{"parted experts", parted}, {"contiguous experts", contiguous}} {
		experts := set.experts
		checks = append(checks, check{name: fmt.Sprintf("moe q4_K/q6_K %s L=%d E=%d k=%d", set.what, L, E, topk),
			// The CPU oracle quantizes activations to 8 bits for block formats
			// (5e-4 NMSE per matmul in the conformance suite); the MoE chains
			// three such matmuls through SiLU·up, so its bound is 4x that.
			tol: 2e-3,
			run: func(be backend.Backend) (*backend.Tensor, error) {
				lt, err := be.Upload(logits, L, E)
				if err != nil {
					return nil, err
				}
				idt, wt, err := be.Route(lt, topk, true)
				if err != nil {
					return nil, err
				}
				x, err := be.Upload(xs, L, hidden)
				if err != nil {
					return nil, err
				}
				var ts [3]*backend.Tensor
				for i := range ts {
					if ts[i], err = be.Weight(experts[i]); err != nil {
						return nil, err
					}
				}
				return be.MoE(x, idt, wt, backend.Experts{Gate: ts[0], Up: ts[1], Down: ts[2]})
			}})
	}

	hinted := false
	for _, c := range checks {
		want, err := runRead(ctx, ref, c.run)
		if err != nil {
			fmt.Fprintf(w, "SKIP %-62s reference: %v\n", c.name, err)
			continue
		}
		got, err := runRead(ctx, b, c.run)
		if err != nil {
			fmt.Fprintf(w, "FAIL %-62s %v\n", c.name, err)
			failed++
			if hint := FaultHint(err, opts.Trace); hint != "" {
				if opts.Trace {
					// The first fault is named; what runs after it on a
					// faulted queue says nothing more.
					fmt.Fprintf(w, "first GPU fault: %v\n%s\n", err, hint)
					return failed, nil
				}
				if !hinted {
					fmt.Fprintln(w, hint)
					hinted = true
				}
			}
			continue
		}
		maxErr, nmse := compare(got, want)
		status := "ok  "
		if !(nmse <= c.tol) {
			status = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %-62s max|err| %.2e  nmse %.2e (<= %.0e)\n", status, c.name, maxErr, nmse, c.tol)
	}
	if opts.Timed {
		if err := throughput(ctx, w, b, opts.Device, 16384, 8192); err != nil {
			fmt.Fprintf(w, "FAIL throughput: %v\n", err)
			failed++
		}
		if gb != nil {
			if err := kernelTimes(ctx, w, gb, opts, checks); err != nil {
				fmt.Fprintf(w, "FAIL kernel timing: %v\n", err)
				failed++
			}
		}
	}
	return failed, nil
}

// kernelTimes runs the checks and the throughput shapes once more with
// every dispatch its own command buffer, so that the backend's Stats hold
// each kernel's measured GPU time, and prints the per-kernel table.
func kernelTimes(ctx context.Context, w io.Writer, b *Backend, opts SelfTestOptions, checks []check) error {
	b.SetTrace(true)
	defer b.SetTrace(opts.Trace)
	before := b.Stats()
	for _, c := range checks {
		if _, err := runRead(ctx, b, c.run); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	if err := throughput(ctx, io.Discard, b, opts.Device, 16384, 8192); err != nil {
		return err
	}
	kernelTable(w, before, b.Stats(), opts.Device)
	return nil
}

// kernelTable prints, per kernel, the dispatches and GPU time between two
// Stats, and the achieved GB/s and TFLOP/s (bytes and FLOPs from the cost
// model) against the chip's peak, slowest kernel first.
func kernelTable(w io.Writer, before, after Stats, device string) {
	type row struct {
		name string
		k    KernelStats
	}
	var rows []row
	for name, k := range after.Kernels {
		p := before.Kernels[name]
		d := KernelStats{Dispatches: k.Dispatches - p.Dispatches, Bytes: k.Bytes - p.Bytes, FLOPs: k.FLOPs - p.FLOPs,
			EstSeconds: k.EstSeconds - p.EstSeconds, GPUSeconds: k.GPUSeconds - p.GPUSeconds}
		if d.Dispatches > 0 {
			rows = append(rows, row{name, d})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].k.GPUSeconds != rows[j].k.GPUSeconds {
			return rows[i].k.GPUSeconds > rows[j].k.GPUSeconds
		}
		return rows[i].name < rows[j].name
	})
	peak, havePeak := chips.Of(device)
	pct := func(v, p float64) string {
		if !havePeak {
			return ""
		}
		return fmt.Sprintf(" (%3.0f%%)", 100*v/p)
	}
	fmt.Fprintf(w, "per kernel, GPU time of one dispatch per command buffer:\n%-24s %6s %10s %10s %18s %18s\n",
		"kernel", "calls", "GPU ms", "us/call", "GB/s", "TFLOP/s")
	for _, r := range rows {
		k := r.k
		if k.GPUSeconds <= 0 {
			fmt.Fprintf(w, "%-24s %6d %10s %10s %18s %18s\n", r.name, k.Dispatches, "-", "-", "-", "-")
			continue
		}
		gbs, tfs := k.Bytes/k.GPUSeconds/1e9, k.FLOPs/k.GPUSeconds/1e12
		fmt.Fprintf(w, "%-24s %6d %10.3f %10.1f %18s %18s\n", r.name, k.Dispatches, 1e3*k.GPUSeconds, 1e6*k.GPUSeconds/float64(k.Dispatches),
			fmt.Sprintf("%7.1f%s", gbs, pct(gbs, peak.GBs)), fmt.Sprintf("%7.3f%s", tfs, pct(tfs, peak.TFLOPs)))
	}
	if havePeak {
		fmt.Fprintf(w, "(%% of the %s's peak: %.0f GB/s, %.1f TFLOP/s; bytes and FLOPs are the backend's cost model's, and each\n"+
			"GPU time includes a command buffer's start, a few microseconds)\n", peak.Name, peak.GBs, peak.TFLOPs)
	} else {
		fmt.Fprintf(w, "(no peak figures for %q; bytes and FLOPs are the backend's cost model's)\n", device)
	}
}

// throughput times the matmul kernels on weights too large for the caches
// (random bytes: the values do not matter for timing) and prints the
// achieved GB/s (1 token: mat-vec, bandwidth-bound) and TFLOP/s (512
// tokens: simdgroup-matrix tiles, compute-bound) next to the chip's peak,
// best of 3 runs, each one command buffer.
func throughput(ctx context.Context, w io.Writer, b backend.Backend, device string, n, k int) error {
	peak, havePeak := chips.Of(device)
	if havePeak {
		derived := ""
		if peak.Derived {
			derived = " (derived from clocks, ±10%)"
		}
		fmt.Fprintf(w, "peak of %s: %.0f GB/s, %.1f TFLOP/s FP32/FP16%s\n", peak.Name, peak.GBs, peak.TFLOPs, derived)
	} else {
		fmt.Fprintf(w, "no peak figures for %q\n", device)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for _, typ := range []quant.Type{quant.F16, quant.BF16, quant.Q8_0, quant.Q6_K, quant.Q5_K, quant.Q4_K, quant.Q3_K, quant.Q2_K, quant.Q4_0} {
		rb, err := quant.RowBytes(typ, k)
		if err != nil {
			return err
		}
		data := make([]byte, n*rb)
		for i := 0; i < len(data); i += 8 {
			v := rng.Uint64() & 0x3bff3bff3bff3bff // keep f16 fields finite and moderate
			for j := 0; j < 8 && i+j < len(data); j++ {
				data[i+j] = byte(v >> (8 * j))
			}
		}
		wt, err := b.Weight(&weights.Tensor{Name: "throughput", Type: typ, Shape: []int{n, k}, Data: data})
		if err != nil {
			return err
		}
		for _, tokens := range []int{1, 512} {
			x, err := b.Upload(make([]float32, tokens*k), tokens, k)
			if err != nil {
				return err
			}
			best := math.Inf(1)
			for rep := 0; rep < 3; rep++ {
				start := time.Now()
				y, err := b.MatMul(x, wt)
				if err != nil {
					return err
				}
				if _, err := b.Read(ctx, y); err != nil {
					return err
				}
				best = math.Min(best, time.Since(start).Seconds())
				b.Free(y)
			}
			b.Free(x)
			bytes := float64(len(data) + 4*tokens*k + 4*tokens*n)
			flops := 2 * float64(tokens) * float64(n) * float64(k)
			kind := "mul_mv"
			if tokens > mvMaxTokens {
				kind = "mul_mm"
			}
			line := fmt.Sprintf("%-6s %-5v %4d x %d x %d  %8.3f ms  %7.1f GB/s", kind, typ, tokens, n, k, 1e3*best, bytes/best/1e9)
			if havePeak {
				line += fmt.Sprintf(" (%3.0f%% of peak)", 100*bytes/best/1e9/peak.GBs)
			}
			line += fmt.Sprintf("  %6.2f TFLOP/s", flops/best/1e12)
			if havePeak {
				line += fmt.Sprintf(" (%3.0f%% of peak)", 100*flops/best/1e12/peak.TFLOPs)
			}
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w, "times are wall-clock per call: encode, one command buffer, wait, read back")
	return nil
}

func runRead(ctx context.Context, be backend.Backend, run func(backend.Backend) (*backend.Tensor, error)) (out []float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	t, err := run(be)
	if err != nil {
		return nil, err
	}
	defer be.Free(t)
	return be.Read(ctx, t)
}

// compare returns the max abs error and the NMSE of got against want.
func compare(got, want []float32) (float64, float64) {
	if len(got) != len(want) {
		return math.Inf(1), math.Inf(1)
	}
	var maxErr, num, den float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		if math.IsNaN(d) {
			return math.NaN(), math.Inf(1)
		}
		maxErr = math.Max(maxErr, math.Abs(d))
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return maxErr, num
	}
	return maxErr, num / den
}
