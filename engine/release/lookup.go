package release

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clefrt/clef/engine/weights"
)

// mlxPrefixes are the prefixes under which MLX checkpoints store what the
// release stores under the second one (mlx-community conversions differ in
// how they nest the thinker's language model).
var mlxPrefixes = []struct{ mlx, release string }{
	{"thinker.language_model.model.", "thinker.model."},
	{"thinker.language_model.lm_head.", "thinker.lm_head."},
	{"language_model.model.", "thinker.model."},
	{"language_model.lm_head.", "thinker.lm_head."},
	{"model.language_model.", "thinker.model."},
	{"lm_head.", "thinker.lm_head."},
	{"audio_tower.", "thinker.audio_tower."},
	{"visual.", "thinker.visual."},
	{"vision_tower.", "thinker.visual."},
	{"model.", "thinker.model."}, // a plain Qwen3-MoE checkpoint
}

// candidates lists the names a container may store table row t under, in
// the order they are tried: the checkpoint name, the GGUF name, then the
// MLX and plain-checkpoint spellings. For a stacked row the checkpoint name
// is left out (it is per expert; see Lookup).
func candidates(t Tensor) []string {
	name := t.Name
	if t.Stacked() {
		name = strings.Replace(name, ".mlp.experts.*.", ".mlp.switch_mlp.", 1)
	}
	var cs []string
	if !t.Stacked() {
		cs = append(cs, name)
	}
	if t.GGUF != "" {
		cs = append(cs, t.GGUF)
	}
	for _, p := range mlxPrefixes {
		if rest, ok := strings.CutPrefix(name, p.release); ok {
			cs = append(cs, p.mlx+rest)
		}
	}
	if t.Stacked() {
		cs = append(cs, name)
	}
	return cs
}

// Lookup finds row t of a tensor table in m: under its checkpoint name, its
// GGUF name, or an MLX spelling, and checks its shape. A stacked row is one
// [E, out, in] tensor: the container's own stack (GGUF *_exps, MLX
// switch_mlp) or the release's per-expert tensors stacked without copying.
// names lists the container names the tensor came from. A missing optional
// row returns nil, nil, nil.
func Lookup(m weights.Model, t Tensor) (w *weights.Tensor, names []string, err error) {
	for _, c := range candidates(t) {
		if m.Has(c) {
			w, err = m.Tensor(c)
			names = []string{c}
			break
		}
	}
	if w == nil && err == nil && t.Stacked() && len(t.Shape) == 3 && m.Has(t.ExpertName(0)) {
		parts := make([]*weights.Tensor, t.Shape[0])
		for e := range parts {
			n := t.ExpertName(e)
			if parts[e], err = m.Tensor(n); err != nil {
				return nil, nil, err
			}
			names = append(names, n)
		}
		if w, err = weights.Stack(strings.Replace(t.Name, ".*.", ".", 1), parts); err != nil {
			return nil, nil, err
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if w == nil {
		if t.Optional {
			return nil, nil, nil
		}
		also := ""
		if t.GGUF != "" {
			also = fmt.Sprintf(" (GGUF %s)", t.GGUF)
		}
		return nil, nil, fmt.Errorf("no tensor %s%s", t.Name, also)
	}
	if !slices.Equal(w.Shape, t.Shape) {
		return nil, nil, fmt.Errorf("%s has shape %v, the configuration wants %v", names[0], w.Shape, t.Shape)
	}
	return w, names, nil
}

// Checkpoint prefixes of the towers.
const (
	AudioPrefix  = "thinker.audio_tower."
	VisionPrefix = "thinker.visual."
)

// TowerOf says which tower a stored tensor name belongs to ("audio",
// "vision"), under the release's or an MLX spelling; "" for any other.
func TowerOf(name string) string {
	if !strings.HasPrefix(name, ThinkerPrefix) {
		for _, p := range mlxPrefixes {
			if rest, ok := strings.CutPrefix(name, p.mlx); ok {
				name = p.release + rest
				break
			}
		}
	}
	switch {
	case strings.HasPrefix(name, AudioPrefix):
		return "audio"
	case strings.HasPrefix(name, VisionPrefix):
		return "vision"
	}
	return ""
}
