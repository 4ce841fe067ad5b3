// Package qwen3moe is the Qwen3-MoE text decoder of the Qwen3-Omni thinker,
// written once against backend.Backend: config, weight binding, and the
// forward pass in thinker.go. It never imports a backend implementation.
package qwen3moe

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/clefrt/clef/engine/weights"
)

// Config holds the decoder hyper-parameters (spec §2.1). Every size comes
// from the model's config.json or GGUF metadata; nothing is assumed.
type Config struct {
	Hidden    int     // hidden_size
	Layers    int     // num_hidden_layers
	Heads     int     // num_attention_heads
	KVHeads   int     // num_key_value_heads
	HeadDim   int     // head_dim
	Experts   int     // num_experts
	TopK      int     // num_experts_per_tok
	ExpertFFN int     // moe_intermediate_size
	Vocab     int     // vocab_size
	NormEps   float32 // rms_norm_eps
	RopeTheta float64 // rope_theta
	// MRoPESections is rope_scaling.mrope_section (zero for plain RoPE);
	// MRoPEInterleaved selects the Qwen3-VL interleaved layout.
	MRoPESections    [3]int
	MRoPEInterleaved bool
	NormTopK         bool // norm_topk_prob
}

// textConfig is the JSON shape of a Qwen3-MoE text config.
type textConfig struct {
	HiddenSize        int      `json:"hidden_size"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	NumExperts        int      `json:"num_experts"`
	NumExpertsPerTok  int      `json:"num_experts_per_tok"`
	MoEIntermediate   int      `json:"moe_intermediate_size"`
	VocabSize         int      `json:"vocab_size"`
	RMSNormEps        *float64 `json:"rms_norm_eps"`
	RopeTheta         *float64 `json:"rope_theta"`
	NormTopKProb      *bool    `json:"norm_topk_prob"`
	MLPOnlyLayers     []int    `json:"mlp_only_layers"`
	DecoderSparseStep *int     `json:"decoder_sparse_step"`
	SharedExpert      int      `json:"shared_expert_intermediate_size"`
	RopeScaling       *rope    `json:"rope_scaling"`
	RopeParameters    *rope    `json:"rope_parameters"`
}

type rope struct {
	MRoPESection     []int    `json:"mrope_section"`
	Interleaved      *bool    `json:"interleaved"`
	MRoPEInterleaved *bool    `json:"mrope_interleaved"`
	RopeTheta        *float64 `json:"rope_theta"`
}

// ParseConfig reads the decoder config from a config.json: the Clef/Qwen3-Omni
// release layout (thinker_config.text_config), a bare thinker config
// (text_config) or a plain Qwen3-MoE text config.
func ParseConfig(data []byte) (Config, error) {
	var top struct {
		Thinker *struct {
			Text json.RawMessage `json:"text_config"`
		} `json:"thinker_config"`
		Text json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, fmt.Errorf("qwen3moe: config.json: %w", err)
	}
	raw := json.RawMessage(data)
	switch {
	case top.Thinker != nil && len(top.Thinker.Text) > 0:
		raw = top.Thinker.Text
	case len(top.Text) > 0:
		raw = top.Text
	}
	var tc textConfig
	if err := json.Unmarshal(raw, &tc); err != nil {
		return Config{}, fmt.Errorf("qwen3moe: text config: %w", err)
	}
	c := Config{
		Hidden: tc.HiddenSize, Layers: tc.NumHiddenLayers, Heads: tc.NumAttentionHeads,
		KVHeads: tc.NumKeyValueHeads, HeadDim: tc.HeadDim, Experts: tc.NumExperts,
		TopK: tc.NumExpertsPerTok, ExpertFFN: tc.MoEIntermediate, Vocab: tc.VocabSize,
		NormEps: 1e-6, RopeTheta: 1e6, NormTopK: true,
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if tc.RMSNormEps != nil {
		c.NormEps = float32(*tc.RMSNormEps)
	}
	if tc.RopeTheta != nil {
		c.RopeTheta = *tc.RopeTheta
	}
	if tc.NormTopKProb != nil {
		c.NormTopK = *tc.NormTopKProb
	}
	rs := tc.RopeScaling
	if rs == nil {
		rs = tc.RopeParameters
	}
	if rs != nil {
		if rs.RopeTheta != nil && tc.RopeTheta == nil {
			c.RopeTheta = *rs.RopeTheta
		}
		if len(rs.MRoPESection) > 0 {
			if len(rs.MRoPESection) != 3 {
				return Config{}, fmt.Errorf("qwen3moe: mrope_section %v must have 3 entries", rs.MRoPESection)
			}
			copy(c.MRoPESections[:], rs.MRoPESection)
			// The Qwen3-Omni/VL code always uses the interleaved map.
			c.MRoPEInterleaved = true
			if rs.MRoPEInterleaved != nil {
				c.MRoPEInterleaved = *rs.MRoPEInterleaved
			} else if rs.Interleaved != nil {
				c.MRoPEInterleaved = *rs.Interleaved
			}
		}
	}
	if len(tc.MLPOnlyLayers) > 0 {
		return Config{}, fmt.Errorf("qwen3moe: dense layers (mlp_only_layers %v) are not supported", tc.MLPOnlyLayers)
	}
	if tc.DecoderSparseStep != nil && *tc.DecoderSparseStep != 1 {
		return Config{}, fmt.Errorf("qwen3moe: decoder_sparse_step %d is not supported (every layer must be MoE)", *tc.DecoderSparseStep)
	}
	if tc.SharedExpert != 0 {
		return Config{}, fmt.Errorf("qwen3moe: a shared expert (size %d) is not supported", tc.SharedExpert)
	}
	return c, c.Validate()
}

// maxDim bounds every size so that absurd configs fail early instead of
// allocating.
const maxDim = 1 << 24

// Validate checks that the sizes are positive, consistent and sane.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"num_experts", c.Experts},
		{"num_experts_per_tok", c.TopK}, {"moe_intermediate_size", c.ExpertFFN}, {"vocab_size", c.Vocab},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("qwen3moe: %s = %d is out of range", f.name, f.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("qwen3moe: %d attention heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("qwen3moe: head_dim %d must be even", c.HeadDim)
	}
	if c.TopK > c.Experts {
		return fmt.Errorf("qwen3moe: top-%d of %d experts", c.TopK, c.Experts)
	}
	if !(c.NormEps > 0) || !(c.RopeTheta > 0) {
		return fmt.Errorf("qwen3moe: rms_norm_eps %v and rope_theta %v must be positive", c.NormEps, c.RopeTheta)
	}
	if s := c.MRoPESections; s != [3]int{} && s[0]+s[1]+s[2] != c.HeadDim/2 {
		return fmt.Errorf("qwen3moe: mrope_section %v does not sum to head_dim/2 = %d", s, c.HeadDim/2)
	}
	return nil
}

// ReadConfig reads the decoder config of the model at path: a release
// directory (its config.json), a .safetensors file (the config.json beside
// it) or a .gguf file (its metadata).
func ReadConfig(path string) (Config, error) {
	if strings.HasSuffix(path, ".gguf") {
		f, err := weights.OpenGGUF(path)
		if err != nil {
			return Config{}, err
		}
		defer f.Close()
		return GGUFConfig(f)
	}
	dir := path
	if st, err := os.Stat(path); err != nil {
		return Config{}, fmt.Errorf("qwen3moe: %w", err)
	} else if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return Config{}, fmt.Errorf("qwen3moe: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	return c, nil
}

// GGUFConfig reads the decoder config from the metadata of a llama.cpp
// qwen3moe or qwen3vlmoe GGUF file (keys "<arch>.block_count", ...). The
// vocabulary size is the row count of token_embd.weight.
func GGUFConfig(f *weights.GGUFFile) (Config, error) {
	arch, err := f.Architecture()
	if err != nil {
		return Config{}, fmt.Errorf("qwen3moe: %w", err)
	}
	if arch != "qwen3moe" && arch != "qwen3vlmoe" {
		return Config{}, fmt.Errorf("qwen3moe: %s: architecture %q is not qwen3moe or qwen3vlmoe", f.Path, arch)
	}
	var c Config
	var errs []error
	u := func(key string) int {
		v, err := f.Uint(arch + "." + key)
		if err != nil {
			errs = append(errs, err)
		}
		if v > maxDim {
			v = maxDim + 1 // rejected by Validate
		}
		return int(v)
	}
	c.Layers = u("block_count")
	c.Hidden = u("embedding_length")
	c.Heads = u("attention.head_count")
	c.KVHeads = u("attention.head_count_kv")
	c.Experts = u("expert_count")
	c.TopK = u("expert_used_count")
	c.ExpertFFN = u("expert_feed_forward_length")
	if _, ok := f.Get(arch + ".attention.key_length"); ok {
		c.HeadDim = u("attention.key_length")
	} else if c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	eps, err := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if err != nil {
		errs = append(errs, err)
	}
	c.NormEps = float32(eps)
	c.RopeTheta = 10000
	if v, err := f.Float(arch + ".rope.freq_base"); err == nil {
		c.RopeTheta = v
	}
	c.NormTopK = true
	if v, ok := f.Get(arch + ".expert_weights_norm"); ok {
		if bv, ok := v.(bool); ok {
			c.NormTopK = bv
		}
	}
	if v, ok := f.Get(arch + ".rope.dimension_sections"); ok {
		var s []int
		switch a := v.(type) {
		case []int32:
			for _, x := range a {
				s = append(s, int(x))
			}
		case []uint32:
			for _, x := range a {
				s = append(s, int(x))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: rope.dimension_sections is %T", f.Path, v))
		}
		if len(s) >= 3 && (s[0] != 0 || s[1] != 0 || s[2] != 0) {
			copy(c.MRoPESections[:], s)
			c.MRoPEInterleaved = arch == "qwen3vlmoe" // llama.cpp's IMROPE
		}
	}
	for i := range f.Tensors {
		if f.Tensors[i].Name == "token_embd.weight" {
			if sh := f.Tensors[i].Shape(); len(sh) == 2 {
				c.Vocab = sh[0]
			}
		}
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("qwen3moe: %w", errs[0])
	}
	if c.Vocab == 0 {
		return Config{}, fmt.Errorf("qwen3moe: %s: no 2-D token_embd.weight", f.Path)
	}
	return c, c.Validate()
}
