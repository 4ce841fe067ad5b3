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

func TestParseConfigErrors(t *testing.T) {
	good, err := os.ReadFile(omniDir + "config.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ json, want string }{
		"malformed":    {`{"thinker_config": `, "config.json"},
		"empty":        {`{}`, "hidden_size"},
		"absurd":       {strings.Replace(string(good), `"hidden_size": 64`, `"hidden_size": 99999999999`, 1), "hidden_size"},
		"negative":     {strings.Replace(string(good), `"num_key_value_heads": 2`, `"num_key_value_heads": -2`, 1), "num_key_value_heads"},
		"gqa":          {strings.Replace(string(good), `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1), "kv heads"},
		"topk":         {strings.Replace(string(good), `"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`, 1), "top-9"},
		"mrope":        {strings.Replace(string(good), "4,\n          2,\n          2", "4,\n          2,\n          3", 1), "mrope_section"},
		"dense layers": {strings.Replace(string(good), `"mlp_only_layers": []`, `"mlp_only_layers": [1]`, 1), "mlp_only_layers"},
		"wrong type":   {strings.Replace(string(good), `"hidden_size": 64`, `"hidden_size": "64"`, 1), "hidden_size"},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, tc.want)
		}
	}
}

func TestReadConfigGGUF(t *testing.T) {
	c, err := ReadConfig(ggufDir + "tiny256-q4_k_m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Experts: 8, TopK: 2, ExpertFFN: 256,
		Vocab: 256, NormEps: c.NormEps, RopeTheta: 1e6, NormTopK: true}
	if c != want || math.Abs(float64(c.NormEps)-1e-6) > 1e-12 {
		t.Errorf("config %+v, want %+v", c, want)
	}
	if _, err := ReadConfig(ggufDir + "README.md"); err == nil {
		t.Error("README.md read as a config")
	}
}

// TestLoadErrors checks that a model whose tensors do not match the config
// is refused with the tensor's name.
func TestLoadErrors(t *testing.T) {
	w, err := weights.OpenSafetensors(omniDir + "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cj, _ := os.ReadFile(omniDir + "config.json")
	cfg, err := ParseConfig(cj)
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
			w, err := weights.Open(ggufDir + "tiny256-q4_k_m.gguf")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ReadConfig(ggufDir + "tiny256-q4_k_m.gguf")
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
