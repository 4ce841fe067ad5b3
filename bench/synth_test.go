package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// smallSynth is a synthetic model small enough for a unit test, with rows
// of 256 so that q8_0 and the K-quants apply without fallbacks.
func smallSynth() SynthConfig {
	return SynthConfig{Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 32, Experts: 4, TopK: 2, ExpertFFN: 256, Vocab: 640,
		Head: release.Head{HiddenSize: 256, Width: 32, RoutingLayers: 1, Layers: 1, Heads: 4, Feedforward: 64}, Seed: 5}
}

func TestRealShapeSize(t *testing.T) {
	c := RealShape(4)
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	// About 1.5 GB per layer of experts and attention, 1.2 GB of embeddings
	// and lm_head, 0.5 GB of head: the ~6 GB bf16 model of the issue.
	if n := c.SynthBytes(); n < 6e9 || n > 8e9 {
		t.Errorf("4-layer real-shape model is %d bytes", n)
	}
	s := smallSynth()
	var listed int64
	for _, t := range append(s.thinkerTensors(), s.headTensors()...) {
		listed += t.bytes()
	}
	if s.SynthBytes() != listed {
		t.Errorf("SynthBytes %d, the tensors hold %d", s.SynthBytes(), listed)
	}
}

func TestSynthConfigChecks(t *testing.T) {
	for _, mut := range []func(*SynthConfig){
		func(c *SynthConfig) { c.KVHeads = 3 },
		func(c *SynthConfig) { c.TopK = 9 },
		func(c *SynthConfig) { c.Head.HiddenSize = 128 },
		func(c *SynthConfig) { c.Layers = 0 },
		func(c *SynthConfig) { c.Hidden = -1 },
		func(c *SynthConfig) { c.Layers, c.Experts = 1<<20, 1<<20 },
		func(c *SynthConfig) { c.Head.Width = 30 },
	} {
		c := smallSynth()
		mut(&c)
		if err := WriteSynthetic(t.TempDir(), c, nil); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

// A written synthetic model opens as a release, answers a record, is the
// same bytes for the same seed, and quantizes; the q8_0 copy is then
// compared with it.
func TestSyntheticModelRunsAndQuantizes(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	c := smallSynth()
	var log bytes.Buffer
	if err := WriteSynthetic(a, c, &log); err != nil {
		t.Fatal(err)
	}
	if err := WriteSynthetic(b, c, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.safetensors", "joint_head.safetensors", "config.json"} {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two writes of the same seed", f)
		}
	}
	if !strings.Contains(log.String(), "wrote") {
		t.Errorf("no progress: %q", log.String())
	}

	m, err := weights.OpenSafetensors(filepath.Join(a, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	emb, err := m.Tensor("thinker.model.embed_tokens.weight")
	if err != nil || emb.Type != quant.BF16 || len(emb.Shape) != 2 || emb.Shape[0] != c.Vocab || emb.Shape[1] != c.Hidden {
		t.Fatalf("embedding %+v %v", emb, err)
	}
	v, _ := weights.Float32(emb)
	var nonzero int
	for _, x := range v {
		if x < -0.036 || x > 0.036 || x != x {
			t.Fatalf("embedding value %v out of range", x)
		}
		if x != 0 {
			nonzero++
		}
	}
	if nonzero < len(v)*9/10 {
		t.Errorf("only %d of %d embedding values are non-zero", nonzero, len(v))
	}
	norm, _ := m.Tensor("thinker.model.layers.1.input_layernorm.weight")
	if nv, _ := weights.Float32(norm); len(nv) != c.Hidden || nv[0] != 1 || nv[c.Hidden-1] != 1 {
		t.Errorf("norm weights %v", nv[:4])
	}
	m.Close()

	// It is a release: its configuration is the one the tensors were made
	// for, and every row of the decoder's and the head's tables is there.
	r, err := release.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Thinker.Text != c.text() || r.Config.Head == nil || *r.Config.Head != c.Head {
		t.Errorf("config %+v, head %+v; want %+v", r.Config.Thinker.Text, r.Config.Head, c.text())
	}
	var rows int
	for _, row := range append(release.DecoderTensors(r.Config.Thinker.Text), release.HeadTensors(*r.Config.Head)...) {
		if _, _, err := release.Lookup(r.Weights, row); err != nil {
			t.Error(err)
		}
		rows++
	}
	if n := len(r.Weights.Names()); n != len(c.thinkerTensors())+len(c.headTensors()) || rows != 3+12*c.Layers+len(c.headTensors()) {
		t.Errorf("%d stored tensors, %d rows", n, rows)
	}
	if gate, _ := r.Weights.Tensor("residual_gate"); gate == nil {
		t.Error("no residual_gate")
	} else if v, _ := weights.Float32(gate); len(v) != 1 || v[0] != 0.5 {
		t.Errorf("residual_gate %v", v)
	}
	r.Close()

	q8 := filepath.Join(dir, "model-q8_0.gguf")
	ft, _ := convert.ParseFileType("q8_0")
	if _, err := convert.Quantize(a, convert.Options{Type: ft, Out: q8, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Models: []ModelSpec{{Name: "bf16", Path: a}, {Path: q8}}, Reps: 1, Engine: engine.Options{Backend: "cpu", Threads: 1}}
	rep, err := Run(context.Background(), cfg, nil, tinyBuild(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reference != "bf16" || rep.Models[0].Quant != "bf16" || rep.Models[1].Quant != "q8_0" {
		t.Fatalf("reference %s, quants %s %s", rep.Reference, rep.Models[0].Quant, rep.Models[1].Quant)
	}
	ag := rep.Models[1].Agreement["all"]
	if ag == nil || ag.Questions != 8 || ag.MeanTV > 0.5 || rep.Models[1].FileBytes >= rep.Models[0].FileBytes {
		t.Errorf("q8_0 against bf16: %+v, sizes %d %d", ag, rep.Models[1].FileBytes, rep.Models[0].FileBytes)
	}
}
