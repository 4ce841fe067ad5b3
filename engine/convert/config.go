package convert

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/clefrt/clef/engine/weights"
)

// TextConfig holds the text backbone's hyper-parameters, read from the
// release config.json (thinker_config.text_config) or a GGUF's metadata.
type TextConfig struct {
	Layers         int
	Hidden         int
	Intermediate   int // dense MLP size (unused by an all-MoE model; written for llama.cpp)
	Heads, KVHeads int
	HeadDim        int
	RMSEps         float64
	RopeTheta      float64
	MaxPositions   int
	Experts, TopK  int
	ExpertFF       int
	Vocab          int
	MRopeSection   []int
	NormTopK       bool
	SharedExpertFF int
	DecoderSparse  int
	MLPOnlyLayers  []int
}

type textConfigJSON struct {
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	NumExperts            int      `json:"num_experts"`
	NumExpertsPerTok      int      `json:"num_experts_per_tok"`
	MoeIntermediateSize   int      `json:"moe_intermediate_size"`
	VocabSize             int      `json:"vocab_size"`
	NormTopKProb          *bool    `json:"norm_topk_prob"`
	SharedExpert          int      `json:"shared_expert_intermediate_size"`
	DecoderSparseStep     int      `json:"decoder_sparse_step"`
	MLPOnlyLayers         []int    `json:"mlp_only_layers"`
	RopeScaling           *ropeCfg `json:"rope_scaling"`
	RopeParameters        *ropeCfg `json:"rope_parameters"`
}

type ropeCfg struct {
	MRopeSection []int   `json:"mrope_section"`
	RopeTheta    float64 `json:"rope_theta"`
}

// ReadTextConfig reads the text config of a release or MLX directory's
// config.json (qwen3_omni_moe: thinker_config.text_config; a bare
// text_config or a flat Qwen3-MoE config are accepted too).
func ReadTextConfig(dir string) (*TextConfig, error) {
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var top struct {
		ThinkerConfig *struct {
			TextConfig json.RawMessage `json:"text_config"`
		} `json:"thinker_config"`
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %v", p, err)
	}
	raw := json.RawMessage(b)
	switch {
	case top.ThinkerConfig != nil && top.ThinkerConfig.TextConfig != nil:
		raw = top.ThinkerConfig.TextConfig
	case top.TextConfig != nil:
		raw = top.TextConfig
	}
	var c textConfigJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: text config: %v", p, err)
	}
	tc := &TextConfig{
		Layers: c.NumHiddenLayers, Hidden: c.HiddenSize, Intermediate: c.IntermediateSize,
		Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
		RMSEps: c.RMSNormEps, RopeTheta: c.RopeTheta, MaxPositions: c.MaxPositionEmbeddings,
		Experts: c.NumExperts, TopK: c.NumExpertsPerTok, ExpertFF: c.MoeIntermediateSize,
		Vocab: c.VocabSize, NormTopK: c.NormTopKProb == nil || *c.NormTopKProb,
		SharedExpertFF: c.SharedExpert, DecoderSparse: c.DecoderSparseStep, MLPOnlyLayers: c.MLPOnlyLayers,
	}
	for _, r := range []*ropeCfg{c.RopeScaling, c.RopeParameters} {
		if r == nil {
			continue
		}
		if len(r.MRopeSection) > 0 {
			tc.MRopeSection = r.MRopeSection
		}
		if tc.RopeTheta == 0 && r.RopeTheta != 0 {
			tc.RopeTheta = r.RopeTheta
		}
	}
	if tc.HeadDim == 0 && tc.Heads > 0 {
		tc.HeadDim = tc.Hidden / tc.Heads
	}
	if tc.DecoderSparse == 0 {
		tc.DecoderSparse = 1
	}
	if err := tc.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", p, err)
	}
	return tc, nil
}

// GGUFTextConfig reads the text config from a qwen3moe or qwen3vlmoe GGUF.
func GGUFTextConfig(f *weights.GGUFFile) (*TextConfig, error) {
	arch, err := f.Architecture()
	if err != nil {
		return nil, err
	}
	if arch != "qwen3moe" && arch != "qwen3vlmoe" {
		return nil, fmt.Errorf("%s: architecture %q is not qwen3moe or qwen3vlmoe", f.Path, arch)
	}
	u := func(k string) int {
		v, e := f.Uint(arch + "." + k)
		if e != nil && err == nil {
			err = e
		}
		return int(v)
	}
	fl := func(k string) float64 {
		v, e := f.Float(arch + "." + k)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	tc := &TextConfig{
		Layers: u("block_count"), Hidden: u("embedding_length"), Intermediate: u("feed_forward_length"),
		Heads: u("attention.head_count"), KVHeads: u("attention.head_count_kv"), HeadDim: u("attention.key_length"),
		RMSEps: fl("attention.layer_norm_rms_epsilon"), RopeTheta: fl("rope.freq_base"), MaxPositions: u("context_length"),
		Experts: u("expert_count"), TopK: u("expert_used_count"), ExpertFF: u("expert_feed_forward_length"),
		NormTopK: true, DecoderSparse: 1,
	}
	if err != nil {
		return nil, err
	}
	if v, ok := f.Get(arch + ".rope.dimension_sections"); ok {
		if s, ok := v.([]int32); ok {
			for _, x := range s {
				if x != 0 {
					tc.MRopeSection = append(tc.MRopeSection, int(x))
				}
			}
		}
	}
	if v, err := f.Uint(arch + ".vocab_size"); err == nil {
		tc.Vocab = int(v)
	}
	if err := tc.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", f.Path, err)
	}
	return tc, nil
}

// check rejects configs this converter cannot express as qwen3moe.
func (c *TextConfig) check() error {
	for _, v := range []struct {
		name string
		v    int
	}{{"num_hidden_layers", c.Layers}, {"hidden_size", c.Hidden}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"num_experts", c.Experts},
		{"num_experts_per_tok", c.TopK}, {"moe_intermediate_size", c.ExpertFF}} {
		if v.v <= 0 || v.v > 1<<20 {
			return fmt.Errorf("text config: %s = %d is missing or absurd", v.name, v.v)
		}
	}
	if c.TopK > c.Experts || c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("text config: inconsistent heads (%d/%d) or experts (%d of %d)", c.Heads, c.KVHeads, c.TopK, c.Experts)
	}
	if c.SharedExpertFF != 0 || c.DecoderSparse != 1 || len(c.MLPOnlyLayers) != 0 {
		return fmt.Errorf("text config: shared experts, dense layers or a sparse step other than 1 are not supported")
	}
	if c.RMSEps <= 0 || c.RopeTheta <= 0 {
		return fmt.Errorf("text config: rms_norm_eps %g or rope_theta %g missing", c.RMSEps, c.RopeTheta)
	}
	return nil
}
