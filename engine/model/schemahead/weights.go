package schemahead

import (
	"fmt"
	"math"
	"strings"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// params are the head's checkpoint tensors by table name (release.HeadTensors),
// each present with its exact shape and only finite values, and the three
// scalars read out.
type params struct {
	t map[string]*weights.Tensor

	priorLogitScale, jointLogitScale, residualGate float32
}

// Load reads the head's tensors (the torch state_dict names of
// joint_head.safetensors) from m, row by row of the head's tensor table for
// cfg, and checks them as the reference's load_state_dict(strict=True)
// does: every tensor must be present with its exact shape (and finite), and
// no other tensor may be in the head's file, except thinker., talker. and
// code2wav. tensors when it is a combined file. The head runs after Bind.
func Load(m weights.Model, cfg release.Head) (*Head, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := params{t: map[string]*weights.Tensor{}}
	seen := map[string]bool{}
	for _, row := range release.HeadTensors(cfg) {
		t, names, err := release.Lookup(m, row)
		if err != nil {
			return nil, fmt.Errorf("joint head: %w", err)
		}
		for _, n := range names {
			seen[n] = true
		}
		v, err := weights.Float32(t)
		if err != nil {
			return nil, fmt.Errorf("joint head: %s: %w", row.Name, err)
		}
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("joint head: %s holds a non-finite value", row.Name)
			}
		}
		p.t[row.Name] = t
		switch row.Name {
		case "prior_logit_scale":
			p.priorLogitScale = v[0]
		case "joint_logit_scale":
			p.jointLogitScale = v[0]
		case "residual_gate":
			p.residualGate = v[0]
		}
	}
	// Any other tensor of the head's own files (joint_head.safetensors, or
	// the companion of a GGUF backbone) is unexpected, unless it belongs to
	// the thinker (the towers share the companion) or to the speech output.
	// When m cannot say which file a tensor lives in, every tensor of m is
	// checked.
	f, byFile := m.(interface{ File(name string) string })
	headFiles := map[string]bool{}
	if byFile {
		for name := range seen {
			headFiles[f.File(name)] = true
		}
	}
	var extra []string
	for _, name := range m.Names() {
		if seen[name] || strings.HasPrefix(name, release.ThinkerPrefix) || strings.HasPrefix(name, release.TalkerPrefix) ||
			strings.HasPrefix(name, release.Code2WavPrefix) || byFile && !headFiles[f.File(name)] {
			continue
		}
		extra = append(extra, name)
	}
	if len(extra) > 0 {
		if len(extra) > 5 {
			extra = append(extra[:5], fmt.Sprintf("… (%d more)", len(extra)-5))
		}
		return nil, fmt.Errorf("joint head: unexpected tensors %s (does %s match the weights?)", strings.Join(extra, ", "), release.HeadConfigFile)
	}
	return &Head{cfg: cfg, p: p}, nil
}
