package metal

import (
	"strings"
	"testing"
)

func TestFitError(t *testing.T) {
	// A 30B-parameter model at bf16 (~61 GB) on a 36 GB Mac (24 GiB budget):
	// the message names the need, the budget and smaller formats that fit.
	err := CheckFit(61<<30, 24<<30, "Apple M3 Max")
	if err == nil {
		t.Fatal("no error for a model larger than the working set")
	}
	msg := err.Error()
	for _, want := range []string{"61.0 GiB", "24.0 GiB", "Apple M3 Max", "recommendedMaxWorkingSetSize", "iogpu.wired_limit_mb"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if err := CheckFit(10<<30, 24<<30, "x"); err != nil {
		t.Errorf("a fitting model gave %v", err)
	}
	if err := CheckFit(10<<30, 0, "x"); err != nil {
		t.Errorf("an unknown budget gave %v", err)
	}
	// Nothing fits a tiny budget: the message says to use the CPU.
	if msg := FitError(17<<30, 1<<30, "x").Error(); !strings.Contains(msg, "--backend cpu") {
		t.Errorf("message %q does not point to the CPU backend", msg)
	}
}

func TestKernelSuffix(t *testing.T) {
	names := map[string]bool{}
	for _, n := range kernelNamesForTest() {
		names[n] = true
	}
	for _, typ := range SupportedTypes() {
		s, err := kernelSuffix(typ)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"mul_mv_", "mul_mm_", "moe_gu_", "moe_down_", "get_rows_"} {
			if !names[op+s] {
				t.Errorf("%v: no kernel %s%s in shaders/", typ, op, s)
			}
		}
	}
}

func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{1, 16 << 10}, {16 << 10, 16 << 10}, {16<<10 + 1, 32 << 10}, {1 << 20, 1 << 20},
		{1<<20 + 1, 2 << 20}, {352 << 20, 352 << 20}, {352<<20 + 5, 353 << 20},
	} {
		if got := sizeClass(c.n); got != c.want || got < c.n {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
