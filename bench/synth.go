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
	"strings"
	"sync"
	"time"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/quant"
)

// SynthConfig is the shape of a synthetic Clef-Omni release: seeded random
// weights in the real layout, so that speed (not answers) can be measured
// without the 60 GB checkpoint.
type SynthConfig struct {
	Layers, Hidden, Heads, KVHeads, HeadDim int
	Experts, TopK, ExpertFFN, Vocab         int
	Head                                    release.Head
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
		Head: release.Head{HiddenSize: 2048, Width: 1024, RoutingLayers: 2, Layers: 4, Heads: 16, Feedforward: 4096}, Seed: 1}
}

// text is the decoder configuration the synthetic config.json describes:
// the tiny release's text_config with these shapes, a dense size of four
// expert sizes, and M-RoPE sections splitting head_dim/2 frequencies as the
// real model does (24, 20, 20 of 64).
func (c SynthConfig) text() release.Text {
	half := c.HeadDim / 2
	s1 := half * 20 / 64
	return release.Text{
		Hidden: c.Hidden, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		Experts: c.Experts, TopK: c.TopK, ExpertFFN: c.ExpertFFN, Intermediate: 4 * c.ExpertFFN, Vocab: c.Vocab,
		MaxPositions: 65536, NormEps: 1e-6, RopeTheta: 1e6, NormTopK: true,
		MRoPESections: [3]int{half - 2*s1, s1, s1}, MRoPEInterleaved: true,
	}
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

// unit is the uniform range that gives a linear map of fanIn inputs unit
// variance per output.
func unit(fanIn int) float32 { return float32(math.Sqrt(3 / float64(fanIn))) }

// decoderFill is how a decoder tensor is filled: norms with ones, the
// embedding in ±0.035, every projection with unit variance per output.
func decoderFill(r release.Tensor) (fill string, scale float32) {
	switch r.Role {
	case release.RoleNorm:
		return "one", 0
	case release.RoleEmbed:
		return "rand", 0.035
	}
	return "rand", unit(r.Shape[len(r.Shape)-1])
}

// thinkerTensors lists the text decoder's table in bf16, as the release
// stores it: the experts one by one.
func (c SynthConfig) thinkerTensors() []synthTensor {
	var ts []synthTensor
	for _, r := range release.DecoderTensors(c.text()) {
		fill, scale := decoderFill(r)
		if !r.Stacked() {
			ts = append(ts, synthTensor{name: r.Name, typ: quant.BF16, shape: r.Shape, fill: fill, scale: scale})
			continue
		}
		for e := 0; e < r.Shape[0]; e++ {
			ts = append(ts, synthTensor{name: r.ExpertName(e), typ: quant.BF16, shape: r.Shape[1:], fill: fill, scale: scale})
		}
	}
	return ts
}

// headConstants are the values of the head's scalar parameters.
var headConstants = map[string]float32{"prior_logit_scale": 1, "joint_logit_scale": 1, "residual_gate": 0.5}

// headTensors lists the joint head's table in float32: norms with weight
// one and bias zero, linear maps with unit variance per output and zero
// bias, the type embedding in ±0.5, the scalars at headConstants.
func (c SynthConfig) headTensors() []synthTensor {
	var ts []synthTensor
	for _, r := range release.HeadTensors(c.Head) {
		t := synthTensor{name: r.Name, typ: quant.F32, shape: r.Shape}
		switch {
		case len(r.Shape) == 0:
			t.fill, t.scale = "const", headConstants[r.Name]
		case r.Name == "type_embedding.weight":
			t.fill, t.scale = "rand", 0.5
		case len(r.Shape) == 1 && strings.HasSuffix(r.Name, "bias"):
			t.fill = "zero"
		case len(r.Shape) == 1:
			t.fill = "one"
		default:
			t.fill, t.scale = "rand", unit(r.Shape[len(r.Shape)-1])
		}
		ts = append(ts, t)
	}
	return ts
}

// SynthBytes is the size of the weights WriteSynthetic writes (computed
// from the tables' shapes for one layer, without listing every layer's
// tensors; saturates at MaxInt64).
func (c SynthConfig) SynthBytes() int64 {
	one := c.text()
	one.Layers = 1
	var global, layer float64
	for _, r := range release.DecoderTensors(one) {
		n := 1.0
		for _, d := range r.Shape {
			n *= float64(d)
		}
		if r.Layer < 0 {
			global += n
		} else {
			layer += n
		}
	}
	n := 2 * (global + float64(c.Layers)*layer) // bf16
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
	if err := c.text().Validate(); err != nil {
		return fmt.Errorf("bench: synthetic model: %w", err)
	}
	if c.Head.HiddenSize != c.Hidden {
		return fmt.Errorf("bench: synthetic model: head hidden size %d is not the decoder's %d", c.Head.HiddenSize, c.Hidden)
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
	if err := os.WriteFile(filepath.Join(dir, release.ConfigFile), cfg, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	hc, _ := json.MarshalIndent(c.Head, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, release.HeadConfigFile), append(hc, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	tiny := tinymodel.FS()
	tokJSON, err := fs.ReadFile(tiny, release.TokenizerFile)
	if c.Tokenizer != "" {
		tokJSON, err = os.ReadFile(c.Tokenizer)
	}
	if err != nil {
		return fmt.Errorf("bench: tokenizer: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, release.TokenizerFile), tokJSON, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if c.Tokenizer == "" {
		tc, err := fs.ReadFile(tiny, release.TokenizerConfigFile)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, release.TokenizerConfigFile), tc, 0o644)
		}
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	start := time.Now()
	if err := writeSafetensors(filepath.Join(dir, release.HeadWeightsFile), c.headTensors(), c.Seed^0x4ead, nil); err != nil {
		return err
	}
	if err := writeSafetensors(filepath.Join(dir, release.SingleFile), c.thinkerTensors(), c.Seed, log); err != nil {
		return err
	}
	if log != nil {
		fmt.Fprintf(log, "wrote %s (%.2f GB) in %.1f s\n", dir, float64(c.SynthBytes())/1e9, time.Since(start).Seconds())
	}
	return nil
}

// synthConfigJSON is the tiny release's config.json with the text
// decoder's configuration (text) in place of the tiny one's and bf16 as the
// dtype.
func synthConfigJSON(c SynthConfig) ([]byte, error) {
	raw, err := fs.ReadFile(tinymodel.FS(), release.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("bench: tiny %s: %w", release.ConfigFile, err)
	}
	thinker, _ := cfg["thinker_config"].(map[string]any)
	if thinker == nil {
		return nil, fmt.Errorf("bench: tiny %s has no thinker_config", release.ConfigFile)
	}
	text, _ := thinker["text_config"].(map[string]any)
	if text == nil {
		return nil, fmt.Errorf("bench: tiny %s has no text_config", release.ConfigFile)
	}
	t := c.text()
	set := map[string]any{
		"hidden_size": t.Hidden, "num_hidden_layers": t.Layers, "num_attention_heads": t.Heads, "num_key_value_heads": t.KVHeads,
		"head_dim": t.HeadDim, "num_experts": t.Experts, "num_experts_per_tok": t.TopK, "moe_intermediate_size": t.ExpertFFN,
		"intermediate_size": t.Intermediate, "vocab_size": t.Vocab,
	}
	for k, v := range set {
		text[k] = v
	}
	text["rope_scaling"] = map[string]any{"interleaved": t.MRoPEInterleaved, "mrope_interleaved": t.MRoPEInterleaved,
		"mrope_section": t.MRoPESections[:], "rope_type": "default", "type": "default"}
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
