package qwen3moe

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/weights"
)

// TestLoadErrors checks that a model whose tensors do not match the config
// is refused with the tensor's name.
func TestLoadErrors(t *testing.T) {
	w, err := weights.OpenSafetensors(omniDir + "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cj, _ := os.ReadFile(omniDir + "config.json")
	cfg, err := parseText(cj)
	if err != nil {
		t.Fatal(err)
	}
	b := cpu.New(backend.Options{Threads: 1})
	bad := cfg
	bad.ExpertFFN = 48
	if _, err := Load(w, bad, b); err == nil || !strings.Contains(err.Error(), "gate_proj") {
		t.Errorf("wrong expert size: %v", err)
	}
	bad = cfg
	bad.Layers = 3
	if _, err := Load(w, bad, b); err == nil || !strings.Contains(err.Error(), "layers.2") {
		t.Errorf("missing layer: %v", err)
	}
	m, err := Load(w, cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	for name, ids := range map[string][]int{"empty": nil, "out of vocabulary": {1, 512}, "negative": {-1}} {
		if _, err := m.Hidden(context.Background(), ids, nil); err == nil {
			t.Errorf("%s ids: no error", name)
		}
	}
	if _, err := m.Hidden(context.Background(), []int{1, 2}, [][3]int{{0, 0, 0}}); err == nil {
		t.Error("wrong position count: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Hidden(ctx, []int{1, 2}, nil); err == nil {
		t.Error("cancelled context: no error")
	}
}

// TestThreadInvariance checks that the result does not depend on the
// number of workers, bit for bit: every output value is computed by one
// worker in a fixed order.
func TestThreadInvariance(t *testing.T) {
	ids := []int{177, 4, 254, 94, 164, 69, 110, 224, 172, 61, 42, 249, 9, 85, 57, 182, 195}
	ref := map[bool][]float32{}
	for _, threads := range []int{1, 2, 5} {
		for _, precise := range []bool{false, true} {
			w, err := openWeights(ggufDir + "tiny256-q4_k_m.gguf")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := readText(ggufDir + "tiny256-q4_k_m.gguf")
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(w, cfg, cpu.New(backend.Options{Threads: threads, Precise: precise}))
			if err != nil {
				t.Fatal(err)
			}
			h, err := m.Hidden(context.Background(), ids, nil)
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			r, ok := ref[precise]
			if !ok {
				ref[precise] = h
				continue
			}
			for i := range h {
				if math.Float32bits(h[i]) != math.Float32bits(r[i]) {
					t.Fatalf("threads=%d precise=%v: value %d is %v, with 1 thread %v", threads, precise, i, h[i], r[i])
				}
			}
		}
	}
}
