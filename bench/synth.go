package bench

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/clefrt/clef/engine/model/schemahead"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/quant"
)

// SynthConfig is the shape of a synthetic Clef-Omni release: seeded random
// weights in the real layout, so that speed (not answers) can be measured
// without the 60 GB checkpoint.
type SynthConfig struct {
	Layers, Hidden, Heads, KVHeads, HeadDim int
	Experts, TopK, ExpertFFN, Vocab         int
	Head                                    schemahead.Config
	Seed                                    uint64
	// Tokenizer is a tokenizer.json to copy in; "" uses the embedded tiny
	// model's (512 tokens: records then touch only those embedding rows).
	Tokenizer string
}

// RealShape is the Qwen3-Omni-30B-A3B thinker's layer shapes (hidden 2048,
// 32/4 heads × 128, 128 experts top-8 of FFN 768, vocabulary 151936) with the
// given number of layers, and a ~120M-parameter joint head (width 1024, 2
// routing and 4 decoder layers: the omni head's exact size is not public).
func RealShape(layers int) SynthConfig {
	return SynthConfig{Layers: layers, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, Experts: 128, TopK: 8, ExpertFFN: 768, Vocab: 151936,
		Head: schemahead.Config{HiddenSize: 2048, Width: 1024, RoutingLayers: 2, Layers: 4, Heads: 16, Feedforward: 4096}, Seed: 1}
}

// synthTensor is one tensor to generate.
type synthTensor struct {
	name  string
	typ   quant.Type // BF16 or F32
	shape []int
	// fill: "rand" uniform in ±scale, "one", "zero", "const" (= scale)
	fill  string
	scale float32
}

func (t synthTensor) elems() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}

func (t synthTensor) bytes() int64 {
	if t.typ == quant.BF16 {
		return 2 * int64(t.elems())
	}
	return 4 * int64(t.elems())
}

// thinkerTensors lists the text backbone in bf16, as the release stores it.
func (c SynthConfig) thinkerTensors() []synthTensor {
	u := func(fanIn int) float32 { return float32(math.Sqrt(3 / float64(fanIn))) } // unit variance per output
	var ts []synthTensor
	add := func(name string, fill string, scale float32, shape ...int) {
		ts = append(ts, synthTensor{name: name, typ: quant.BF16, shape: shape, fill: fill, scale: scale})
	}
	p := "thinker.model."
	add(p+"embed_tokens.weight", "rand", 0.035, c.Vocab, c.Hidden) // [vocab, hidden]
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for l := 0; l < c.Layers; l++ {
		lp := fmt.Sprintf("%slayers.%d.", p, l)
		add(lp+"input_layernorm.weight", "one", 0, c.Hidden)                 // [hidden]
		add(lp+"self_attn.q_proj.weight", "rand", u(c.Hidden), q, c.Hidden)  // [heads*head_dim, hidden]
		add(lp+"self_attn.k_proj.weight", "rand", u(c.Hidden), kv, c.Hidden) // [kv_heads*head_dim, hidden]
		add(lp+"self_attn.v_proj.weight", "rand", u(c.Hidden), kv, c.Hidden) // [kv_heads*head_dim, hidden]
		add(lp+"self_attn.o_proj.weight", "rand", u(q), c.Hidden, q)         // [hidden, heads*head_dim]
		add(lp+"self_attn.q_norm.weight", "one", 0, c.HeadDim)               // [head_dim]
		add(lp+"self_attn.k_norm.weight", "one", 0, c.HeadDim)               // [head_dim]
		add(lp+"post_attention_layernorm.weight", "one", 0, c.Hidden)        // [hidden]
		add(lp+"mlp.gate.weight", "rand", u(c.Hidden), c.Experts, c.Hidden)  // [experts, hidden]
		for e := 0; e < c.Experts; e++ {
			ep := fmt.Sprintf("%smlp.experts.%d.", lp, e)
			add(ep+"gate_proj.weight", "rand", u(c.Hidden), c.ExpertFFN, c.Hidden)    // [expert_ffn, hidden]
			add(ep+"up_proj.weight", "rand", u(c.Hidden), c.ExpertFFN, c.Hidden)      // [expert_ffn, hidden]
			add(ep+"down_proj.weight", "rand", u(c.ExpertFFN), c.Hidden, c.ExpertFFN) // [hidden, expert_ffn]
		}
	}
	add(p+"norm.weight", "one", 0, c.Hidden)                              // [hidden]
	add("thinker.lm_head.weight", "rand", u(c.Hidden), c.Vocab, c.Hidden) // [vocab, hidden]
	return ts
}

// headTensors lists the joint head in float32 (torch state-dict names).
func (c SynthConfig) headTensors() []synthTensor {
	h := c.Head
	hs, w, ff := h.HiddenSize, h.Width, h.Feedforward
	var ts []synthTensor
	add := func(name, fill string, scale float32, shape ...int) {
		ts = append(ts, synthTensor{name: name, typ: quant.F32, shape: shape, fill: fill, scale: scale})
	}
	u := func(fanIn int) float32 { return float32(math.Sqrt(3 / float64(fanIn))) }
	norm := func(p string, n int) {
		add(p+".weight", "one", 0, n) // [n]
		add(p+".bias", "zero", 0, n)  // [n]
	}
	linear := func(p string, out, in int, bias bool) {
		add(p+".weight", "rand", u(in), out, in) // [out, in]
		if bias {
			add(p+".bias", "zero", 0, out) // [out]
		}
	}
	attention := func(p string) {
		add(p+".in_proj_weight", "rand", u(w), 3*w, w) // [3*width, width]
		add(p+".in_proj_bias", "zero", 0, 3*w)         // [3*width]
		linear(p+".out_proj", w, w, true)
	}
	norm("hidden_norm", hs)
	for _, n := range []string{"memory_projection", "question_projection", "option_question_projection", "global_projection", "option_context_projection", "option_lexical_projection"} {
		linear(n, w, hs, false)
	}
	add("type_embedding.weight", "rand", 0.5, 3, w) // [3, width]
	for i := 0; i < h.RoutingLayers; i++ {
		p := fmt.Sprintf("evidence_layers.%d.", i)
		norm(p+"query_norm", w)
		norm(p+"memory_norm", w)
		attention(p + "attention")
		norm(p+"feedforward_norm", w)
		linear(p+"feedforward.0", ff, w, true)
		linear(p+"feedforward.3", w, ff, true)
	}
	norm("option_summary_norm", w)
	for i := 0; i < h.Layers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		attention(p + "self_attn")
		attention(p + "multihead_attn")
		linear(p+"linear1", ff, w, true)
		linear(p+"linear2", w, ff, true)
		norm(p+"norm1", w)
		norm(p+"norm2", w)
		norm(p+"norm3", w)
	}
	norm("field_norm", w)
	norm("option_norm", w)
	linear("residual_scorer.0", w, 4*w, true)
	linear("residual_scorer.3", 1, w, true)
	add("prior_logit_scale", "const", 1) // [] (scalar)
	add("joint_logit_scale", "const", 1) // [] (scalar)
	add("residual_gate", "const", 0.5)   // [] (scalar)
	return ts
}

// SynthBytes is the size of the weights WriteSynthetic writes (computed
// from the shapes, without listing the tensors; saturates at MaxInt64).
func (c SynthConfig) SynthBytes() int64 {
	h, q, kv := float64(c.Hidden), float64(c.Heads*c.HeadDim), float64(c.KVHeads*c.HeadDim)
	layer := 2*h + q*h + 2*kv*h + h*q + 2*float64(c.HeadDim) + float64(c.Experts)*h + float64(c.Experts)*3*float64(c.ExpertFFN)*h
	n := 2 * (2*float64(c.Vocab)*h + h + float64(c.Layers)*layer) // bf16
	if c.Head.Validate() == nil {
		for _, t := range c.headTensors() {
			n += float64(t.bytes())
		}
	}
	if n >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// Limits of a synthetic model, so that a typo cannot fill the disk.
const maxSynthBytes = 256 << 30

func (c SynthConfig) check() error {
	for _, d := range []struct {
		name string
		v    int
	}{{"layers", c.Layers}, {"hidden", c.Hidden}, {"heads", c.Heads}, {"kv heads", c.KVHeads}, {"head dim", c.HeadDim},
		{"experts", c.Experts}, {"top-k", c.TopK}, {"expert ffn", c.ExpertFFN}, {"vocab", c.Vocab}} {
		if d.v <= 0 || d.v > 1<<20 {
			return fmt.Errorf("bench: synthetic model: %s = %d, want 1..%d", d.name, d.v, 1<<20)
		}
	}
	if c.Heads%c.KVHeads != 0 || c.TopK > c.Experts || c.HeadDim%2 != 0 {
		return fmt.Errorf("bench: synthetic model: heads %d / kv heads %d, top-k %d of %d experts, head dim %d do not fit together",
			c.Heads, c.KVHeads, c.TopK, c.Experts, c.HeadDim)
	}
	if c.Head.HiddenSize != c.Hidden {
		return fmt.Errorf("bench: synthetic model: head hidden size %d is not the backbone's %d", c.Head.HiddenSize, c.Hidden)
	}
	if err := c.Head.Validate(); err != nil {
		return fmt.Errorf("bench: synthetic model: %w", err)
	}
	if n := c.SynthBytes(); n > maxSynthBytes {
		return fmt.Errorf("bench: synthetic model: %d bytes is more than the %d GiB limit", n, maxSynthBytes>>30)
	}
	return nil
}

// WriteSynthetic writes a synthetic release directory: config.json (the
// embedded tiny model's, with the text shapes replaced), model.safetensors
// (bf16 thinker), joint_head.safetensors and joint_head_config.json (f32
// head), tokenizer.json and tokenizer_config.json. Weights are seeded: the
// same config gives the same bytes. Progress lines go to log (may be nil).
func WriteSynthetic(dir string, c SynthConfig, log io.Writer) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cfg, err := synthConfigJSON(c)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	hc, _ := json.MarshalIndent(c.Head, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, schemahead.ConfigFile), append(hc, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	tiny := tinymodel.FS()
	tokJSON, err := fs.ReadFile(tiny, "tokenizer.json")
	if c.Tokenizer != "" {
		tokJSON, err = os.ReadFile(c.Tokenizer)
	}
	if err != nil {
		return fmt.Errorf("bench: tokenizer: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tokJSON, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if c.Tokenizer == "" {
		tc, err := fs.ReadFile(tiny, "tokenizer_config.json")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tc, 0o644)
		}
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	start := time.Now()
	if err := writeSafetensors(filepath.Join(dir, schemahead.WeightsFile), c.headTensors(), c.Seed^0x4ead, nil); err != nil {
		return err
	}
	if err := writeSafetensors(filepath.Join(dir, "model.safetensors"), c.thinkerTensors(), c.Seed, log); err != nil {
		return err
	}
	if log != nil {
		fmt.Fprintf(log, "wrote %s (%.2f GB) in %.1f s\n", dir, float64(c.SynthBytes())/1e9, time.Since(start).Seconds())
	}
	return nil
}

// synthConfigJSON is the tiny release's config.json with the text
// backbone's shapes replaced and bf16 as the dtype.
func synthConfigJSON(c SynthConfig) ([]byte, error) {
	raw, err := fs.ReadFile(tinymodel.FS(), "config.json")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("bench: tiny config.json: %w", err)
	}
	thinker, _ := cfg["thinker_config"].(map[string]any)
	if thinker == nil {
		return nil, fmt.Errorf("bench: tiny config.json has no thinker_config")
	}
	text, _ := thinker["text_config"].(map[string]any)
	if text == nil {
		return nil, fmt.Errorf("bench: tiny config.json has no text_config")
	}
	set := map[string]any{
		"hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim, "num_experts": c.Experts, "num_experts_per_tok": c.TopK, "moe_intermediate_size": c.ExpertFFN,
		"intermediate_size": 4 * c.ExpertFFN, "vocab_size": c.Vocab,
	}
	for k, v := range set {
		text[k] = v
	}
	// M-RoPE sections split head_dim/2 frequencies as the real model does
	// (24, 20, 20 of 64).
	half := c.HeadDim / 2
	s1 := half * 20 / 64
	text["rope_scaling"] = map[string]any{"interleaved": true, "mrope_interleaved": true, "mrope_section": []int{half - 2*s1, s1, s1}, "rope_type": "default", "type": "default"}
	cfg["torch_dtype"] = "bfloat16"
	return json.MarshalIndent(cfg, "", "  ")
}

// chunkElems is how many values one generator task makes.
const chunkElems = 1 << 20

// writeSafetensors writes tensors into one safetensors file, generating
// their values in parallel chunks (each chunk seeded by tensor and chunk
// index, so the output does not depend on the thread count).
func writeSafetensors(path string, ts []synthTensor, seed uint64, log io.Writer) error {
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range ts {
		dtype := "F32"
		if t.typ == quant.BF16 {
			dtype = "BF16"
		}
		shape := append([]int{}, t.shape...) // a scalar is [], not null
		header[t.name] = map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int64{off, off + t.bytes()}}
		off += t.bytes()
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.Remove(tmp)
	w := bufio.NewWriterSize(f, 8<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hj)))
	w.Write(n[:])
	w.Write(hj)
	workers := runtime.GOMAXPROCS(0)
	var done int64
	last := time.Now()
	for ti, t := range ts {
		elems := t.elems()
		size := 2
		if t.typ == quant.F32 {
			size = 4
		}
		chunks := (elems + chunkElems - 1) / chunkElems
		bufs := make([][]byte, workers)
		for c0 := 0; c0 < chunks; c0 += workers {
			var wg sync.WaitGroup
			for k := 0; k < workers && c0+k < chunks; k++ {
				ci := c0 + k
				lo, hi := ci*chunkElems, min((ci+1)*chunkElems, elems)
				if cap(bufs[k]) < (hi-lo)*size {
					bufs[k] = make([]byte, chunkElems*size)
				}
				bufs[k] = bufs[k][:(hi-lo)*size]
				wg.Add(1)
				go func(buf []byte) {
					defer wg.Done()
					fillChunk(buf, t, seed^uint64(ti+1)*0x9e3779b97f4a7c15^uint64(ci+1)*0xbf58476d1ce4e5b9)
				}(bufs[k])
			}
			wg.Wait()
			for k := 0; k < workers && c0+k < chunks; k++ {
				if _, err := w.Write(bufs[k]); err != nil {
					f.Close()
					return fmt.Errorf("bench: writing %s: %w", path, err)
				}
				done += int64(len(bufs[k]))
			}
			if log != nil && time.Since(last) > 2*time.Second {
				fmt.Fprintf(log, "  %s: %.1f of %.1f GB\n", filepath.Base(path), float64(done)/1e9, float64(off)/1e9)
				last = time.Now()
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// fillChunk writes one chunk of t's values.
func fillChunk(buf []byte, t synthTensor, seed uint64) {
	x := seed | 1
	next := func() uint64 { // xorshift64
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	value := func(r uint32) float32 {
		switch t.fill {
		case "one":
			return 1
		case "zero":
			return 0
		case "const":
			return t.scale
		}
		return float32(int32(r)) * (t.scale / (1 << 31))
	}
	if t.typ == quant.BF16 {
		for i := 0; i+1 < len(buf); i += 4 {
			r := next()
			binary.LittleEndian.PutUint16(buf[i:], quant.Float32ToBF16(value(uint32(r))))
			if i+3 < len(buf) {
				binary.LittleEndian.PutUint16(buf[i+2:], quant.Float32ToBF16(value(uint32(r>>32))))
			}
		}
		return
	}
	for i := 0; i+3 < len(buf); i += 4 {
		binary.LittleEndian.PutUint32(buf[i:], math.Float32bits(value(uint32(next()))))
	}
}
