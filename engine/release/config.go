package release

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/clefrt/clef/internal/untrusted"
)

// Config is the one typed configuration of a model: the thinker (text
// decoder, towers, special tokens), the joint head and the processor.
// Every size comes from the model's files; the few defaults are the
// reference classes' and are applied in one place (ParseConfig,
// TextFromGGUF).
type Config struct {
	Thinker Thinker
	// Head is joint_head_config.json; nil for a model without a head (a
	// bare decoder checkpoint or a llama.cpp GGUF).
	Head *Head
	// Processor is processor_config.json (or preprocessor_config.json);
	// nil when the model has none.
	Processor *Processor
}

// Thinker is thinker_config: the composed model the head reads.
type Thinker struct {
	Text   Text
	Vision *Vision // nil when the configuration has no vision tower
	Audio  *Audio  // nil when the configuration has no audio tower
	Tokens Tokens
	// PositionIDPerSeconds converts media time to M-RoPE temporal positions.
	PositionIDPerSeconds float64
}

// Tokens are the special token ids of thinker_config (0 when absent).
type Tokens struct {
	Image       int `json:"image_token_id"`
	Video       int `json:"video_token_id"`
	Audio       int `json:"audio_token_id"`
	VisionStart int `json:"vision_start_token_id"`
	VisionEnd   int `json:"vision_end_token_id"`
	AudioStart  int `json:"audio_start_token_id"`
	AudioEnd    int `json:"audio_end_token_id"`
}

// Text holds the text decoder's hyper-parameters (thinker_config.text_config).
type Text struct {
	Hidden       int     // hidden_size
	Layers       int     // num_hidden_layers
	Heads        int     // num_attention_heads
	KVHeads      int     // num_key_value_heads (default: Heads)
	HeadDim      int     // head_dim (default: Hidden/Heads)
	Experts      int     // num_experts
	TopK         int     // num_experts_per_tok
	ExpertFFN    int     // moe_intermediate_size
	Intermediate int     // intermediate_size: dense MLP size, unused when every layer is MoE (0 if absent)
	Vocab        int     // vocab_size
	MaxPositions int     // max_position_embeddings (0 if absent)
	NormEps      float32 // rms_norm_eps (default 1e-6)
	RopeTheta    float64 // rope_theta (default 1e6)
	// MRoPESections is rope_scaling.mrope_section (zero for plain RoPE);
	// MRoPEInterleaved selects the Qwen3-VL/Omni interleaved layout.
	MRoPESections    [3]int
	MRoPEInterleaved bool
	NormTopK         bool // norm_topk_prob (default true)
}

// Vision is thinker_config.vision_config (the ViT), as the tower reads it.
type Vision struct {
	Depth                  int    `json:"depth"`
	Hidden                 int    `json:"hidden_size"`
	Heads                  int    `json:"num_heads"`
	Intermediate           int    `json:"intermediate_size"`
	HiddenAct              string `json:"hidden_act"`
	InChannels             int    `json:"in_channels"`
	PatchSize              int    `json:"patch_size"`
	TemporalPatchSize      int    `json:"temporal_patch_size"`
	SpatialMergeSize       int    `json:"spatial_merge_size"`
	OutHidden              int    `json:"out_hidden_size"`
	NumPositionEmbeddings  int    `json:"num_position_embeddings"`
	DeepstackVisualIndexes []int  `json:"deepstack_visual_indexes"`
}

// Audio is thinker_config.audio_config (the Whisper-style encoder).
type Audio struct {
	MelBins            int    `json:"num_mel_bins"`
	DModel             int    `json:"d_model"`
	Layers             int    `json:"encoder_layers"`
	Heads              int    `json:"encoder_attention_heads"`
	FFN                int    `json:"encoder_ffn_dim"`
	Activation         string `json:"activation_function"`
	DownsampleHidden   int    `json:"downsample_hidden_size"`
	OutputDim          int    `json:"output_dim"`
	NWindow            int    `json:"n_window"`
	NWindowInfer       int    `json:"n_window_infer"`
	ConvChunkSize      int    `json:"conv_chunksize"`
	MaxSourcePositions int    `json:"max_source_positions"`
	ScaleEmbedding     bool   `json:"scale_embedding"`
}

// Head is joint_head_config.json: the constructor arguments of the
// reference JointSchemaHead.
type Head struct {
	HiddenSize    int `json:"hidden_size"`    // the decoder's hidden_size
	Width         int `json:"width"`          // head width
	RoutingLayers int `json:"routing_layers"` // evidence-routing layers
	Layers        int `json:"layers"`         // decoder layers over the fields
	Heads         int `json:"heads"`          // attention heads in every attention block
	Feedforward   int `json:"feedforward"`    // feed-forward inner size
	// Dropout is accepted (some ports write it) and ignored: inference only.
	Dropout float64 `json:"dropout,omitempty"`
}

// Processor is what the runtime reads of processor_config.json: the image
// processor and the audio feature extractor (preprocessor_config.json holds
// the same keys flat).
type Processor struct {
	Image ImageProcessor  `json:"image_processor"`
	Audio AudioProcessor  `json:"feature_extractor"`
	Raw   json.RawMessage `json:"-"`
}

// ImageProcessor is the Qwen2-VL image processor's settings.
type ImageProcessor struct {
	PatchSize         int       `json:"patch_size"`
	TemporalPatchSize int       `json:"temporal_patch_size"`
	MergeSize         int       `json:"merge_size"`
	MinPixels         int       `json:"min_pixels"`
	MaxPixels         int       `json:"max_pixels"`
	ImageMean         []float64 `json:"image_mean"`
	ImageStd          []float64 `json:"image_std"`
	RescaleFactor     float64   `json:"rescale_factor"`
}

// AudioProcessor is the Whisper feature extractor's settings.
type AudioProcessor struct {
	FeatureSize  int     `json:"feature_size"`
	SamplingRate int     `json:"sampling_rate"`
	HopLength    int     `json:"hop_length"`
	ChunkLength  int     `json:"chunk_length"`
	NFFT         int     `json:"n_fft"`
	PaddingValue float64 `json:"padding_value"`
	Dither       float64 `json:"dither"`
}

// Limits: generous for any real model, small enough that a damaged file
// cannot ask for absurd allocations.
const (
	maxDim       = 1 << 24 // any size of the decoder or a tower
	maxHeadDim   = 1 << 16 // any size of the joint head
	maxHeadLayer = 256
)

// Defaults of the reference classes, applied when a key is absent.
const (
	defaultNormEps   = 1e-6
	defaultRopeTheta = 1e6
	// defaultPositionIDPerSeconds is the checkpoint's value (the transformers
	// class default, 25, is a Qwen2.5-Omni leftover).
	defaultPositionIDPerSeconds = 13
)

// textJSON is the JSON shape of a Qwen3-MoE text config.
type textJSON struct {
	HiddenSize        int       `json:"hidden_size"`
	NumHiddenLayers   int       `json:"num_hidden_layers"`
	NumAttentionHeads int       `json:"num_attention_heads"`
	NumKeyValueHeads  int       `json:"num_key_value_heads"`
	HeadDim           int       `json:"head_dim"`
	NumExperts        int       `json:"num_experts"`
	NumExpertsPerTok  int       `json:"num_experts_per_tok"`
	MoEIntermediate   int       `json:"moe_intermediate_size"`
	Intermediate      int       `json:"intermediate_size"`
	VocabSize         int       `json:"vocab_size"`
	MaxPositions      int       `json:"max_position_embeddings"`
	RMSNormEps        *float64  `json:"rms_norm_eps"`
	RopeTheta         *float64  `json:"rope_theta"`
	NormTopKProb      *bool     `json:"norm_topk_prob"`
	MLPOnlyLayers     []int     `json:"mlp_only_layers"`
	DecoderSparseStep *int      `json:"decoder_sparse_step"`
	SharedExpert      int       `json:"shared_expert_intermediate_size"`
	RopeScaling       *ropeJSON `json:"rope_scaling"`
	RopeParameters    *ropeJSON `json:"rope_parameters"`
}

type ropeJSON struct {
	MRoPESection     []int    `json:"mrope_section"`
	Interleaved      *bool    `json:"interleaved"`
	MRoPEInterleaved *bool    `json:"mrope_interleaved"`
	RopeTheta        *float64 `json:"rope_theta"`
}

// ParseThinker reads config.json: the Clef/Qwen3-Omni release layout
// (thinker_config with text_config, vision_config, audio_config), a bare
// thinker config (text_config at the top) or a plain Qwen3-MoE text config.
// The head and processor are not in it (see ParseHead, ParseProcessor).
func ParseThinker(data []byte) (Thinker, error) {
	var top struct {
		Thinker json.RawMessage `json:"thinker_config"`
		Text    json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return Thinker{}, fmt.Errorf("%s: %w", ConfigFile, untrusted.Wrap(err))
	}
	thinker := json.RawMessage(data)
	if len(top.Thinker) > 0 && string(top.Thinker) != "null" {
		thinker = top.Thinker
	}
	var tc struct {
		Text   json.RawMessage `json:"text_config"`
		Vision *Vision         `json:"vision_config"`
		Audio  *Audio          `json:"audio_config"`
		Tokens
		PositionIDPerSeconds *float64 `json:"position_id_per_seconds"`
	}
	if err := json.Unmarshal(thinker, &tc); err != nil {
		return Thinker{}, fmt.Errorf("%s: thinker_config: %w", ConfigFile, untrusted.Wrap(err))
	}
	text := json.RawMessage(data)
	if len(tc.Text) > 0 && string(tc.Text) != "null" {
		text = tc.Text
	}
	t := Thinker{Vision: tc.Vision, Audio: tc.Audio, Tokens: tc.Tokens, PositionIDPerSeconds: defaultPositionIDPerSeconds}
	if tc.PositionIDPerSeconds != nil {
		t.PositionIDPerSeconds = *tc.PositionIDPerSeconds
	}
	var err error
	if t.Text, err = parseText(text); err != nil {
		return Thinker{}, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	if err := t.validateTowers(); err != nil {
		return Thinker{}, fmt.Errorf("%s: %w", ConfigFile, err)
	}
	return t, nil
}

func parseText(raw []byte) (Text, error) {
	var tc textJSON
	if err := json.Unmarshal(raw, &tc); err != nil {
		return Text{}, fmt.Errorf("text config: %w", untrusted.Wrap(err))
	}
	c := Text{
		Hidden: tc.HiddenSize, Layers: tc.NumHiddenLayers, Heads: tc.NumAttentionHeads,
		KVHeads: tc.NumKeyValueHeads, HeadDim: tc.HeadDim, Experts: tc.NumExperts,
		TopK: tc.NumExpertsPerTok, ExpertFFN: tc.MoEIntermediate, Intermediate: tc.Intermediate,
		Vocab: tc.VocabSize, MaxPositions: tc.MaxPositions,
		NormEps: defaultNormEps, RopeTheta: defaultRopeTheta, NormTopK: true,
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
				return Text{}, fmt.Errorf("text config: mrope_section %s must have 3 entries", untrusted.Value(rs.MRoPESection))
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
		return Text{}, fmt.Errorf("text config: dense layers (mlp_only_layers %s) are not supported", untrusted.Value(tc.MLPOnlyLayers))
	}
	if tc.DecoderSparseStep != nil && *tc.DecoderSparseStep != 1 {
		return Text{}, fmt.Errorf("text config: decoder_sparse_step %d is not supported (every layer must be MoE)", *tc.DecoderSparseStep)
	}
	if tc.SharedExpert != 0 {
		return Text{}, fmt.Errorf("text config: a shared expert (size %d) is not supported", tc.SharedExpert)
	}
	c.fill()
	return c, c.Validate()
}

// fill applies the defaults that follow from other sizes.
func (c *Text) fill() {
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
}

// Validate checks that the sizes are positive, consistent and sane.
func (c Text) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"num_experts", c.Experts},
		{"num_experts_per_tok", c.TopK}, {"moe_intermediate_size", c.ExpertFFN}, {"vocab_size", c.Vocab},
	} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("text config: %s = %d is missing or out of range", f.name, f.v)
		}
	}
	if c.Intermediate < 0 || c.Intermediate > maxDim || c.MaxPositions < 0 || c.MaxPositions > maxDim {
		return fmt.Errorf("text config: intermediate_size %d or max_position_embeddings %d is out of range", c.Intermediate, c.MaxPositions)
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("text config: %d attention heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("text config: head_dim %d must be even", c.HeadDim)
	}
	if c.TopK > c.Experts {
		return fmt.Errorf("text config: top-%d of %d experts", c.TopK, c.Experts)
	}
	if !(c.NormEps > 0) || !(c.RopeTheta > 0) {
		return fmt.Errorf("text config: rms_norm_eps %v and rope_theta %v must be positive", c.NormEps, c.RopeTheta)
	}
	if s := c.MRoPESections; s != [3]int{} && (s[0] < 0 || s[1] < 0 || s[2] < 0 || s[0]+s[1]+s[2] != c.HeadDim/2) {
		return fmt.Errorf("text config: mrope_section %v does not sum to head_dim/2 = %d", s, c.HeadDim/2)
	}
	return nil
}

// validateTowers checks the sizes of the towers that are present.
func (t Thinker) validateTowers() error {
	if v := t.Vision; v != nil {
		for _, f := range []struct {
			name string
			v    int
		}{{"depth", v.Depth}, {"hidden_size", v.Hidden}, {"num_heads", v.Heads}, {"intermediate_size", v.Intermediate},
			{"patch_size", v.PatchSize}, {"temporal_patch_size", v.TemporalPatchSize}, {"spatial_merge_size", v.SpatialMergeSize},
			{"out_hidden_size", v.OutHidden}} {
			if f.v <= 0 || f.v > maxDim {
				return fmt.Errorf("vision_config: %s = %d is missing or out of range", f.name, f.v)
			}
		}
		if v.Hidden%v.Heads != 0 {
			return fmt.Errorf("vision_config: hidden_size %d is not a multiple of num_heads %d", v.Hidden, v.Heads)
		}
		for _, i := range v.DeepstackVisualIndexes {
			if i < 0 || i >= v.Depth {
				return fmt.Errorf("vision_config: deepstack index %d outside the %d blocks", i, v.Depth)
			}
		}
	}
	if a := t.Audio; a != nil {
		for _, f := range []struct {
			name string
			v    int
		}{{"num_mel_bins", a.MelBins}, {"d_model", a.DModel}, {"encoder_layers", a.Layers}, {"encoder_attention_heads", a.Heads},
			{"encoder_ffn_dim", a.FFN}, {"output_dim", a.OutputDim}} {
			if f.v <= 0 || f.v > maxDim {
				return fmt.Errorf("audio_config: %s = %d is missing or out of range", f.name, f.v)
			}
		}
		if a.DModel%a.Heads != 0 {
			return fmt.Errorf("audio_config: d_model %d is not a multiple of encoder_attention_heads %d", a.DModel, a.Heads)
		}
	}
	return nil
}

// ParseHead decodes and checks joint_head_config.json. Unknown keys are an
// error, as the reference constructor would reject them.
func ParseHead(data []byte) (Head, error) {
	var c Head
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Head{}, fmt.Errorf("%s: %w", HeadConfigFile, untrusted.Wrap(err))
	}
	if err := c.Validate(); err != nil {
		return Head{}, err
	}
	return c, nil
}

// Validate reports the first implausible value of the head's configuration.
func (c Head) Validate() error {
	for _, d := range []struct {
		name string
		v    int
	}{{"hidden_size", c.HiddenSize}, {"width", c.Width}, {"heads", c.Heads}, {"feedforward", c.Feedforward}} {
		if d.v <= 0 || d.v > maxHeadDim {
			return fmt.Errorf("%s: %s = %d, want 1..%d", HeadConfigFile, d.name, d.v, maxHeadDim)
		}
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"routing_layers", c.RoutingLayers}, {"layers", c.Layers}} {
		if d.v < 0 || d.v > maxHeadLayer {
			return fmt.Errorf("%s: %s = %d, want 0..%d", HeadConfigFile, d.name, d.v, maxHeadLayer)
		}
	}
	if c.Width%c.Heads != 0 {
		return fmt.Errorf("%s: width %d is not a multiple of heads %d", HeadConfigFile, c.Width, c.Heads)
	}
	if c.Dropout < 0 || c.Dropout >= 1 {
		return fmt.Errorf("%s: dropout = %g, want [0, 1)", HeadConfigFile, c.Dropout)
	}
	return nil
}

// ParseProcessor reads processor_config.json (nested image_processor and
// feature_extractor) or preprocessor_config.json (the same keys flat).
func ParseProcessor(data []byte) (*Processor, error) {
	p := &Processor{Raw: append(json.RawMessage(nil), data...)}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("processor config: %w", untrusted.Wrap(err))
	}
	_, nestedImg := probe["image_processor"]
	_, nestedAud := probe["feature_extractor"]
	if nestedImg || nestedAud {
		if err := json.Unmarshal(data, p); err != nil {
			return nil, fmt.Errorf("processor config: %w", untrusted.Wrap(err))
		}
	} else {
		if err := json.Unmarshal(data, &p.Image); err != nil {
			return nil, fmt.Errorf("processor config: %w", untrusted.Wrap(err))
		}
		if err := json.Unmarshal(data, &p.Audio); err != nil {
			return nil, fmt.Errorf("processor config: %w", untrusted.Wrap(err))
		}
	}
	return p, nil
}

// DefaultProcessor is the real release's preprocessor_config.json (spec
// §4.3), for a model whose files do not carry one (a GGUF from elsewhere):
// the Qwen2-VL image processor and the 128-bin Whisper feature extractor.
func DefaultProcessor() *Processor {
	return &Processor{
		Image: ImageProcessor{
			PatchSize: 16, TemporalPatchSize: 2, MergeSize: 2,
			MinPixels: 3136, MaxPixels: 12845056,
			ImageMean: []float64{0.5, 0.5, 0.5}, ImageStd: []float64{0.5, 0.5, 0.5},
			RescaleFactor: 1.0 / 255,
		},
		Audio: AudioProcessor{
			FeatureSize: 128, SamplingRate: 16000, HopLength: 160, ChunkLength: 300, NFFT: 400,
		},
	}
}
