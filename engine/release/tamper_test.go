package release_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// setKV returns an edit for weights.CopyGGUF that sets (or, with a nil
// value, removes) one metadata key.
func setKV(key string, value any) func([]weights.GGUFKV, []weights.GGUFTensorInfo) ([]weights.GGUFKV, []weights.GGUFTensorInfo) {
	return func(kv []weights.GGUFKV, ts []weights.GGUFTensorInfo) ([]weights.GGUFKV, []weights.GGUFTensorInfo) {
		var out []weights.GGUFKV
		for _, e := range kv {
			if e.Key != key {
				out = append(out, e)
			}
		}
		if value != nil {
			out = append(out, weights.GGUFKV{Key: key, Value: value})
		}
		return out, ts
	}
}

// TamperCases are backbone metadata (and one tensor) at odds with the
// companion's config.json or with the tensors, and what the error must say:
// the key and both values.
var tamperCases = []struct {
	name string
	edit func([]weights.GGUFKV, []weights.GGUFTensorInfo) ([]weights.GGUFKV, []weights.GGUFTensorInfo)
	want []string
}{
	{"block_count 0", setKV("qwen3moe.block_count", uint32(0)), []string{"qwen3moe.block_count = 0 is out of range"}},
	{"block_count 10^6", setKV("qwen3moe.block_count", uint32(1000000)), []string{"qwen3moe.block_count is 1000000 but the tensors hold 2 layers"}},
	{"block_count 1", setKV("qwen3moe.block_count", uint32(1)), []string{"qwen3moe.block_count is 1 but the tensors hold 2 layers"}},
	{"block_count a string", setKV("qwen3moe.block_count", "2"), []string{`"qwen3moe.block_count" = "2" is not a non-negative integer`}},
	{"no block_count", setKV("qwen3moe.block_count", nil), []string{`no metadata key "qwen3moe.block_count"`}},
	{"embedding_length 2^31", setKV("qwen3moe.embedding_length", uint32(1<<31)), []string{"qwen3moe.embedding_length = 2147483648 is out of range"}},
	{"embedding_length 32", setKV("qwen3moe.embedding_length", uint32(32)), []string{"qwen3moe.embedding_length is 32 but token_embd.weight has shape [512 64]"}},
	{"head_count 8", setKV("qwen3moe.attention.head_count", uint32(8)), []string{"qwen3moe.attention.head_count is 8 but blk.0.attn_q.weight has shape [64 64]: 4 heads of 16"}},
	{"head_count_kv 1", setKV("qwen3moe.attention.head_count_kv", uint32(1)), []string{"qwen3moe.attention.head_count_kv is 1 but blk.0.attn_k.weight has shape [32 64]: 2 heads of 16"}},
	{"head_count_kv 3", setKV("qwen3moe.attention.head_count_kv", uint32(3)), []string{"4 attention heads are not a multiple of 3 kv heads"}},
	{"value_length 32", setKV("qwen3moe.attention.value_length", uint32(32)), []string{"qwen3moe.attention.value_length = 32 differs from the head size 16"}},
	{"expert_count 4", setKV("qwen3moe.expert_count", uint32(4)), []string{"qwen3moe.expert_count is 4 but blk.0.ffn_gate_inp.weight has shape [8 64]"}},
	{"expert_feed_forward_length 64", setKV("qwen3moe.expert_feed_forward_length", uint32(64)), []string{"qwen3moe.expert_feed_forward_length is 64 but blk.0.ffn_gate_exps.weight has shape [8 32 64]"}},
	{"vocab_size 600", setKV("qwen3moe.vocab_size", uint32(600)), []string{"qwen3moe.vocab_size is 600 but token_embd.weight has shape [512 64]"}},
	{"expert_used_count 3", setKV("qwen3moe.expert_used_count", uint32(3)), []string{"qwen3moe.expert_used_count is 3 but config.json's num_experts_per_tok is 2"}},
	{"freq_base", setKV("qwen3moe.rope.freq_base", float32(10000)), []string{"qwen3moe.rope.freq_base is 10000 but config.json's rope_theta is 1e+06"}},
	{"rms eps", setKV("qwen3moe.attention.layer_norm_rms_epsilon", float32(1e-5)), []string{"qwen3moe.attention.layer_norm_rms_epsilon is 1e-05 but config.json's rms_norm_eps is 1e-06"}},
	{"expert_weights_norm", setKV("qwen3moe.expert_weights_norm", false), []string{"qwen3moe.expert_weights_norm is false but config.json's norm_topk_prob is true"}},
	{"context_length", setKV("qwen3moe.context_length", uint32(4096)), []string{"qwen3moe.context_length is 4096 but config.json's max_position_embeddings is 65536"}},
	{"feed_forward_length", setKV("qwen3moe.feed_forward_length", uint32(96)), []string{"qwen3moe.feed_forward_length is 96 but config.json's intermediate_size is 128"}},
	{"mrope sections", setKV("qwen3moe.rope.dimension_sections", []int32{2, 4, 2, 0}), []string{"qwen3moe.rope.dimension_sections is [2 4 2] but config.json's rope_scaling.mrope_section is [4 2 2]"}},
	{"mrope not interleaved", setKV("qwen3moe.rope.mrope_interleaved", false), []string{"qwen3moe.rope.mrope_interleaved is false but config.json's rope_scaling.mrope_interleaved is true"}},
	{"norm of the wrong size", func(kv []weights.GGUFKV, ts []weights.GGUFTensorInfo) ([]weights.GGUFKV, []weights.GGUFTensorInfo) {
		for i := range ts {
			if ts[i].Name == "blk.1.ffn_norm.weight" {
				ts[i].Dims = []uint64{32}
				ts[i].Data = ts[i].Data[:len(ts[i].Data)/2]
			}
		}
		return kv, ts
	}, []string{"blk.1.ffn_norm.weight has shape [32], the metadata wants [64]"}},
}

// Every inconsistency between a backbone's metadata, its companion's
// config.json and its tensors is an error naming the key and both values,
// when the pair is opened and when the backbone is opened alone.
func TestOpenGGUFTampered(t *testing.T) {
	r := openTiny(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	writeBackbone(t, good, r, r.Config.Thinker.Text)
	for _, tc := range tamperCases {
		p := filepath.Join(dir, "m.gguf")
		if err := weights.CopyGGUF(p, good, tc.edit); err != nil {
			t.Fatal(err)
		}
		os.Remove(release.CompanionPath(p))
		_, alone := release.Open(p)
		writeCompanion(t, release.CompanionPath(p), r, nil)
		_, paired := release.Open(p)
		for _, c := range []struct {
			what string
			err  error
		}{{"paired", paired}, {"alone", alone}} {
			if c.err == nil && c.what == "alone" && strings.Contains(tc.want[0], "config.json") {
				continue // nothing to compare without the companion's config.json
			}
			if c.err == nil {
				t.Errorf("%s (%s): opened", tc.name, c.what)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(c.err.Error(), w) {
					t.Errorf("%s (%s): error %q, want one saying %q", tc.name, c.what, c.err, w)
				}
			}
			if errors.Is(c.err, release.ErrNoConfig) {
				t.Errorf("%s (%s): %v is marked as no configuration", tc.name, c.what, c.err)
			}
			if len(c.err.Error()) > 400+2*len(p) {
				t.Errorf("%s (%s): error of %d bytes", tc.name, c.what, len(c.err.Error()))
			}
		}
	}
	// The untouched copy opens.
	p := filepath.Join(dir, "m.gguf")
	if err := weights.CopyGGUF(p, good, nil); err != nil {
		t.Fatal(err)
	}
	g, err := release.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
}

// Configuration files and metadata that quote their damage (unknown keys,
// absurd arrays, a NUL-filled architecture) give bounded, printable errors.
func TestCorruptConfigBounded(t *testing.T) {
	r := openTiny(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf")
	writeBackbone(t, p, r, r.Config.Thinker.Text)
	huge := strings.Repeat(`\u0000`, 20000) + strings.Repeat("k", 1000)
	layers := "[" + strings.Repeat("1,", 20000) + "1]"
	cfg := string(r.Files[release.ConfigFile])
	for name, files := range map[string]map[string][]byte{
		"head config key":  {release.HeadConfigFile: []byte(`{"` + huge + `": 1}`)},
		"config syntax":    {release.ConfigFile: []byte(`{"thinker_config": {"text_config": ` + huge)},
		"config type":      {release.ConfigFile: []byte(`{"thinker_config": {"text_config": {"hidden_size": "` + huge + `"}}}`)},
		"mlp_only_layers":  {release.ConfigFile: []byte(strings.Replace(cfg, `"mlp_only_layers": []`, `"mlp_only_layers": `+layers, 1))},
		"mrope_section":    {release.ConfigFile: []byte(strings.Replace(cfg, `"mrope_section": [`, `"mrope_section": `+layers[:len(layers)-1]+`,`, 1))},
		"processor config": {release.ProcessorConfigFile: []byte(`{"image_processor": {"patch_size": "` + huge + `"}}`)},
	} {
		for f, b := range files {
			if f == release.ConfigFile && string(b) == cfg {
				t.Fatalf("%s: replacement did not apply", name)
			}
		}
		writeCompanion(t, release.CompanionPath(p), r, files)
		_, err := release.Open(p)
		checkBounded(t, name, err, dir)
	}
	os.Remove(release.CompanionPath(p))
	q := filepath.Join(dir, "arch.gguf")
	if err := weights.CopyGGUF(q, p, setKV("general.architecture", strings.Repeat("\x00", 30000))); err != nil {
		t.Fatal(err)
	}
	_, err := release.Open(q)
	checkBounded(t, "architecture", err, dir)
}

func checkBounded(t *testing.T, name string, err error, dir string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: opened", name)
		return
	}
	msg := strings.ReplaceAll(err.Error(), dir, "DIR")
	if len(msg) > 512 || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }) {
		t.Errorf("%s: error of %d bytes: %.200q", name, len(msg), msg)
	}
}
