package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu/kernels"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/chips"
	"github.com/clefrt/clef/quant"
)

// KernelReport is the roofline part of report.json.
type KernelReport struct {
	Peaks   []Peaks        `json:"peaks"`
	Results []KernelResult `json:"results"`
}

// Peaks are a backend's limits: measured once on the CPU (copy bandwidth
// and FMA rate, on one thread and on all of them), or from the chip table
// for Metal.
type Peaks struct {
	Backend string `json:"backend"`
	Source  string `json:"source"` // "measured" or "chip table: <chip>"
	Threads int    `json:"threads"`
	// BytesPerSecond is memory bandwidth (a copy counts its reads and its
	// writes); FLOPsPerSecond the float32 FMA rate (an FMA is 2 FLOPs).
	BytesPerSecond   float64 `json:"bytes_per_second"`
	FLOPsPerSecond   float64 `json:"flops_per_second"`
	BytesPerSecond1T float64 `json:"bytes_per_second_1t,omitempty"`
	FLOPsPerSecond1T float64 `json:"flops_per_second_1t,omitempty"`
	// Int8OpsPerSecond is the rate of the int8 dot pipeline the quantized
	// kernels use (u8·s8 multiply-adds, 2 ops each); CPU only.
	Int8OpsPerSecond   float64 `json:"int8_ops_per_second,omitempty"`
	Int8OpsPerSecond1T float64 `json:"int8_ops_per_second_1t,omitempty"`
}

// KernelResult is one kernel at one shape.
type KernelResult struct {
	Name       string  `json:"name"`
	Backend    string  `json:"backend"`
	Type       string  `json:"type"`
	Threads    int     `json:"threads"`
	M          int     `json:"m"`
	N          int     `json:"n"`
	K          int     `json:"k"`
	Iterations int     `json:"iterations"`
	Seconds    float64 `json:"seconds"` // all iterations
	// Bytes and FLOPs are per call: weights, activations and outputs read
	// or written once; 2 FLOPs per multiply-add.
	Bytes          float64 `json:"bytes"`
	FLOPs          float64 `json:"flops"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	FLOPsPerSecond float64 `json:"flops_per_second"`
	// BandwidthRatio and ComputeRatio are the achieved rates over the
	// peaks (one-thread peaks for one-thread kernels); Bound says which
	// limit the kernel's arithmetic intensity puts it under.
	BandwidthRatio float64 `json:"bandwidth_ratio"`
	ComputeRatio   float64 `json:"compute_ratio"`
	Bound          string  `json:"bound"`
	// ComputePeak names the compute ceiling used: "f32_fma", or "int8_dot"
	// for kernels whose dot products run on int8 activations.
	ComputePeak string `json:"compute_peak"`
}

// KernelOptions control RunKernels.
type KernelOptions struct {
	// MinTime is how long each measurement runs at least (default 200 ms).
	MinTime time.Duration
	// Threads for the backend ops (0: all cores).
	Threads int
	// Types are the weight types of the GEMMs (default: all the CPU
	// backend runs).
	Types []quant.Type
	// Backends to measure (default: every registered one that opens).
	Backends []string
	Log      io.Writer
}

// DefaultKernelTypes are the GEMM weight types measured by default.
var DefaultKernelTypes = []quant.Type{quant.F32, quant.BF16, quant.Q8_0, quant.Q6_K, quant.Q5_K, quant.Q4_K, quant.Q3_K, quant.Q2_K}

// RunKernels measures the peaks once, then the kernels: on the CPU the
// single-threaded quantized GEMM of engine/cpu/kernels per type, then the
// backend ops (MatMul, Attention) of every backend on all threads.
func RunKernels(ctx context.Context, o KernelOptions) (*KernelReport, error) {
	if o.MinTime <= 0 {
		o.MinTime = 200 * time.Millisecond
	}
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if len(o.Types) == 0 {
		o.Types = DefaultKernelTypes
	}
	if len(o.Backends) == 0 {
		o.Backends = backend.Names()
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	rep := &KernelReport{}
	cpuPeaks := MeasureCPUPeaks(o.Threads, o.MinTime)
	logf("cpu peaks: copy %.1f GB/s (1 thread %.1f), f32 FMA %.1f GFLOP/s (1 thread %.1f), int8 dot %.1f Gop/s (1 thread %.1f), %d threads",
		cpuPeaks.BytesPerSecond/1e9, cpuPeaks.BytesPerSecond1T/1e9, cpuPeaks.FLOPsPerSecond/1e9, cpuPeaks.FLOPsPerSecond1T/1e9,
		cpuPeaks.Int8OpsPerSecond/1e9, cpuPeaks.Int8OpsPerSecond1T/1e9, cpuPeaks.Threads)
	rep.Peaks = append(rep.Peaks, cpuPeaks)

	// Single-threaded GEMM kernels at an expert's shape.
	gn, gk := shapes.gemmN, shapes.gemmK
	for _, typ := range o.Types {
		for _, m := range shapes.gemmM {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := gemmKernel(typ, m, gn, gk, o.MinTime)
			if err != nil {
				logf("skip gemm %v: %v", typ, err)
				break
			}
			r.rate(cpuPeaks, true, intDot(typ))
			logf("%s", r.line())
			rep.Results = append(rep.Results, r)
		}
	}

	for _, name := range o.Backends {
		b, err := backend.Open(name, backend.Options{Threads: o.Threads})
		if err != nil {
			logf("skip backend %s: %v", name, err)
			continue
		}
		peaks := cpuPeaks
		if name != "cpu" {
			p, ok := chipPeaks(b)
			if !ok {
				logf("backend %s: no chip-table entry for this device; ratios against the CPU peaks are meaningless, skipped", name)
				b.Close()
				continue
			}
			peaks = p
			rep.Peaks = append(rep.Peaks, p)
		}
		results, err := backendKernels(ctx, b, o.MinTime, peaks)
		b.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: kernels on %s: %w", name, err)
		}
		for _, r := range results {
			logf("%s", r.line())
		}
		rep.Results = append(rep.Results, results...)
	}
	return rep, nil
}

// intDot reports whether typ's dot products run on int8 activations
// (q8_0 and the K-quants), whose ceiling is the int8 dot rate.
func intDot(typ quant.Type) bool {
	f, err := quant.FormatOf(typ)
	if err != nil {
		return false
	}
	switch f.VecDotType {
	case quant.Q8_0, quant.Q8_1, quant.Q8_K:
		return true
	}
	return false
}

// rate fills the rates and ratios from Seconds, Iterations, Bytes, FLOPs,
// against the one-thread or all-thread peaks, and the int8 dot ceiling
// when intDot is set and measured.
func (r *KernelResult) rate(p Peaks, oneThread, intDot bool) {
	if r.Seconds <= 0 || r.Iterations <= 0 {
		return
	}
	per := r.Seconds / float64(r.Iterations)
	r.BytesPerSecond = r.Bytes / per
	r.FLOPsPerSecond = r.FLOPs / per
	bw, fl := p.BytesPerSecond, p.FLOPsPerSecond
	if oneThread && p.BytesPerSecond1T > 0 {
		bw, fl = p.BytesPerSecond1T, p.FLOPsPerSecond1T
	}
	r.ComputePeak = "f32_fma"
	if intDot && p.Int8OpsPerSecond > 0 {
		r.ComputePeak = "int8_dot"
		fl = p.Int8OpsPerSecond
		if oneThread && p.Int8OpsPerSecond1T > 0 {
			fl = p.Int8OpsPerSecond1T
		}
	}
	if bw > 0 {
		r.BandwidthRatio = r.BytesPerSecond / bw
	}
	if fl > 0 {
		r.ComputeRatio = r.FLOPsPerSecond / fl
	}
	// Ridge point: FLOPs per byte where the two limits meet.
	r.Bound = "compute"
	if bw > 0 && fl > 0 && r.FLOPs/r.Bytes < fl/bw {
		r.Bound = "memory"
	}
}

func (r *KernelResult) line() string {
	return fmt.Sprintf("%-9s %-26s %3d thr  %8.2f GB/s (%5.1f%%)  %8.2f GFLOP/s (%5.1f%% of %s)  %s-bound",
		r.Backend, r.Name, r.Threads, r.BytesPerSecond/1e9, 100*r.BandwidthRatio, r.FLOPsPerSecond/1e9, 100*r.ComputeRatio, r.ComputePeak, r.Bound)
}

// timeIt calls f until minTime has passed (at least twice: the first call
// warms up and is not counted).
func timeIt(minTime time.Duration, f func() error) (int, float64, error) {
	if err := f(); err != nil {
		return 0, 0, err
	}
	n := 0
	start := time.Now()
	for {
		if err := f(); err != nil {
			return 0, 0, err
		}
		n++
		if el := time.Since(start); el >= minTime {
			return n, el.Seconds(), nil
		}
	}
}

// randomFloats returns n deterministic values in [-a, a].
func randomFloats(n int, a float32, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = (rng.Float32()*2 - 1) * a
	}
	return v
}

// quantizedRows stores rows×cols random values as typ.
func quantizedRows(typ quant.Type, rows, cols int, seed uint64) ([]byte, error) {
	f, err := quant.FormatOf(typ)
	if err != nil {
		return nil, err
	}
	rb, err := quant.RowBytes(typ, cols)
	if err != nil {
		return nil, err
	}
	src := randomFloats(rows*cols, 0.05, seed)
	out := make([]byte, rows*rb)
	switch typ {
	case quant.F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out, nil
	case quant.BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], quant.Float32ToBF16(v))
		}
		return out, nil
	case quant.F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], quant.Float32ToFloat16(v))
		}
		return out, nil
	}
	if f.Quantize == nil {
		return nil, fmt.Errorf("no quantizer for %v", typ)
	}
	for r := 0; r < rows; r++ {
		f.Quantize(out[r*rb:(r+1)*rb], src[r*cols:(r+1)*cols], nil)
	}
	return out, nil
}

// gemmKernel times kernels.GEMM on one thread: m activations against n
// weight rows of k values of typ.
func gemmKernel(typ quant.Type, m, n, k int, minTime time.Duration) (KernelResult, error) {
	r := KernelResult{Name: fmt.Sprintf("gemm/%v/m=%d", typ, m), Backend: "cpu", Type: typ.String(), Threads: 1, M: m, N: n, K: k}
	w, err := quantizedRows(typ, n, k, 7)
	if err != nil {
		return r, err
	}
	xrb, err := kernels.ActivationRowBytes(typ, k)
	if err != nil {
		return r, err
	}
	xq := make([]byte, m*xrb)
	if err := kernels.QuantizeActivations(typ, randomFloats(m*k, 1, 9), m, k, xq); err != nil {
		return r, err
	}
	out := make([]float32, m*n)
	r.Iterations, r.Seconds, err = timeIt(minTime, func() error { return kernels.GEMM(typ, w, n, k, xq, m, out, n) })
	if err != nil {
		return r, err
	}
	r.Bytes = float64(len(w) + len(xq) + 4*len(out))
	r.FLOPs = 2 * float64(m) * float64(n) * float64(k)
	return r, nil
}

// kernelShapes are the sizes the kernels run at.
type kernelShapes struct {
	gemmN, gemmK int   // weight rows and their length
	gemmM        []int // activation rows
	mmL, mmDim   int   // backend MatMul: tokens, square weight size
	attnL        int   // attention tokens (32/4 heads × 128)
	copyBytes    int   // each copy buffer of the bandwidth probe
}

// shapes: an expert's GEMM (768 rows of 2048; a 256-token record sends about
// 16 tokens to each expert, a 2k one 128), a 2048×2048 projection over 256
// tokens, attention over 512 tokens, 64 MiB copies (far beyond any cache).
var shapes = kernelShapes{gemmN: 768, gemmK: 2048, gemmM: []int{16, 128}, mmL: 256, mmDim: 2048, attnL: 512, copyBytes: 64 << 20}

// backendKernels times a backend's MatMul (per weight type) and Attention.
func backendKernels(ctx context.Context, b backend.Backend, minTime time.Duration, peaks Peaks) ([]KernelResult, error) {
	var out []KernelResult
	L, dim := shapes.mmL, shapes.mmDim
	x, err := b.Upload(randomFloats(L*dim, 1, 3), L, dim)
	if err != nil {
		return nil, err
	}
	defer b.Free(x)
	for _, typ := range []quant.Type{quant.BF16, quant.Q8_0, quant.Q4_K} {
		data, err := quantizedRows(typ, dim, dim, 5)
		if err != nil {
			return nil, err
		}
		w, err := b.Weight(&weights.Tensor{Name: "bench.w", Type: typ, Shape: []int{dim, dim}, Data: data})
		if err != nil {
			continue // a type this backend does not run
		}
		r := KernelResult{Name: fmt.Sprintf("matmul/%v/L=%d", typ, L), Backend: b.Name(), Type: typ.String(), Threads: b.Threads(), M: L, N: dim, K: dim}
		r.Iterations, r.Seconds, err = timeIt(minTime, func() error {
			y, err := b.MatMul(x, w)
			if err != nil {
				return err
			}
			_, err = b.Read(ctx, y)
			b.Free(y)
			return err
		})
		if err != nil {
			return nil, err
		}
		r.Bytes = float64(len(data) + 4*L*dim*2)
		r.FLOPs = 2 * float64(L) * float64(dim) * float64(dim)
		r.rate(peaks, false, intDot(typ))
		out = append(out, r)
	}

	const heads, kvHeads, hd = 32, 4, 128
	aL := shapes.attnL
	q, err := b.Upload(randomFloats(aL*heads*hd, 1, 11), aL, heads*hd)
	if err != nil {
		return nil, err
	}
	k, err := b.Upload(randomFloats(aL*kvHeads*hd, 1, 12), aL, kvHeads*hd)
	if err != nil {
		return nil, err
	}
	v, err := b.Upload(randomFloats(aL*kvHeads*hd, 1, 13), aL, kvHeads*hd)
	if err != nil {
		return nil, err
	}
	defer b.Free(q, k, v)
	r := KernelResult{Name: fmt.Sprintf("attention/L=%d", aL), Backend: b.Name(), Type: "f32", Threads: b.Threads(), M: aL, N: aL, K: hd}
	r.Iterations, r.Seconds, err = timeIt(minTime, func() error {
		y, err := b.Attention(q, k, v, backend.AttentionOptions{Heads: heads, KVHeads: kvHeads, Scale: float32(1 / math.Sqrt(hd)), Causal: true})
		if err != nil {
			return err
		}
		_, err = b.Read(ctx, y)
		b.Free(y)
		return err
	})
	if err != nil {
		return nil, err
	}
	// Causal: about half of the L×L scores, QKᵀ and PV each 2·hd FLOPs.
	r.FLOPs = 2 * 2 * float64(aL) * float64(aL+1) / 2 * hd * heads
	r.Bytes = 4 * float64(aL) * (2*heads*hd + 2*kvHeads*hd)
	r.rate(peaks, false, false)
	out = append(out, r)
	return out, nil
}

// MeasureCPUPeaks measures memory copy bandwidth and the float32 FMA rate,
// on one thread and on threads threads.
func MeasureCPUPeaks(threads int, minTime time.Duration) Peaks {
	p := Peaks{Backend: "cpu", Source: "measured", Threads: threads}
	// Each peak is the best of a few trials (other processes only ever
	// slow a trial down), and all threads do at least what one does.
	best := func(rate func(int, time.Duration) float64, threads int) float64 {
		r := 0.0
		for range peakTrials {
			r = math.Max(r, rate(threads, minTime))
		}
		return r
	}
	p.BytesPerSecond1T = best(copyRate, 1)
	p.BytesPerSecond = math.Max(best(copyRate, threads), p.BytesPerSecond1T)
	p.FLOPsPerSecond1T = best(fmaRate, 1)
	p.FLOPsPerSecond = math.Max(best(fmaRate, threads), p.FLOPsPerSecond1T)
	p.Int8OpsPerSecond1T = best(dotRate, 1)
	p.Int8OpsPerSecond = math.Max(best(dotRate, threads), p.Int8OpsPerSecond1T)
	return p
}

// peakTrials is how many times each peak is measured.
const peakTrials = 3

// dotRate is int8 ops per second (2 per u8·s8 multiply-add) of the dot
// probe on threads goroutines.
func dotRate(threads int, minTime time.Duration) float64 {
	iters := 1 << 14
	for {
		el := parallel(threads, func(int) {
			var out [8]int32
			dotProbe(iters, &out)
		})
		if el >= minTime || iters > 1<<34 {
			return float64(threads) * float64(iters) * dotMACsPerIter * 2 / el.Seconds()
		}
		iters *= 2
	}
}

// dotMACsPerIter is the u8·s8 multiply-adds of one dot-probe iteration:
// 6 chains × 32 byte pairs.
const dotMACsPerIter = 6 * 32

// dotProbeGeneric is the int8 dot probe in Go: six chains, each turning 32
// u8·s8 products into 16 saturated int16 pair sums (VPMADDUBSW), those
// into 8 int32 pair sums with weights 1 (VPMADDWD), added to its
// accumulator; the accumulators are summed in order into out.
func dotProbeGeneric(n int, out *[8]int32) {
	var a [32]uint8
	var b [32]int8
	var w [16]int16
	for i := range a {
		a[i], b[i] = 1, 1
	}
	for i := range w {
		w[i] = 1
	}
	sat16 := func(v int32) int16 { return int16(max(min(v, math.MaxInt16), math.MinInt16)) }
	var acc [6][8]int32
	for it := 0; it < n; it++ {
		for c := range acc {
			var t [16]int16
			for j := range t {
				t[j] = sat16(int32(a[2*j])*int32(b[2*j]) + int32(a[2*j+1])*int32(b[2*j+1]))
			}
			for l := range acc[c] {
				acc[c][l] += int32(t[2*l])*int32(w[2*l]) + int32(t[2*l+1])*int32(w[2*l+1])
			}
		}
	}
	for l := range out {
		s := acc[0][l]
		for c := 1; c < len(acc); c++ {
			s += acc[c][l]
		}
		out[l] = s
	}
}

// parallel runs f on n goroutines at once and returns the wall time.
func parallel(n int, f func(i int)) time.Duration {
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// copyRate is bytes read plus written per second by threads goroutines
// each copying its own buffer.
func copyRate(threads int, minTime time.Duration) float64 {
	per := shapes.copyBytes / threads
	src, dst := make([][]byte, threads), make([][]byte, threads)
	for i := range src {
		src[i], dst[i] = make([]byte, per), make([]byte, per)
		for j := 0; j < per; j += 4096 {
			src[i][j], dst[i][j] = 1, 1 // touch every page first
		}
	}
	reps := 1
	for {
		el := parallel(threads, func(i int) {
			for r := 0; r < reps; r++ {
				copy(dst[i], src[i])
			}
		})
		if el >= minTime || reps > 1<<16 {
			return 2 * float64(per) * float64(threads) * float64(reps) / el.Seconds()
		}
		reps *= 2
	}
}

// fmaRate is float32 FLOPs per second of the FMA probe on threads
// goroutines.
func fmaRate(threads int, minTime time.Duration) float64 {
	iters := 1 << 16
	for {
		el := parallel(threads, func(int) {
			var out [8]float32
			fmaProbe(iters, &out)
		})
		if el >= minTime || iters > 1<<34 {
			return float64(threads) * float64(iters) * fmaPerIter * 2 / el.Seconds()
		}
		iters *= 2
	}
}

// fmaPerIter is the FMAs of one probe iteration: 12 accumulators × 8 lanes.
const fmaPerIter = 12 * 8

// fmaProbeGeneric is the FMA probe in Go: 12 independent accumulators of 8
// float32 lanes, each incremented by 1·1 per iteration, then summed in
// order into out (the same arithmetic, rounding included, as the assembly).
func fmaProbeGeneric(n int, out *[8]float32) {
	var acc [12][8]float32
	for i := 0; i < n; i++ {
		for a := range acc {
			for l := range acc[a] {
				acc[a][l] = float32(math.FMA(1, 1, float64(acc[a][l])))
			}
		}
	}
	for l := range out {
		s := acc[0][l]
		for a := 1; a < len(acc); a++ {
			s += acc[a][l]
		}
		out[l] = s
	}
}

// writeMarkdown adds the roofline table to report.md.
func (k *KernelReport) writeMarkdown(b *bytes.Buffer) {
	b.WriteString("## Kernels against the roofline\n\n")
	for _, p := range k.Peaks {
		fmt.Fprintf(b, "- %s peaks (%s, %d threads): %.1f GB/s, %.1f GFLOP/s", p.Backend, p.Source, p.Threads, p.BytesPerSecond/1e9, p.FLOPsPerSecond/1e9)
		if p.Int8OpsPerSecond > 0 {
			fmt.Fprintf(b, ", int8 dot %.1f Gop/s", p.Int8OpsPerSecond/1e9)
		}
		if p.BytesPerSecond1T > 0 {
			fmt.Fprintf(b, "; one thread %.1f GB/s, %.1f GFLOP/s, int8 dot %.1f Gop/s", p.BytesPerSecond1T/1e9, p.FLOPsPerSecond1T/1e9, p.Int8OpsPerSecond1T/1e9)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| backend | kernel | threads | GB/s | % of bandwidth | GFLOP/s | % of compute peak | peak | bound |\n|---|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range k.Results {
		fmt.Fprintf(b, "| %s | %s | %d | %.2f | %.1f | %.2f | %.1f | %s | %s |\n", r.Backend, r.Name, r.Threads,
			r.BytesPerSecond/1e9, 100*r.BandwidthRatio, r.FLOPsPerSecond/1e9, 100*r.ComputeRatio, r.ComputePeak, r.Bound)
	}
	b.WriteString("\n")
}

// ChipPeaks looks a device name ("Apple M2 Max") up in the chip table
// (internal/chips).
func ChipPeaks(device string) (Peaks, bool) {
	c, ok := chips.Of(device)
	if !ok {
		return Peaks{}, false
	}
	return Peaks{Backend: "metal", Source: "chip table: " + c.Name, Threads: 1, BytesPerSecond: c.GBs * 1e9, FLOPsPerSecond: c.TFLOPs * 1e12}, true
}

// chipPeaks returns the chip-table peaks of a GPU backend that names its
// device (Device() string).
func chipPeaks(b backend.Backend) (Peaks, bool) {
	d, ok := b.(interface{ Device() string })
	if !ok {
		return Peaks{}, false
	}
	p, ok := ChipPeaks(d.Device())
	p.Backend = b.Name()
	return p, ok
}
