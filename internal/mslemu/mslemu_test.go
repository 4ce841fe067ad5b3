package mslemu

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
)

var (
	probeOnce sync.Once
	probe     *Harness
	probeErr  error
	probeDir  string
)

func buildProbe(t *testing.T) *Harness {
	t.Helper()
	if !Available() {
		t.Skipf("%s not found", Clang)
	}
	probeOnce.Do(func() {
		probeDir, probeErr = os.MkdirTemp("", "emu-probe")
		if probeErr != nil {
			return
		}
		probe, probeErr = Build(probeDir, "testdata/probe.metal")
		if probeErr == nil {
			probe.Orders = RaceOrders
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probe
}

func TestMain(m *testing.M) {
	code := m.Run()
	if probe != nil {
		probe.Close()
	}
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
	if checks != nil {
		checks.Close()
	}
	if checksDir != "" {
		os.RemoveAll(checksDir)
	}
	os.Exit(code)
}

func TestShimSimd(t *testing.T) {
	h := buildProbe(t)
	const n = 40 // one full simdgroup and one of 8 lanes
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((i*7)%11) - 3
	}
	out, err := h.Run(&Job{Kernel: "probe_simd", Grid: [3]int{1, 1, 1}, Group: [3]int{n, 1, 1},
		Consts:  []Const{{Index: 3, Value: I32([]int32{100})}},
		Buffers: []Buffer{{Index: 0, Data: F32(x)}, {Index: 1, Data: make([]byte, 4*8*n)}}})
	if err != nil {
		t.Fatal(err)
	}
	got := ToF32(out[1])
	for tid := 0; tid < n; tid++ {
		sg, lane := tid/32, tid%32
		lo, hi := 32*sg, min(32*sg+32, n)
		var sum, mx, mn, pre float32 = 0, -1e30, 1e30, 0
		for i := lo; i < hi; i++ {
			sum += x[i]
			mx = max(mx, x[i])
			mn = min(mn, x[i])
			if i < tid {
				pre += x[i]
			}
		}
		at := func(l int) float32 { // the value of lane l, or the caller's own if l is not active
			if l >= 0 && lo+l < hi {
				return x[lo+l]
			}
			return x[tid]
		}
		want := []float32{sum, mx, mn, pre, at(lane + 3), at(lane ^ 5), at(2), pre + x[tid] + 100}
		for k, w := range want {
			if g := got[8*tid+k]; g != w {
				t.Errorf("thread %d op %d = %g, want %g", tid, k, g, w)
			}
		}
	}
}

func TestShimThreadgroup(t *testing.T) {
	h := buildProbe(t)
	const groups, per = 5, 96
	x := make([]float32, groups*per)
	for i := range x {
		x[i] = float32(i)
	}
	out, err := h.Run(&Job{Kernel: "probe_tg", Grid: [3]int{groups, 1, 1}, Group: [3]int{per, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: F32(x)}, {Index: 1, Data: make([]byte, 4*len(x))}}})
	if err != nil {
		t.Fatal(err)
	}
	got := ToF32(out[1])
	for g := 0; g < groups; g++ {
		for i := 0; i < per; i++ {
			if want := x[g*per+per-1-i]; got[g*per+i] != want {
				t.Fatalf("group %d thread %d = %g, want %g", g, i, got[g*per+i], want)
			}
		}
	}
}

func TestShimVectors(t *testing.T) {
	h := buildProbe(t)
	out, err := h.Run(&Job{Kernel: "probe_vec", Grid: [3]int{1, 1, 1}, Group: [3]int{32, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: make([]byte, 4*5)}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float32{6, 23, 2, 6, 1} {
		if g := ToF32(out[0])[i]; g != want {
			t.Errorf("probe_vec[%d] = %g, want %g", i, g, want)
		}
	}
}

func TestShimAtomics(t *testing.T) {
	h := buildProbe(t)
	out, err := h.Run(&Job{Kernel: "probe_atomic", Grid: [3]int{37, 1, 1}, Group: [3]int{64, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: make([]byte, 4)}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint32(out[0]); n != 37*64 {
		t.Fatalf("counter = %d, want %d", n, 37*64)
	}
}

func TestShimDivergentBarrier(t *testing.T) {
	h := buildProbe(t)
	_, err := h.Run(&Job{Kernel: "probe_divergent", Grid: [3]int{1, 1, 1}, Group: [3]int{64, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: make([]byte, 4*64)}}})
	if err == nil || !strings.Contains(err.Error(), "collective not reached") || !strings.Contains(err.Error(), "kernel probe_divergent") {
		t.Fatalf("divergent barrier: err = %v, want a 'collective not reached' error", err)
	}
	// The server restarts after a failed job.
	out, err := h.Run(&Job{Kernel: "probe_vec", Grid: [3]int{1, 1, 1}, Group: [3]int{1, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: make([]byte, 4*5)}}})
	if err != nil || ToF32(out[0])[0] != 6 {
		t.Fatalf("after a failed job: %v", err)
	}
}

func TestShimUninitialised(t *testing.T) {
	h := buildProbe(t)
	for run := 0; run < 2; run++ { // the second group must not see the first one's data
		out, err := h.Run(&Job{Kernel: "probe_uninit", Grid: [3]int{3, 1, 1}, Group: [3]int{64, 1, 1},
			Buffers: []Buffer{{Index: 0, Data: make([]byte, 4*64)}}})
		if err != nil {
			t.Fatal(err)
		}
		got := ToF32(out[0])
		if got[0] != 1 {
			t.Fatalf("written element = %g, want 1", got[0])
		}
		for i := 1; i < 64; i++ {
			if !math.IsNaN(float64(got[i])) {
				t.Fatalf("unwritten threadgroup element %d = %g, want NaN", i, got[i])
			}
		}
	}
}

func TestBadJobs(t *testing.T) {
	h := buildProbe(t)
	for name, job := range map[string]*Job{
		"unknown kernel": {Kernel: "nope", Grid: [3]int{1, 1, 1}, Group: [3]int{1, 1, 1}},
		"too many threads": {Kernel: "probe_vec", Grid: [3]int{1, 1, 1}, Group: [3]int{2048, 1, 1},
			Buffers: []Buffer{{Index: 0, Data: make([]byte, 20)}}},
		"tg memory not a multiple of 16": {Kernel: "probe_vec", Grid: [3]int{1, 1, 1}, Group: [3]int{1, 1, 1},
			TGMem: map[int]int{0: 10}, Buffers: []Buffer{{Index: 0, Data: make([]byte, 20)}}},
		"alias of an unbound buffer": {Kernel: "probe_vec", Grid: [3]int{1, 1, 1}, Group: [3]int{1, 1, 1},
			Alias: map[int]int{1: 7}, Buffers: []Buffer{{Index: 0, Data: make([]byte, 20)}}},
		"too many fiber orders": {Kernel: "probe_vec", Grid: [3]int{1, 1, 1}, Group: [3]int{1, 1, 1}, Orders: MaxOrders + 1,
			Buffers: []Buffer{{Index: 0, Data: make([]byte, 20)}}},
	} {
		if _, err := h.Run(job); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseKernels(t *testing.T) {
	src, err := os.ReadFile("testdata/probe.metal")
	if err != nil {
		t.Fatal(err)
	}
	names := KernelNames(src)
	want := []string{"probe_simd", "probe_tg", "probe_vec", "probe_atomic", "probe_divergent", "probe_uninit"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("KernelNames = %v, want %v", names, want)
	}
	if _, err := ParseKernels([]byte("kernel void f(device float *x) {}")); err == nil {
		t.Error("a parameter without an attribute was accepted")
	}
	if _, err := ParseKernels([]byte("kernel void f(device float *x [[stage_in]]) {}")); err == nil {
		t.Error("an unknown attribute was accepted")
	}
}
