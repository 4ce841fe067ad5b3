package release_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// A release directory opens with its configuration files, the thinker's
// tensors (talker.* and code2wav.* left in their shards) and the head's.
func TestOpenReleaseDir(t *testing.T) {
	for _, dir := range []string{fixtureTiny, fixtureTinyBF16} {
		r, err := release.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.Format != release.FormatRelease || r.Path != dir || r.Backbone != nil || r.Companion != nil {
			t.Errorf("%s: format %s", dir, r.Format)
		}
		if r.Config.Thinker.Text != tinyText || r.Config.Head == nil || r.Config.Processor == nil || r.Config.Thinker.Vision == nil {
			t.Errorf("%s: config %+v", dir, r.Config)
		}
		for _, f := range []string{release.ConfigFile, release.HeadConfigFile, release.ProcessorConfigFile} {
			want, _ := os.ReadFile(filepath.Join(dir, f))
			if !bytes.Equal(r.Files[f], want) {
				t.Errorf("%s: %s not kept verbatim", dir, f)
			}
		}
		if _, ok := r.Files[release.PreprocessorFile]; ok || len(r.Files) != 3 {
			t.Errorf("%s: files %d", dir, len(r.Files))
		}
		var thinker, head int
		for _, n := range r.Weights.Names() {
			switch {
			case strings.HasPrefix(n, release.ThinkerPrefix):
				thinker++
			case strings.HasPrefix(n, release.TalkerPrefix), strings.HasPrefix(n, release.Code2WavPrefix):
				t.Errorf("skipped prefix loaded: %s", n)
			default:
				head++
			}
		}
		if thinker != 159 || head != 86 {
			t.Errorf("%s: %d thinker and %d head tensors, want 159 and 86", dir, thinker, head)
		}
		sc, err := r.Weights.Tensor("residual_gate")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := weights.Float32(sc); err != nil || len(v) != 1 || math.Abs(float64(v[0])-0.6) > 1e-6 {
			t.Errorf("residual_gate = %v, %v; want [0.6]", v, err)
		}
		emb, _ := r.Weights.Tensor("thinker.model.embed_tokens.weight")
		if want := map[string]quant.Type{fixtureTiny: quant.F32, fixtureTinyBF16: quant.BF16}[dir]; emb.Type != want {
			t.Errorf("%s: embedding %s", dir, emb.Type)
		}
		tok, err := r.Tokenizer()
		if err != nil {
			t.Fatal(err)
		}
		if ids := tok.Encode("user"); len(ids) != 1 || ids[0] != 375 {
			t.Errorf("%s: tokenizer: %v", dir, ids)
		}
	}
	for _, c := range []struct {
		name string
		keep bool
		err  bool
	}{{"thinker.model.norm.weight", true, false}, {"talker.codec_head.weight", false, false}, {"code2wav.x", false, false}, {"vision.w", false, true}, {"memory_projection.weight", false, true}} {
		keep, err := release.KeepThinker(c.name)
		if keep != c.keep || (err != nil) != c.err {
			t.Errorf("KeepThinker(%s) = %v, %v", c.name, keep, err)
		}
	}
}

// A .safetensors file opens with the config.json beside it.
func TestOpenSafetensorsFile(t *testing.T) {
	r, err := release.Open(fixtureOmniFile)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Format != release.FormatSafetensors || r.Config.Thinker.Text != tinyText || r.Config.Head != nil {
		t.Errorf("format %s, config %+v", r.Format, r.Config)
	}
	for _, row := range release.DecoderTensors(r.Config.Thinker.Text) {
		if _, _, err := release.Lookup(r.Weights, row); err != nil {
			t.Error(err)
		}
	}
}

// stFile is a one-tensor safetensors file.
func stFile(name string) []byte {
	h, _ := json.Marshal(map[string]any{name: map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4}}})
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(make([]byte, 4))
	return b.Bytes()
}

func TestOpenErrors(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join(fixtureTiny, release.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noConfig := filepath.Dir(write("noconfig/model.safetensors", stFile("thinker.model.norm.weight")))
	write("foreign/"+release.ConfigFile, cfg)
	foreign := filepath.Dir(write("foreign/model.safetensors", stFile("vision.w")))
	badCfg := filepath.Dir(write("badcfg/"+release.ConfigFile, []byte(`{"thinker_config": {"text_config": {"hidden_size": 0}}}`)))
	write("badhead/"+release.ConfigFile, cfg)
	badHead := filepath.Dir(write("badhead/"+release.HeadConfigFile, []byte(`{"hidden_size": 64, "width": 32, "heads": 4, "feedforward": 64, "extra": 1}`)))
	lone := write("lone/model.safetensors", stFile("thinker.model.norm.weight"))
	for _, c := range []struct {
		name, path string
		want       []string
	}{
		{"missing", filepath.Join(dir, "nope"), []string{"nope"}},
		{"no config.json", noConfig, []string{"config.json is missing", noConfig}},
		{"safetensors without config.json", lone, []string{"config.json is missing"}},
		{"companion", write("m.head.gguf", nil), []string{"companion", "m.gguf"}},
		{"unknown extension", write("model.bin", []byte("x")), []string{"model.bin", ".gguf", ".safetensors"}},
		{"foreign prefix", foreign, []string{`"vision.w"`}},
		{"bad config", badCfg, []string{"hidden_size"}},
		{"bad head config", badHead, []string{release.HeadConfigFile, "extra"}},
		{"not a GGUF", write("x.gguf", []byte("GGUF but not really")), []string{"x.gguf"}},
	} {
		r, err := release.Open(c.path)
		if err == nil {
			r.Close()
			t.Errorf("%s: opened", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
}
