package release_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// mapModel is a weights.Model over tensors held in memory.
type mapModel map[string]*weights.Tensor

func (m mapModel) Tensor(n string) (*weights.Tensor, error) {
	if t, ok := m[n]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("mem: no tensor %q", n)
}

func (m mapModel) Has(n string) bool { _, ok := m[n]; return ok }

func (m mapModel) Names() []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func (m mapModel) Close() error { return nil }

// f32 is a float32 tensor of the given shape (zeros).
func f32(name string, shape ...int) *weights.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return &weights.Tensor{Name: name, Type: quant.F32, Shape: shape, Data: make([]byte, 4*n)}
}

// In the release, Lookup finds a plain row under its checkpoint name and
// stacks a stacked row's per-expert tensors without copying them.
func TestLookupRelease(t *testing.T) {
	r := openTiny(t)
	for _, row := range release.DecoderTensors(r.Config.Thinker.Text) {
		w, names, err := release.Lookup(r.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(w.Shape, row.Shape) {
			t.Errorf("%s: shape %v", row.Name, w.Shape)
		}
		if !row.Stacked() {
			stored, _ := r.Weights.Tensor(row.Name)
			if w != stored || !reflect.DeepEqual(names, []string{row.Name}) {
				t.Errorf("%s: found %v", row.Name, names)
			}
			continue
		}
		if w.Data != nil || len(w.Parts) != row.Shape[0] || len(names) != row.Shape[0] || strings.Contains(w.Name, "*") {
			t.Fatalf("%s: stack %q of %d parts from %v", row.Name, w.Name, len(w.Parts), names)
		}
		for e := range w.Parts {
			stored, _ := r.Weights.Tensor(row.ExpertName(e))
			if names[e] != row.ExpertName(e) || &w.Part(e)[0] != &stored.Data[0] || len(w.Part(e)) != len(stored.Data) {
				t.Errorf("%s: expert %d is not the stored %s", row.Name, e, names[e])
			}
		}
	}
}

func TestLookupErrors(t *testing.T) {
	c := tinyText
	rows := release.DecoderTensors(c)
	q := rows[2] // layer 0 q_proj
	if q.Key != "self_attn.q_proj.weight" {
		t.Fatalf("row 2 is %s", q.Name)
	}
	var gate release.Tensor // layer 0 expert gate projections
	for _, r := range rows {
		if r.Layer == 0 && r.Role == release.RoleFFNGate {
			gate = r
		}
	}

	// A missing tensor is named, with its GGUF name.
	_, _, err := release.Lookup(mapModel{}, q)
	if err == nil || !strings.Contains(err.Error(), q.Name) || !strings.Contains(err.Error(), q.GGUF) {
		t.Errorf("missing: %v", err)
	}
	_, _, err = release.Lookup(mapModel{}, gate)
	if err == nil || !strings.Contains(err.Error(), gate.Name) || !strings.Contains(err.Error(), gate.GGUF) {
		t.Errorf("missing experts: %v", err)
	}
	// A wrong shape names both shapes and the stored name.
	_, _, err = release.Lookup(mapModel{q.GGUF: f32(q.GGUF, 64, 32)}, q)
	if err == nil || !strings.Contains(err.Error(), q.GGUF) || !strings.Contains(err.Error(), "[64 32]") || !strings.Contains(err.Error(), "[64 64]") {
		t.Errorf("wrong shape: %v", err)
	}
	_, _, err = release.Lookup(mapModel{gate.GGUF: f32(gate.GGUF, 8, 64, 32)}, gate)
	if err == nil || !strings.Contains(err.Error(), "[8 64 32]") || !strings.Contains(err.Error(), "[8 32 64]") {
		t.Errorf("wrong stacked shape: %v", err)
	}
	// Per-expert tensors: one missing, one of another shape.
	m := mapModel{}
	for e := 0; e < 8; e++ {
		if e != 5 {
			m[gate.ExpertName(e)] = f32(gate.ExpertName(e), 32, 64)
		}
	}
	if _, _, err := release.Lookup(m, gate); err == nil || !strings.Contains(err.Error(), gate.ExpertName(5)) {
		t.Errorf("missing expert: %v", err)
	}
	m[gate.ExpertName(5)] = f32(gate.ExpertName(5), 64, 32)
	if _, _, err := release.Lookup(m, gate); err == nil || !strings.Contains(err.Error(), gate.ExpertName(5)) {
		t.Errorf("expert of another shape: %v", err)
	}
	for e := 0; e < 8; e++ {
		m[gate.ExpertName(e)] = f32(gate.ExpertName(e), 64, 32) // all transposed
	}
	if _, _, err := release.Lookup(m, gate); err == nil || !strings.Contains(err.Error(), "[8 64 32]") || !strings.Contains(err.Error(), "[8 32 64]") {
		t.Errorf("experts of the wrong shape: %v", err)
	}

	// An optional row that is absent is nil without an error; present, it is
	// checked like any other.
	opt := release.Tensor{Name: "thinker.model.extra.weight", GGUF: "extra.weight", Layer: -1, Shape: []int{4}, Optional: true}
	if w, names, err := release.Lookup(mapModel{}, opt); w != nil || names != nil || err != nil {
		t.Errorf("absent optional row: %v %v %v", w, names, err)
	}
	if _, _, err := release.Lookup(mapModel{"extra.weight": f32("extra.weight", 5)}, opt); err == nil || !strings.Contains(err.Error(), "[5]") {
		t.Errorf("optional row of the wrong shape: %v", err)
	}
	if w, names, err := release.Lookup(mapModel{"extra.weight": f32("extra.weight", 4)}, opt); w == nil || err != nil || names[0] != "extra.weight" {
		t.Errorf("optional row: %v %v", names, err)
	}
	// The checkpoint name wins over the GGUF name.
	both := mapModel{q.Name: f32(q.Name, 64, 64), q.GGUF: f32(q.GGUF, 64, 64)}
	if _, names, err := release.Lookup(both, q); err != nil || names[0] != q.Name {
		t.Errorf("both names: %v %v", names, err)
	}
}

// A GGUF backbone is found under llama.cpp's names, stacked experts as the
// file's one tensor; qwen3vlmoe (llama.cpp's converter for Qwen3-Omni)
// reads as qwen3moe, with its M-RoPE sections.
func TestLookupGGUF(t *testing.T) {
	src := fixtureGGUFDir + "tiny64-f32.gguf"
	f, err := weights.OpenGGUF(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kv []weights.GGUFKV
	for _, e := range f.KV {
		k := e.Key
		if rest, ok := strings.CutPrefix(k, "qwen3moe."); ok {
			k = "qwen3vlmoe." + rest
		}
		v := e.Value
		if k == "general.architecture" {
			v = "qwen3vlmoe"
		}
		kv = append(kv, weights.GGUFKV{Key: k, Value: v})
	}
	kv = append(kv, weights.GGUFKV{Key: "qwen3vlmoe.rope.dimension_sections", Value: []int32{4, 2, 2, 0}})
	vl := filepath.Join(t.TempDir(), "vl.gguf")
	writeGGUF(t, vl, kv, f.Tensors, func(ti weights.GGUFTensorInfo) []byte { return ti.Data })

	a, err := release.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := release.Open(vl)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Format != release.FormatGGUF || a.Backbone == nil || a.Companion != nil || a.Config.Head != nil || len(a.Files) != 0 {
		t.Errorf("llama.cpp GGUF: %s, companion %v, head %v, files %v", a.Format, a.Companion, a.Config.Head, a.Files)
	}
	want := a.Config.Thinker.Text
	want.MRoPESections, want.MRoPEInterleaved = [3]int{4, 2, 2}, true
	if b.Config.Thinker.Text != want {
		t.Errorf("qwen3vlmoe config %+v, want %+v", b.Config.Thinker.Text, want)
	}
	for _, row := range release.DecoderTensors(a.Config.Thinker.Text) {
		wa, na, err := release.Lookup(a.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		wb, nb, err := release.Lookup(b.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(na, []string{row.GGUF}) || !reflect.DeepEqual(nb, na) {
			t.Errorf("%s: found under %v and %v", row.Name, na, nb)
		}
		if wa.Parts != nil || !bytes.Equal(wa.Data, wb.Data) || !reflect.DeepEqual(wa.Shape, row.Shape) {
			t.Errorf("%s differs between qwen3moe and qwen3vlmoe", row.Name)
		}
	}
}

// mlxLayout is how one MLX conversion names the decoder.
type mlxLayout struct{ model, lmHead string }

// An MLX checkpoint's decoder, under each of the prefixes conversions use,
// is found by the table: quantized rows as the packed MLX tensors,
// switch_mlp stacks as one [E, out, in] tensor, the rest as stored; the
// speech-output modules are skipped.
func TestLookupMLX(t *testing.T) {
	src := openTiny(t)
	cfgJSON, err := os.ReadFile(filepath.Join(fixtureTiny, release.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	const g = 32
	for _, l := range []mlxLayout{
		{"language_model.model.", "language_model.lm_head."},
		{"thinker.language_model.model.", "thinker.language_model.lm_head."},
		{"model.language_model.", "lm_head."},
		{"thinker.model.", "thinker.lm_head."},
	} {
		t.Run(strings.TrimSuffix(l.model, "."), func(t *testing.T) {
			dir := t.TempDir()
			rows := release.DecoderTensors(src.Config.Thinker.Text)
			mlxName := map[string]string{} // row name -> stored name
			var ts []*weights.Tensor
			for _, row := range rows {
				name := strings.Replace(row.Name, ".mlp.experts.*.", ".mlp.switch_mlp.", 1)
				if rest, ok := strings.CutPrefix(name, release.DecoderPrefix); ok {
					name = l.model + rest
				} else {
					name = l.lmHead + strings.TrimPrefix(name, "thinker.lm_head.")
				}
				mlxName[row.Name] = name
				w, _, err := release.Lookup(src.Weights, row)
				if err != nil {
					t.Fatal(err)
				}
				if len(row.Shape) == 1 || row.Role == release.RoleOutput {
					ts = append(ts, &weights.Tensor{Name: name, Type: w.Type, Shape: w.Shape, Data: w.Data})
					continue
				}
				// Packed 4-bit codes and bf16 scales and biases (zeros: the
				// values are the weights package's business).
				lead, cols := row.Shape[:len(row.Shape)-1], row.Shape[len(row.Shape)-1]
				n := 1
				for _, d := range lead {
					n *= d
				}
				mod := strings.TrimSuffix(name, ".weight")
				ts = append(ts,
					&weights.Tensor{Name: name, Type: quant.U32, Shape: append(append([]int{}, lead...), cols/8), Data: make([]byte, 4*n*cols/8)},
					&weights.Tensor{Name: mod + ".scales", Type: quant.BF16, Shape: append(append([]int{}, lead...), cols/g), Data: make([]byte, 2*n*cols/g)},
					&weights.Tensor{Name: mod + ".biases", Type: quant.BF16, Shape: append(append([]int{}, lead...), cols/g), Data: make([]byte, 2*n*cols/g)})
			}
			ts = append(ts, f32("talker.codec_head.weight", 1), f32("code2wav.code_embedding.weight", 2))
			if err := weights.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
				t.Fatal(err)
			}
			cfg["quantization"] = map[string]any{"group_size": g, "bits": 4, strings.TrimSuffix(l.lmHead, "."): false}
			b, _ := json.Marshal(cfg)
			os.WriteFile(filepath.Join(dir, release.ConfigFile), b, 0o644)
			for _, f := range []string{release.HeadWeightsFile, release.HeadConfigFile} {
				b, _ := os.ReadFile(filepath.Join(fixtureTiny, f))
				os.WriteFile(filepath.Join(dir, f), b, 0o644)
			}

			r, err := release.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Format != release.FormatMLX || r.Config.Thinker.Text != src.Config.Thinker.Text || r.Config.Head == nil {
				t.Fatalf("format %s, config %+v", r.Format, r.Config)
			}
			if r.Weights.Has("talker.codec_head.weight") || r.Weights.Has("code2wav.code_embedding.weight") || !r.Weights.Has("memory_projection.weight") {
				t.Error("speech modules kept or head missing")
			}
			for _, row := range rows {
				w, names, err := release.Lookup(r.Weights, row)
				if err != nil {
					t.Fatal(err)
				}
				stored, _ := r.Weights.Tensor(mlxName[row.Name])
				if w != stored || !reflect.DeepEqual(names, []string{mlxName[row.Name]}) || !reflect.DeepEqual(w.Shape, row.Shape) {
					t.Errorf("%s: found %v, shape %v; want %s", row.Name, names, w.Shape, mlxName[row.Name])
				}
				quantized := len(row.Shape) > 1 && row.Role != release.RoleOutput
				if quantized != (w.Type == quant.MLXAffine4) {
					t.Errorf("%s: %s", row.Name, w.Type)
				}
				if !quantized {
					orig, _, _ := release.Lookup(src.Weights, row)
					if !bytes.Equal(orig.Data, w.Data) {
						t.Errorf("%s: bytes differ from the release", row.Name)
					}
				}
			}
		})
	}
}

func TestTowerOf(t *testing.T) {
	for name, want := range map[string]string{
		"thinker.visual.blocks.0.attn.qkv.weight":       "vision",
		"visual.blocks.0.attn.qkv.weight":               "vision",
		"vision_tower.blocks.0.attn.qkv.weight":         "vision",
		"thinker.audio_tower.layers.0.fc1.weight":       "audio",
		"audio_tower.layers.0.fc1.weight":               "audio",
		"thinker.model.layers.0.mlp.gate.weight":        "",
		"language_model.model.layers.0.mlp.gate.weight": "",
		"layers.0.norm1.weight":                         "",
		"blk.0.attn_q.weight":                           "",
	} {
		if got := release.TowerOf(name); got != want {
			t.Errorf("TowerOf(%q) = %q, want %q", name, got, want)
		}
	}
}
