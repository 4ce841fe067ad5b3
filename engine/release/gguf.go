package release

import (
	"fmt"

	"github.com/clefrt/clef/engine/weights"
)

// GGUFArch is the llama.cpp architecture clef quantize writes for the text
// decoder; GGUFArchitectures are those whose tensors and metadata map onto
// it (qwen3vlmoe: llama.cpp's converter for Qwen3-VL/Omni MoE text).
const GGUFArch = "qwen3moe"

// GGUFArchitectures lists the llama.cpp architectures the decoder table reads.
var GGUFArchitectures = []string{"qwen3moe", "qwen3vlmoe"}

// IsDecoderArch reports whether arch is one of GGUFArchitectures.
func IsDecoderArch(arch string) bool {
	for _, a := range GGUFArchitectures {
		if a == arch {
			return true
		}
	}
	return false
}

// TextFromGGUF reads the decoder configuration from the metadata of a
// llama.cpp qwen3moe or qwen3vlmoe GGUF ("<arch>.block_count", ...), with
// the defaults of ParseThinker for absent optional keys. The vocabulary is
// <arch>.vocab_size, or else the row count of token_embd.weight.
func TextFromGGUF(f *weights.GGUFFile) (Text, error) {
	arch, err := f.Architecture()
	if err != nil {
		return Text{}, err
	}
	if !IsDecoderArch(arch) {
		return Text{}, fmt.Errorf("%s: architecture %q is not one of %v", f.Path, arch, GGUFArchitectures)
	}
	var errs []error
	u := func(key string, required bool) int {
		if _, ok := f.Get(arch + "." + key); !ok && !required {
			return 0
		}
		v, err := f.Uint(arch + "." + key)
		if err != nil {
			errs = append(errs, err)
		}
		if v > maxDim {
			v = maxDim + 1 // rejected by Validate
		}
		return int(v)
	}
	c := Text{NormEps: defaultNormEps, RopeTheta: defaultRopeTheta, NormTopK: true}
	c.Layers = u("block_count", true)
	c.Hidden = u("embedding_length", true)
	c.Heads = u("attention.head_count", true)
	c.KVHeads = u("attention.head_count_kv", false)
	c.HeadDim = u("attention.key_length", false)
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
			errs = append(errs, fmt.Errorf("%s: %s.expert_weights_norm is %T, not a bool", f.Path, arch, v))
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
			errs = append(errs, fmt.Errorf("%s: %s.rope.dimension_sections is %T", f.Path, arch, v))
		}
		if len(s) >= 3 && (s[0] != 0 || s[1] != 0 || s[2] != 0) {
			copy(c.MRoPESections[:], s)
			// llama.cpp's IMROPE for qwen3vlmoe; clef writes the flag.
			c.MRoPEInterleaved = arch == "qwen3vlmoe"
			if v, ok := f.Get(arch + ".rope.mrope_interleaved"); ok {
				b, ok := v.(bool)
				if !ok {
					errs = append(errs, fmt.Errorf("%s: %s.rope.mrope_interleaved is %T, not a bool", f.Path, arch, v))
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
		return Text{}, fmt.Errorf("%s: %w", f.Path, err)
	}
	return c, nil
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
