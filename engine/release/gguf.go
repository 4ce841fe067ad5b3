package release

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/untrusted"
)

// GGUFArch is the llama.cpp architecture clef quantize writes for the text
// decoder; GGUFArchitectures are those whose tensors and metadata map onto
// it (qwen3vlmoe: llama.cpp's converter for Qwen3-VL/Omni MoE text).
const GGUFArch = "qwen3moe"

// GGUFArchitectures lists the llama.cpp architectures the decoder table reads.
var GGUFArchitectures = []string{"qwen3moe", "qwen3vlmoe"}

// IsDecoderArch reports whether arch is one of GGUFArchitectures.
func IsDecoderArch(arch string) bool { return slices.Contains(GGUFArchitectures, arch) }

// TextFromGGUF reads the decoder configuration from the metadata of a
// llama.cpp qwen3moe or qwen3vlmoe GGUF ("<arch>.block_count", ...), with
// the defaults of ParseThinker for absent optional keys. The vocabulary is
// <arch>.vocab_size, or else the row count of token_embd.weight. Every
// error names the metadata key and its value.
func TextFromGGUF(f *weights.GGUFFile) (Text, error) {
	arch, err := decoderArch(f)
	if err != nil {
		return Text{}, err
	}
	var errs []error
	u := func(key string, required bool) int {
		full := arch + "." + key
		if _, ok := f.Get(full); !ok && !required {
			return 0
		}
		v, err := f.Uint(full)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		lo := uint64(0)
		if required {
			lo = 1
		}
		if v < lo || v > maxDim {
			errs = append(errs, fmt.Errorf("%s: metadata %s = %d is out of range (%d to %d)", f.Path, full, v, lo, maxDim))
			return 0
		}
		return int(v)
	}
	c := Text{NormEps: defaultNormEps, RopeTheta: defaultRopeTheta, NormTopK: true}
	c.Layers = u("block_count", true)
	c.Hidden = u("embedding_length", true)
	c.Heads = u("attention.head_count", true)
	c.KVHeads = u("attention.head_count_kv", false)
	c.HeadDim = u("attention.key_length", false)
	valueLength := u("attention.value_length", false)
	c.Experts = u("expert_count", true)
	c.TopK = u("expert_used_count", true)
	c.ExpertFFN = u("expert_feed_forward_length", true)
	c.Intermediate = u("feed_forward_length", false)
	c.MaxPositions = u("context_length", false)
	c.Vocab = u("vocab_size", false)
	if _, ok := f.Get(arch + ".attention.layer_norm_rms_epsilon"); ok {
		v, err := f.Float(arch + ".attention.layer_norm_rms_epsilon")
		errs = append(errs, err)
		c.NormEps = float32(v)
	}
	if _, ok := f.Get(arch + ".rope.freq_base"); ok {
		v, err := f.Float(arch + ".rope.freq_base")
		errs = append(errs, err)
		c.RopeTheta = v
	}
	if v, ok := f.Get(arch + ".expert_weights_norm"); ok {
		if b, ok := v.(bool); ok {
			c.NormTopK = b
		} else {
			errs = append(errs, fmt.Errorf("%s: metadata %s.expert_weights_norm = %s is %T, not a bool", f.Path, arch, untrusted.Value(v), v))
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
			errs = append(errs, fmt.Errorf("%s: metadata %s.rope.dimension_sections = %s is %T, not an integer array", f.Path, arch, untrusted.Value(v), v))
		}
		if len(s) >= 3 && (s[0] != 0 || s[1] != 0 || s[2] != 0) {
			copy(c.MRoPESections[:], s)
			// llama.cpp's IMROPE for qwen3vlmoe; clef writes the flag.
			c.MRoPEInterleaved = arch == "qwen3vlmoe"
			if v, ok := f.Get(arch + ".rope.mrope_interleaved"); ok {
				b, ok := v.(bool)
				if !ok {
					errs = append(errs, fmt.Errorf("%s: metadata %s.rope.mrope_interleaved = %s is %T, not a bool", f.Path, arch, untrusted.Value(v), v))
				}
				c.MRoPEInterleaved = b
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return Text{}, err
		}
	}
	if c.Vocab == 0 {
		for i := range f.Tensors {
			if f.Tensors[i].Name == "token_embd.weight" {
				if sh := f.Tensors[i].Shape(); len(sh) == 2 {
					c.Vocab = sh[0]
				}
			}
		}
	}
	c.fill()
	if err := c.Validate(); err != nil {
		return Text{}, fmt.Errorf("%s: %s metadata: %w", f.Path, arch, err)
	}
	if valueLength != 0 && valueLength != c.HeadDim {
		return Text{}, fmt.Errorf("%s: metadata %s.attention.value_length = %d differs from the head size %d (%s.attention.key_length): clef needs them equal",
			f.Path, arch, valueLength, c.HeadDim, arch)
	}
	return c, nil
}

// decoderArch returns general.architecture of a decoder GGUF; ErrNoConfig
// when it is missing or not one of GGUFArchitectures.
func decoderArch(f *weights.GGUFFile) (string, error) {
	arch, err := f.Architecture()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoConfig, err)
	}
	if !IsDecoderArch(arch) {
		return "", fmt.Errorf("%w: %s: architecture %s is not one of %v", ErrNoConfig, f.Path, untrusted.Quote(arch), GGUFArchitectures)
	}
	return arch, nil
}

// ggufField is one setting of the decoder as GGUF metadata and config.json
// name it: the key (after "<arch>."), the configuration's key, and the
// value of each side, formatted.
type ggufField struct {
	key, config string
	value       func(Text) string
	// has reports whether the configuration side sets it (nil: always).
	has func(Text) bool
}

func intField(key, config string, v func(Text) int) ggufField {
	return ggufField{key: key, config: config, value: func(c Text) string { return strconv.Itoa(v(c)) }}
}

// decoderFields are the settings config.json and a backbone's metadata must
// agree on: every size of the tensor table and of the computation.
var decoderFields = []ggufField{
	intField("embedding_length", "hidden_size", func(c Text) int { return c.Hidden }),
	intField("block_count", "num_hidden_layers", func(c Text) int { return c.Layers }),
	intField("attention.head_count", "num_attention_heads", func(c Text) int { return c.Heads }),
	intField("attention.head_count_kv", "num_key_value_heads", func(c Text) int { return c.KVHeads }),
	intField("attention.key_length", "head_dim", func(c Text) int { return c.HeadDim }),
	intField("expert_count", "num_experts", func(c Text) int { return c.Experts }),
	intField("expert_used_count", "num_experts_per_tok", func(c Text) int { return c.TopK }),
	intField("expert_feed_forward_length", "moe_intermediate_size", func(c Text) int { return c.ExpertFFN }),
	intField("vocab_size", "vocab_size", func(c Text) int { return c.Vocab }),
	{key: "context_length", config: "max_position_embeddings", value: func(c Text) string { return strconv.Itoa(c.MaxPositions) },
		has: func(c Text) bool { return c.MaxPositions > 0 }},
	// clef quantize writes the larger of the dense and the expert size.
	{key: "feed_forward_length", config: "intermediate_size", value: func(c Text) string { return strconv.Itoa(max(c.Intermediate, c.ExpertFFN)) }},
	// GGUF holds float32: compare at that precision.
	{key: "attention.layer_norm_rms_epsilon", config: "rms_norm_eps", value: func(c Text) string { return fmt.Sprint(c.NormEps) }},
	{key: "rope.freq_base", config: "rope_theta", value: func(c Text) string { return fmt.Sprint(float32(c.RopeTheta)) }},
	{key: "expert_weights_norm", config: "norm_topk_prob", value: func(c Text) string { return strconv.FormatBool(c.NormTopK) }},
	{key: "rope.dimension_sections", config: "rope_scaling.mrope_section", value: func(c Text) string { return fmt.Sprint(c.MRoPESections) }},
	{key: "rope.mrope_interleaved", config: "rope_scaling.mrope_interleaved", value: func(c Text) string {
		return strconv.FormatBool(c.MRoPEInterleaved && c.MRoPESections != [3]int{})
	}},
}

// sameDecoder checks that the decoder of config.json (cfg) is the one the
// backbone's metadata describes (meta, read by TextFromGGUF from f): each
// setting the metadata holds (or, for the vocabulary, the embedding's rows)
// must equal the configuration's. The error names both keys and values.
func sameDecoder(cfg, meta Text, f *weights.GGUFFile) error {
	arch, err := decoderArch(f)
	if err != nil {
		return err
	}
	for _, d := range decoderFields {
		if d.has != nil && !d.has(cfg) {
			continue
		}
		key := arch + "." + d.key
		a, b := d.value(cfg), d.value(meta)
		if a == b {
			continue
		}
		if _, ok := f.Get(key); !ok {
			switch d.key {
			case "vocab_size":
				return fmt.Errorf("config.json's vocab_size %s but token_embd.weight has %s rows (no %s in the metadata)", a, b, key)
			case "attention.head_count_kv", "attention.key_length", "context_length", "feed_forward_length":
				continue // absent: the default follows from other sizes, compared on their own
			}
			return fmt.Errorf("config.json's %s is %s but %s is absent (%s by default)", d.config, a, key, b)
		}
		return fmt.Errorf("%s is %s but config.json's %s is %s", key, b, d.config, a)
	}
	return nil
}

// checkTensors checks a backbone's tensors against the decoder its
// metadata describes (meta, from TextFromGGUF): the number of layers the
// tensors hold, the sizes that can be read off the first layer's shapes,
// then the shape of every table row present. The error names the metadata
// key, its value, and the tensor and shape that contradict it.
func checkTensors(f *weights.GGUFFile, meta Text) error {
	arch, err := decoderArch(f)
	if err != nil {
		return err
	}
	shapes := map[string][]int{}
	layers := 0
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		shapes[ti.Name] = ti.Shape()
		if rest, ok := strings.CutPrefix(ti.Name, "blk."); ok {
			if n, _, ok := strings.Cut(rest, "."); ok {
				if l, err := strconv.Atoi(n); err == nil && l >= 0 && l < maxDim {
					layers = max(layers, l+1)
				}
			}
		}
	}
	if layers != meta.Layers {
		return fmt.Errorf("metadata %s.block_count is %d but the tensors hold %d layers (blk.0 to blk.%d)", arch, meta.Layers, layers, layers-1)
	}
	// Sizes read off one shape: which dimension of which tensor, and the
	// value the metadata gives it.
	for _, c := range []struct {
		key    string
		tensor string
		dim    int
		div    int // the dimension is the size times div
		want   int
	}{
		{"embedding_length", "token_embd.weight", 1, 1, meta.Hidden},
		{"vocab_size", "token_embd.weight", 0, 1, meta.Vocab},
		{"attention.key_length", "blk.0.attn_q_norm.weight", 0, 1, meta.HeadDim},
		{"attention.head_count", "blk.0.attn_q.weight", 0, meta.HeadDim, meta.Heads},
		{"attention.head_count_kv", "blk.0.attn_k.weight", 0, meta.HeadDim, meta.KVHeads},
		{"expert_count", "blk.0.ffn_gate_inp.weight", 0, 1, meta.Experts},
		{"expert_feed_forward_length", "blk.0.ffn_gate_exps.weight", 1, 1, meta.ExpertFFN},
	} {
		sh, ok := shapes[c.tensor]
		if !ok || c.dim >= len(sh) {
			continue
		}
		if sh[c.dim] != c.want*c.div {
			holds := ""
			if c.div != 1 {
				holds = fmt.Sprintf(": %d heads of %d", sh[c.dim]/c.div, c.div)
			}
			return fmt.Errorf("metadata %s.%s is %d but %s has shape %v%s", arch, c.key, c.want, c.tensor, sh, holds)
		}
	}
	for _, row := range DecoderTensors(meta) {
		sh, ok := shapes[row.GGUF]
		if ok && !slices.Equal(sh, row.Shape) {
			return fmt.Errorf("%s has shape %v, the metadata wants %v", row.GGUF, sh, row.Shape)
		}
	}
	return nil
}

// GGUFMetadata is the decoder's metadata as llama.cpp's qwen3moe reads it
// (and TextFromGGUF reads back), for a file whose embedding has vocab rows.
func (c Text) GGUFMetadata(vocab int) []weights.GGUFKV {
	a := GGUFArch + "."
	ctx := c.MaxPositions
	if ctx <= 0 {
		ctx = 65536
	}
	kv := []weights.GGUFKV{
		{Key: a + "block_count", Value: uint32(c.Layers)},
		{Key: a + "context_length", Value: uint32(ctx)},
		{Key: a + "embedding_length", Value: uint32(c.Hidden)},
		{Key: a + "feed_forward_length", Value: uint32(max(c.Intermediate, c.ExpertFFN))},
		{Key: a + "attention.head_count", Value: uint32(c.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(c.KVHeads)},
		{Key: a + "attention.key_length", Value: uint32(c.HeadDim)},
		{Key: a + "attention.value_length", Value: uint32(c.HeadDim)},
		{Key: a + "rope.freq_base", Value: float32(c.RopeTheta)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: c.NormEps},
		{Key: a + "expert_count", Value: uint32(c.Experts)},
		{Key: a + "expert_used_count", Value: uint32(c.TopK)},
		{Key: a + "expert_feed_forward_length", Value: uint32(c.ExpertFFN)},
		{Key: a + "vocab_size", Value: uint32(vocab)},
	}
	if !c.NormTopK {
		kv = append(kv, weights.GGUFKV{Key: a + "expert_weights_norm", Value: false})
	}
	if c.MRoPESections != [3]int{} {
		// Not read by llama.cpp's qwen3moe (text positions make M-RoPE plain
		// RoPE); kept so the thinker's rotary layout is rebuilt exactly.
		s := []int32{int32(c.MRoPESections[0]), int32(c.MRoPESections[1]), int32(c.MRoPESections[2]), 0}
		kv = append(kv, weights.GGUFKV{Key: a + "rope.dimension_sections", Value: s},
			weights.GGUFKV{Key: a + "rope.mrope_interleaved", Value: c.MRoPEInterleaved})
	}
	return kv
}
