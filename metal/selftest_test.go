package metal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
)

// TestThroughputReport runs the timed part of SelfTest on the CPU backend at
// a small size: the report must cover every format with both kernels.
func TestThroughputReport(t *testing.T) {
	var out bytes.Buffer
	b := cpu.New(backend.Options{Threads: 1})
	if err := throughput(context.Background(), &out, b, "Apple M4 Max", 64, 256); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"peak of M4 Max", "mul_mv q4_K", "mul_mm q4_K", "mul_mm f16", "GB/s", "TFLOP/s", "% of peak"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

// faultGPU is the fake device whose every Wait reports a failed command
// buffer, as a GPU fault would.
type faultGPU struct {
	*fakeGPU
	seq int
}

func (g *faultGPU) Wait(ctx context.Context) error {
	g.seq++
	return &BufferError{Seq: g.seq, First: "k", Last: "k", Dispatches: 1, Status: 5, Msg: "page fault"}
}

// TestSelfTestFault: a GPU fault makes selftest print how to find it; with
// --trace it stops at the first one, which names the kernel and its shapes.
func TestSelfTestFault(t *testing.T) {
	for _, trace := range []bool{false, true} {
		b, err := newBackend(&faultGPU{fakeGPU: newFakeGPU()}, "fault")
		if err != nil {
			t.Fatal(err)
		}
		b.SetTrace(trace)
		var out bytes.Buffer
		failed, err := SelfTest(context.Background(), &out, b, cpu.New(backend.Options{Threads: 1}), SelfTestOptions{Trace: trace})
		s := out.String()
		if err != nil || failed == 0 {
			t.Fatalf("trace %t: %d failed, %v:\n%s", trace, failed, err, s)
		}
		if n := strings.Count(s, "MTL_SHADER_VALIDATION=1 METAL_DEVICE_WRAPPER_TYPE=1"); n != 1 {
			t.Errorf("trace %t: the validation hint is printed %d times:\n%s", trace, n, s)
		}
		checkFails := strings.Count(s, "FAIL mul_")
		if trace {
			if !strings.Contains(s, "first GPU fault: metal: trace: mul_mv_f32 grid [") || checkFails != 1 {
				t.Errorf("--trace: the first fault is not named, or checks ran after it (%d):\n%s", checkFails, s)
			}
		} else if checkFails < 2 || !strings.Contains(s, "clef selftest --trace") {
			t.Errorf("without --trace the checks stop (%d) or --trace is not suggested:\n%s", checkFails, s)
		}
	}
}

func TestFaultHint(t *testing.T) {
	if FaultHint(errors.New("shapes differ"), false) != "" {
		t.Error("a hint for an error that is no GPU fault")
	}
	be := fmt.Errorf("metal: %w", &BufferError{Seq: 3, First: "a", Last: "b", Dispatches: 2, Status: 5, Msg: "x"})
	for _, traced := range []bool{false, true} {
		h := FaultHint(be, traced)
		for _, v := range []string{"MTL_DEBUG_LAYER=1", "MTL_SHADER_VALIDATION=1", "METAL_DEVICE_WRAPPER_TYPE=1", "--trace"} {
			if !strings.Contains(h, v) {
				t.Errorf("traced %t: hint lacks %s:\n%s", traced, v, h)
			}
		}
	}
}

func TestPipelineTable(t *testing.T) {
	var out bytes.Buffer
	failed := PipelineTable(&out, []PipelineReport{
		{Name: "mul_mm_q4_K[fc0=1]", Info: PipelineInfo{MaxThreads: 896, ExecWidth: 32, StaticTGMemory: 12288}},
		{Name: "flash_attn_f32", Err: errors.New("program_source:12: error: boom")},
	})
	s := out.String()
	if failed != 1 || !strings.Contains(s, "mul_mm_q4_K[fc0=1]") || !strings.Contains(s, "max threads  896") ||
		!strings.Contains(s, "12288 B") || !strings.Contains(s, "FAIL pipeline flash_attn_f32") || !strings.Contains(s, "boom") {
		t.Errorf("%d failed:\n%s", failed, s)
	}
}

func TestKernelTable(t *testing.T) {
	before := Stats{Kernels: map[string]KernelStats{
		"mul_mm_q4_K": {Dispatches: 5, Bytes: 1e9, FLOPs: 1e12, GPUSeconds: 0.5},
		"rope_f32":    {Dispatches: 3, Bytes: 1e6, GPUSeconds: 1e-3},
	}}
	after := Stats{Kernels: map[string]KernelStats{
		"mul_mm_q4_K": {Dispatches: 15, Bytes: 3e9, FLOPs: 3e12, GPUSeconds: 0.7}, // +10 calls, 2 GB, 2 TFLOP in 0.2 s
		"rope_f32":    {Dispatches: 3, Bytes: 1e6, GPUSeconds: 1e-3},              // not run in between
		"add_f32":     {Dispatches: 4, Bytes: 4e6},                                // no GPU time (untraced)
		"mul_mv_f16":  {Dispatches: 2, Bytes: 5.46e9, GPUSeconds: 0.01},           // 546 GB/s
	}}
	var out bytes.Buffer
	kernelTable(&out, before, after, "Apple M4 Max")
	s := out.String()
	lines := strings.Split(s, "\n")
	var names []string
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, "(") {
			break
		}
		if f := strings.Fields(l); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	if got := strings.Join(names, " "); got != "mul_mm_q4_K mul_mv_f16 add_f32" {
		t.Errorf("kernels %q, want the ones run in between, slowest first:\n%s", got, s)
	}
	for _, want := range []string{"200.000", "20000.0", "10.000 ( 57%)", "546.0 (100%)", "M4 Max's peak"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}
