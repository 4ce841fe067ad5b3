package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/untrusted"
	"github.com/clefrt/clef/quant"
)

// DefaultContext is the context clef inspect sizes a decision for (the
// reference max_length).
const DefaultContext = 64000

// Description is what clef inspect reports about a model.
type Description struct {
	Path         string
	Format       string // release, mlx, gguf, safetensors
	Architecture string
	Files        []FileSize
	Config       *release.Text // the decoder; nil when the source has no configuration
	Params       Params
	Types        []TypeStat // by type id
	WeightBytes  int64      // bytes of all tensor data (MLX: codes + scales + biases)
	Tensors      int
	Memory       Memory
}

// FileSize is one file of the model on disk.
type FileSize struct {
	Path  string
	Bytes int64
}

// Params counts parameters (logical elements) by part of the model.
type Params struct {
	Total   int64
	Text    int64 // thinker.model.* and thinker.lm_head (experts included)
	Experts int64 // routed experts (part of Text)
	Active  int64 // Text minus the experts a token does not use
	Audio   int64 // thinker.audio_tower.*
	Vision  int64 // thinker.visual.*
	Head    int64 // the joint head (names without the thinker. prefix)
}

// TypeStat counts the tensors of one storage type.
type TypeStat struct {
	Type    quant.Type
	Tensors int
	Params  int64
	Bytes   int64
}

// Memory is the estimate of what one decision needs (prefill only): all
// weights, the activations of one layer over the whole context, and one
// layer's K and V in float32 (layers run one after another and a decision
// never decodes, so no layer's cache outlives it).
type Memory struct {
	Context     int
	Weights     int64
	Activations int64
	KV          int64
	Total       int64
	// Available is this machine's RAM (0 if unknown); Fits is Total <= Available.
	Available int64
	Fits      bool
}

// Describe inspects the model at path: a release or MLX directory, a GGUF
// (with its companion) or a single safetensors file. ctx sizes the memory
// estimate (0: DefaultContext). A file or directory without a configuration
// (release.ErrNoConfig) is described from its tensors alone; a model whose
// files disagree is refused with release.Open's error, as clef decide and
// clef serve refuse it.
func Describe(path string, ctx int) (*Description, error) {
	if ctx <= 0 {
		ctx = DefaultContext
	}
	d := &Description{Path: path, Format: string(release.FormatSafetensors), Architecture: "unknown (no config.json)"}
	var m weights.Model
	r, err := release.Open(path)
	if err == nil {
		defer r.Close()
		m, d.Format = r.Weights, string(r.Format)
		d.Architecture = describeArch(r)
		if r.Config.Thinker.Text.Layers > 0 {
			c := r.Config.Thinker.Text
			d.Config = &c
		}
	} else {
		if !errors.Is(err, release.ErrNoConfig) {
			return nil, err
		}
		var werr error
		if m, werr = weights.Open(path, weights.Options{}); werr != nil {
			return nil, err
		}
		defer m.Close()
	}
	set, _ := m.(*weights.Set)
	d.Files = modelFiles(path, set)

	// What each stored tensor is, from the tables.
	part := map[string]string{}
	experts := map[string]bool{}
	if c := d.Config; c != nil {
		for _, row := range release.DecoderTensors(*c) {
			_, names, err := release.Lookup(m, row)
			if err != nil {
				continue
			}
			for _, n := range names {
				part[n] = "text"
				experts[n] = row.Stacked()
			}
		}
	}
	if r != nil && r.Config.Head != nil {
		for _, row := range release.HeadTensors(*r.Config.Head) {
			part[row.Name] = "head"
		}
	}
	byType := map[quant.Type]*TypeStat{}
	for _, n := range m.Names() {
		t, _ := m.Tensor(n)
		p := int64(t.Elements())
		b := t.Size()
		if t.Scales != nil {
			b += t.Scales.Size() + t.Biases.Size()
		}
		// A stacked tensor counts as its experts, as the release stores them.
		count := 1
		if experts[n] && len(t.Shape) == 3 {
			count = t.Shape[0]
		}
		d.Tensors += count
		d.WeightBytes += b
		s := byType[t.Type]
		if s == nil {
			s = &TypeStat{Type: t.Type}
			byType[t.Type] = s
		}
		s.Tensors += count
		s.Params += p
		s.Bytes += b
		d.Params.Total += p
		what := part[n]
		if what == "" {
			what = release.TowerOf(n)
		}
		switch what {
		case "text":
			d.Params.Text += p
			if experts[n] {
				d.Params.Experts += p
			}
		case "audio":
			d.Params.Audio += p
		case "vision":
			d.Params.Vision += p
		case "head":
			d.Params.Head += p
		}
	}
	for _, s := range byType {
		d.Types = append(d.Types, *s)
	}
	sort.Slice(d.Types, func(i, j int) bool { return d.Types[i].Type < d.Types[j].Type })
	d.Params.Active = d.Params.Text - d.Params.Experts
	if c := d.Config; c != nil && c.Experts > 0 {
		d.Params.Active += d.Params.Experts * int64(c.TopK) / int64(c.Experts)
	}
	d.Memory = estimateMemory(d.Config, d.WeightBytes, ctx)
	return d, nil
}

// estimateMemory sizes one prefill of ctx tokens. Activations (float32) of
// one layer: residual, normed input and attention output (3 x hidden), q, k
// and v, router logits, the top-k experts' gate and up outputs, and one
// 512-query tile of attention scores per head.
func estimateMemory(c *release.Text, weightBytes int64, ctx int) Memory {
	m := Memory{Context: ctx, Weights: weightBytes, Available: systemMemory()}
	if c != nil {
		l := int64(ctx)
		perTok := int64(3*c.Hidden + (c.Heads+2*c.KVHeads)*c.HeadDim + c.Experts + 2*c.TopK*c.ExpertFFN)
		tile := int64(min(ctx, 512))
		m.Activations = 4 * (l*perTok + int64(c.Heads)*tile*l)
		m.KV = 4 * 2 * l * int64(c.KVHeads*c.HeadDim)
	}
	m.Total = m.Weights + m.Activations + m.KV
	m.Fits = m.Available == 0 || m.Total <= m.Available
	return m
}

// describeArch names the architecture. What it quotes of the files
// (file type, model_type, architectures) is cut and escaped: it goes to a
// terminal.
func describeArch(r *release.Release) string {
	if f := r.Backbone; f != nil {
		arch, _ := f.Architecture()
		desc := arch + " (GGUF v" + fmt.Sprint(f.Version)
		if ft, err := f.String(release.GGUFFileTypeKey); err == nil {
			desc += ", " + untrusted.Clip(ft, untrusted.MaxRunes)
		} else if ft, err := f.Uint("general.file_type"); err == nil {
			desc += fmt.Sprintf(", llama.cpp file type %d", ft)
		}
		if r.Companion != nil {
			desc += ", with companion"
		}
		return desc + ")"
	}
	var top struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
		Quantization  *struct {
			Bits      int `json:"bits"`
			GroupSize int `json:"group_size"`
		} `json:"quantization"`
	}
	if json.Unmarshal(r.Files[release.ConfigFile], &top) != nil {
		return "unknown (config.json unreadable)"
	}
	desc := untrusted.Clip(top.ModelType, untrusted.MaxRunes)
	if len(top.Architectures) > 0 {
		desc += " (" + untrusted.Clip(strings.Join(top.Architectures, ", "), untrusted.MaxRunes) + ")"
	}
	if top.Quantization != nil {
		desc += fmt.Sprintf(", MLX affine %d-bit, group %d", top.Quantization.Bits, top.Quantization.GroupSize)
	}
	return desc
}

// modelFiles lists the files the model was read from.
func modelFiles(path string, set *weights.Set) []FileSize {
	var paths []string
	if set != nil {
		seen := map[string]bool{}
		for _, n := range set.Names() {
			if f := set.File(n); f != "" && !seen[f] {
				seen[f] = true
				paths = append(paths, f)
			}
		}
	} else {
		paths = []string{path}
	}
	sort.Strings(paths)
	var out []FileSize
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			out = append(out, FileSize{p, st.Size()})
		}
	}
	return out
}
