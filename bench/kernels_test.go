package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/quant"
)

// The FMA probe (assembly where there is one) and its Go twin do the same
// arithmetic: every lane of the sum is 12·n, and no lane is left unwritten.
func TestFMAProbeTwins(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 64, 1000, 4097} {
		var fast, slow [8]float32
		for i := range fast {
			fast[i], slow[i] = float32(math.NaN()), float32(math.NaN())
		}
		fmaProbe(n, &fast)
		fmaProbeGeneric(n, &slow)
		for l := range fast {
			if fast[l] != float32(12*n) || slow[l] != fast[l] {
				t.Fatalf("n=%d lane %d: probe %v, generic %v, want %d", n, l, fast[l], slow[l], 12*n)
			}
		}
	}
}

// The int8 dot probe and its Go twin: every int32 lane is 6·4·n.
func TestDotProbeTwins(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 100, 3001} {
		var fast, slow [8]int32
		for i := range fast {
			fast[i], slow[i] = -7, -7
		}
		dotProbe(n, &fast)
		dotProbeGeneric(n, &slow)
		for l := range fast {
			if fast[l] != int32(24*n) || slow[l] != fast[l] {
				t.Fatalf("n=%d lane %d: probe %d, generic %d, want %d", n, l, fast[l], slow[l], 24*n)
			}
		}
	}
}

func TestChipPeaks(t *testing.T) {
	for dev, want := range map[string]float64{"Apple M2 Max": 400, "Apple M2": 100, "Apple M4 Pro": 273, "Apple M1 Ultra": 800, "Apple M3 Max": 400} {
		p, ok := ChipPeaks(dev)
		if !ok || p.BytesPerSecond != want*1e9 || p.FLOPsPerSecond <= 1e12 || !strings.Contains(p.Source, "chip table") {
			t.Errorf("%s: %+v %v, want %g GB/s", dev, p, ok, want)
		}
	}
	if _, ok := ChipPeaks("Intel Xeon"); ok {
		t.Error("an unknown device has chip peaks")
	}
}

func TestKernelRates(t *testing.T) {
	r := KernelResult{Iterations: 4, Seconds: 2, Bytes: 100, FLOPs: 1000}
	r.rate(Peaks{BytesPerSecond: 400, FLOPsPerSecond: 8000, BytesPerSecond1T: 200, FLOPsPerSecond1T: 1000}, true, false)
	// Per call 0.5 s: 200 B/s (100% of the one-thread 200), 2000 FLOP/s (200%).
	if r.BytesPerSecond != 200 || r.FLOPsPerSecond != 2000 || r.BandwidthRatio != 1 || r.ComputeRatio != 2 {
		t.Errorf("%+v", r)
	}
	// 10 FLOP/B against a one-thread ridge of 5 FLOP/B: compute-bound.
	if r.Bound != "compute" {
		t.Errorf("bound %s", r.Bound)
	}
	r.rate(Peaks{BytesPerSecond: 400, FLOPsPerSecond: 8000}, false, false)
	if r.BandwidthRatio != 0.5 || r.ComputeRatio != 0.25 || r.Bound != "memory" || r.ComputePeak != "f32_fma" {
		t.Errorf("all threads: %+v", r)
	}
	// An int8-dot kernel is held to the int8 ceiling when there is one.
	r.rate(Peaks{BytesPerSecond: 400, FLOPsPerSecond: 8000, Int8OpsPerSecond: 16000}, false, true)
	if r.ComputeRatio != 0.125 || r.ComputePeak != "int8_dot" {
		t.Errorf("int8: %+v", r)
	}
	if !intDot(quant.Q4_K) || !intDot(quant.Q8_0) || intDot(quant.BF16) || intDot(quant.F32) {
		t.Error("intDot")
	}
}

func TestGEMMKernelCounts(t *testing.T) {
	for _, typ := range []quant.Type{quant.F32, quant.BF16, quant.Q8_0, quant.Q4_K} {
		r, err := gemmKernel(typ, 3, 8, 256, time.Millisecond)
		if err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		wb, _ := quant.RowBytes(typ, 256)
		if r.FLOPs != 2*3*8*256 || r.Bytes < float64(8*wb+3*8*4) || r.Iterations < 1 || r.Seconds <= 0 {
			t.Errorf("%v: %+v", typ, r)
		}
	}
	if _, err := gemmKernel(quant.Type(9999), 1, 1, 32, time.Millisecond); err == nil {
		t.Error("an unknown type ran")
	}
}

// RunKernels end to end at toy sizes: peaks are measured, every GEMM type
// and the CPU backend's ops report rates and ratios.
func TestRunKernelsSmall(t *testing.T) {
	saved := shapes
	defer func() { shapes = saved }()
	shapes = kernelShapes{gemmN: 16, gemmK: 256, gemmM: []int{2}, mmL: 4, mmDim: 256, attnL: 8, copyBytes: 1 << 20}
	k, err := RunKernels(context.Background(), KernelOptions{MinTime: time.Millisecond, Threads: 2, Types: []quant.Type{quant.Q8_0, quant.Q6_K}, Backends: []string{"cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	p := k.Peaks[0]
	if p.Source != "measured" || p.BytesPerSecond <= 0 || p.FLOPsPerSecond <= 0 || p.BytesPerSecond1T <= 0 || p.FLOPsPerSecond1T <= 0 || p.Int8OpsPerSecond1T <= 0 {
		t.Fatalf("peaks %+v", p)
	}
	names := map[string]bool{}
	for _, r := range k.Results {
		names[r.Name] = true
		if r.BytesPerSecond <= 0 || r.FLOPsPerSecond <= 0 || r.BandwidthRatio <= 0 || r.ComputeRatio <= 0 || (r.Bound != "memory" && r.Bound != "compute") {
			t.Errorf("%s: %+v", r.Name, r)
		}
	}
	for _, want := range []string{"gemm/q8_0/m=2", "gemm/q6_K/m=2", "matmul/bf16/L=4", "matmul/q8_0/L=4", "attention/L=8"} {
		if !names[want] {
			t.Errorf("no result %s (have %v)", want, names)
		}
	}
}
