package release_test

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
)

// Fixtures of these tests.
const (
	fixtureTiny       = "../tinymodel/release"                  // the clef-tiny release (engine/tinymodel embeds it)
	fixtureTinyBF16   = "../../testdata/clef-tiny/release-bf16" // the same model in bf16
	fixtureOmniConfig = "../../testdata/omni/config.json"
	fixtureOmniFile   = "../../testdata/omni/model.safetensors"
	fixtureGGUFDir    = "../../testdata/qwen3moe/"
)

// tinyText is the clef-tiny decoder (thinker_config.text_config of
// testdata/omni/config.json).
var tinyText = release.Text{
	Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 8, TopK: 2, ExpertFFN: 32, Intermediate: 128,
	Vocab: 512, MaxPositions: 65536, NormEps: 1e-6, RopeTheta: 1e6, MRoPESections: [3]int{4, 2, 2}, MRoPEInterleaved: true, NormTopK: true,
}

func TestParseThinkerOmni(t *testing.T) {
	good, err := os.ReadFile(fixtureOmniConfig)
	if err != nil {
		t.Fatal(err)
	}
	th, err := release.ParseThinker(good)
	if err != nil {
		t.Fatal(err)
	}
	if th.Text != tinyText {
		t.Errorf("text config %+v, want %+v", th.Text, tinyText)
	}
	wantVision := release.Vision{Depth: 2, Hidden: 32, Heads: 2, Intermediate: 64, HiddenAct: "gelu_pytorch_tanh", InChannels: 3, PatchSize: 16,
		TemporalPatchSize: 2, SpatialMergeSize: 2, OutHidden: 64, NumPositionEmbeddings: 16, DeepstackVisualIndexes: []int{0, 1}}
	if th.Vision == nil || !reflect.DeepEqual(*th.Vision, wantVision) {
		t.Errorf("vision config %+v, want %+v", th.Vision, wantVision)
	}
	wantAudio := release.Audio{MelBins: 128, DModel: 32, Layers: 2, Heads: 2, FFN: 64, Activation: "gelu", DownsampleHidden: 16, OutputDim: 64,
		NWindow: 50, NWindowInfer: 800, ConvChunkSize: 500, MaxSourcePositions: 1500}
	if th.Audio == nil || *th.Audio != wantAudio {
		t.Errorf("audio config %+v, want %+v", th.Audio, wantAudio)
	}
	if th.Tokens.Image == 0 || th.Tokens.AudioStart == 0 || th.Tokens.VisionEnd == 0 || th.PositionIDPerSeconds <= 0 {
		t.Errorf("tokens %+v, position_id_per_seconds %v", th.Tokens, th.PositionIDPerSeconds)
	}

	// A bare thinker config and a plain text config give the same decoder,
	// with no towers.
	text := `{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
		"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 128, "vocab_size": 512,
		"max_position_embeddings": 65536, "rope_scaling": {"mrope_section": [4, 2, 2]}}`
	for _, doc := range []string{text, `{"text_config": ` + text + `}`, `{"thinker_config": {"text_config": ` + text + `}}`} {
		th, err := release.ParseThinker([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if th.Text != tinyText || th.Vision != nil || th.Audio != nil || th.PositionIDPerSeconds != 13 {
			t.Errorf("%.40s...: %+v", doc, th)
		}
	}

	// Defaults: head_dim = hidden/heads, kv heads = heads, eps 1e-6, theta
	// 1e6, normalized top-k, plain RoPE.
	th, err = release.ParseThinker([]byte(`{"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
		"num_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 8, "vocab_size": 10}`))
	if err != nil {
		t.Fatal(err)
	}
	want := release.Text{Hidden: 64, Layers: 1, Heads: 4, KVHeads: 4, HeadDim: 16, Experts: 4, TopK: 1, ExpertFFN: 8, Vocab: 10,
		NormEps: 1e-6, RopeTheta: 1e6, NormTopK: true}
	if th.Text != want {
		t.Errorf("defaults %+v, want %+v", th.Text, want)
	}
	// rope_parameters stands for rope_scaling; its theta applies when the
	// top-level one is absent; interleaving can be turned off.
	th, err = release.ParseThinker([]byte(`{"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "rms_norm_eps": 1e-5,
		"num_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 8, "vocab_size": 10, "norm_topk_prob": false,
		"rope_parameters": {"rope_theta": 5e5, "mrope_section": [4, 2, 2], "mrope_interleaved": false}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := th.Text; c.RopeTheta != 5e5 || c.MRoPESections != [3]int{4, 2, 2} || c.MRoPEInterleaved || c.NormTopK || c.NormEps != 1e-5 {
		t.Errorf("rope_parameters: %+v", c)
	}
}

func TestParseThinkerErrors(t *testing.T) {
	good, err := os.ReadFile(fixtureOmniConfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ json, want string }{
		"malformed":     {`{"thinker_config": `, "config.json"},
		"empty":         {`{}`, "hidden_size"},
		"absurd":        {strings.Replace(string(good), `"hidden_size": 64`, `"hidden_size": 99999999999`, 1), "hidden_size"},
		"negative":      {strings.Replace(string(good), `"num_key_value_heads": 2`, `"num_key_value_heads": -2`, 1), "num_key_value_heads"},
		"gqa":           {strings.Replace(string(good), `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1), "kv heads"},
		"topk":          {strings.Replace(string(good), `"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`, 1), "top-9"},
		"mrope":         {strings.Replace(string(good), "4,\n          2,\n          2", "4,\n          2,\n          3", 1), "mrope_section"},
		"dense layers":  {strings.Replace(string(good), `"mlp_only_layers": []`, `"mlp_only_layers": [1]`, 1), "mlp_only_layers"},
		"wrong type":    {strings.Replace(string(good), `"hidden_size": 64`, `"hidden_size": "64"`, 1), "hidden_size"},
		"sparse step":   {strings.Replace(string(good), `"decoder_sparse_step": 1`, `"decoder_sparse_step": 2`, 1), "decoder_sparse_step"},
		"shared expert": {strings.Replace(string(good), `"shared_expert_intermediate_size": 0`, `"shared_expert_intermediate_size": 8`, 1), "shared expert"},
		"vision heads":  {strings.Replace(string(good), `"num_heads": 2`, `"num_heads": 3`, 1), "vision_config"},
		"audio heads":   {strings.Replace(string(good), `"d_model": 32`, `"d_model": 33`, 1), "audio_config"},
		"deepstack":     {strings.Replace(string(good), "\"deepstack_visual_indexes\": [\n        0,\n        1", "\"deepstack_visual_indexes\": [\n        0,\n        2", 1), "deepstack"},
	} {
		if tc.json == string(good) {
			t.Errorf("%s: the replacement did not apply", name)
			continue
		}
		_, err := release.ParseThinker([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, tc.want)
		}
	}
}

func TestReadConfigGGUF(t *testing.T) {
	c, err := release.ReadConfig(fixtureGGUFDir + "tiny256-q4_k_m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	want := release.Text{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Experts: 8, TopK: 2, ExpertFFN: 256, Intermediate: 256,
		Vocab: 256, MaxPositions: 4096, NormEps: c.Thinker.Text.NormEps, RopeTheta: 1e6, NormTopK: true}
	if c.Thinker.Text != want || math.Abs(float64(c.Thinker.Text.NormEps)-1e-6) > 1e-12 {
		t.Errorf("config %+v, want %+v", c.Thinker.Text, want)
	}
	if c.Head != nil || c.Processor != nil || c.Thinker.Vision != nil || c.Thinker.Audio != nil {
		t.Errorf("a llama.cpp GGUF has only a decoder: %+v", c)
	}
	if _, err := release.ReadConfig(fixtureGGUFDir + "README.md"); err == nil {
		t.Error("README.md read as a config")
	}
}

func TestReadConfigDir(t *testing.T) {
	c, err := release.ReadConfig(fixtureTiny)
	if err != nil {
		t.Fatal(err)
	}
	if c.Thinker.Text != tinyText {
		t.Errorf("text %+v", c.Thinker.Text)
	}
	wantHead := release.Head{HiddenSize: 64, Width: 32, RoutingLayers: 2, Layers: 2, Heads: 4, Feedforward: 64}
	if c.Head == nil || *c.Head != wantHead {
		t.Errorf("head %+v, want %+v", c.Head, wantHead)
	}
	p := c.Processor
	if p == nil || p.Image.PatchSize != 16 || p.Image.MergeSize != 2 || p.Image.MaxPixels != 12845056 || len(p.Image.ImageMean) != 3 ||
		p.Audio.FeatureSize != 128 || p.Audio.SamplingRate != 16000 || p.Audio.HopLength != 160 || p.Audio.NFFT != 400 || len(p.Raw) == 0 {
		t.Errorf("processor %+v", p)
	}
	// A file of a directory reads the directory's configuration.
	f, err := release.ReadConfig(fixtureOmniFile)
	if err != nil {
		t.Fatal(err)
	}
	if f.Thinker.Text != tinyText || f.Head != nil {
		t.Errorf("omni: %+v", f)
	}
	if _, err := release.ReadConfig(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json is missing") {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := release.ReadConfig(fixtureTiny + "/nope"); err == nil {
		t.Error("missing path accepted")
	}
}

// FuzzParseThinker: whatever the bytes, ParseThinker never panics, and a
// configuration it accepts is valid (sizes in range, towers consistent) and
// has a tensor table of positive shapes.
func FuzzParseThinker(f *testing.F) {
	for _, p := range []string{fixtureOmniConfig, fixtureTiny + "/config.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"text_config": {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "num_experts": 2,
		"num_experts_per_tok": 1, "moe_intermediate_size": 4, "vocab_size": 3, "rope_scaling": {"mrope_section": [1, 1, 0]}}}`))
	f.Add([]byte(`{"thinker_config": {"text_config": null, "vision_config": {"depth": 1}, "audio_config": {}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		th, err := release.ParseThinker(b)
		if err != nil {
			if th != (release.Thinker{}) {
				t.Fatalf("error %v with a non-zero result %+v", err, th)
			}
			return
		}
		c := th.Text
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid text config: %v", err)
		}
		if c.Heads%c.KVHeads != 0 || c.HeadDim%2 != 0 || c.TopK > c.Experts || !(c.NormEps > 0) || !(c.RopeTheta > 0) {
			t.Fatalf("accepted %+v", c)
		}
		if s := c.MRoPESections; s != [3]int{} && s[0]+s[1]+s[2] != c.HeadDim/2 {
			t.Fatalf("mrope sections %v for head_dim %d", s, c.HeadDim)
		}
		if v := th.Vision; v != nil && (v.Heads <= 0 || v.Hidden%v.Heads != 0 || v.Depth <= 0) {
			t.Fatalf("accepted vision config %+v", v)
		}
		if a := th.Audio; a != nil && (a.Heads <= 0 || a.DModel%a.Heads != 0) {
			t.Fatalf("accepted audio config %+v", a)
		}
		if c.Layers <= 16 && c.Experts <= 1024 {
			for _, r := range release.DecoderTensors(c) {
				for _, d := range r.Shape {
					if d <= 0 {
						t.Fatalf("%s has shape %v", r.Name, r.Shape)
					}
				}
			}
		}
	})
}
