package schemahead

// The float64 reference of the head: the reference JointSchemaHead's forward
// pass written out plainly over float64 rows, straight from the checkpoint
// tensors (widened exactly), with torch's direct form of every attention.
// The float32 pass on a backend is checked against it and against the
// PyTorch goldens.

import (
	"fmt"
	"math"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// reference holds the head's tensors in float64.
type reference struct {
	cfg release.Head
	t   map[string][]float64
}

func newReference(t testing.TB, m weights.Model, cfg release.Head) *reference {
	t.Helper()
	r := &reference{cfg: cfg, t: map[string][]float64{}}
	for _, row := range release.HeadTensors(cfg) {
		wt, _, err := release.Lookup(m, row)
		if err != nil {
			t.Fatal(err)
		}
		v, err := weights.Float32(wt)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]float64, len(v))
		for i, x := range v {
			w[i] = float64(x)
		}
		r.t[row.Name] = w
	}
	return r
}

type rows = [][]float64

func (r *reference) layerNorm(x rows, prefix string) rows {
	w, b := r.t[prefix+".weight"], r.t[prefix+".bias"]
	out := make(rows, len(x))
	for i, row := range x {
		var mean, variance float64
		for _, v := range row {
			mean += v
		}
		mean /= float64(len(row))
		for _, v := range row {
			variance += (v - mean) * (v - mean)
		}
		variance /= float64(len(row))
		inv := 1 / math.Sqrt(variance+layerNormEps)
		out[i] = make([]float64, len(row))
		for j, v := range row {
			out[i][j] = (v-mean)*inv*w[j] + b[j]
		}
	}
	return out
}

// affine is x·Wᵀ + b for W [out, len(x[i])] (b nil: none).
func affine(x rows, w, b []float64, out int) rows {
	y := make(rows, len(x))
	for i, row := range x {
		in := len(row)
		y[i] = make([]float64, out)
		for o := range out {
			s := 0.0
			for j, v := range row {
				s += v * w[o*in+j]
			}
			if b != nil {
				s += b[o]
			}
			y[i][o] = s
		}
	}
	return y
}

func (r *reference) linear(x rows, prefix string, out int, bias bool) rows {
	var b []float64
	if bias {
		b = r.t[prefix+".bias"]
	}
	return affine(x, r.t[prefix+".weight"], b, out)
}

func addRows(a, b rows) rows {
	out := make(rows, len(a))
	for i := range a {
		out[i] = make([]float64, len(a[i]))
		for j := range a[i] {
			out[i][j] = a[i][j] + b[i][j]
		}
	}
	return out
}

func gelu(x rows) rows {
	out := make(rows, len(x))
	for i, row := range x {
		out[i] = make([]float64, len(row))
		for j, v := range row {
			out[i][j] = 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
		}
	}
	return out
}

func softmax64(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	out := make([]float64, len(x))
	var s float64
	for i, v := range x {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func dot64(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// mha is torch's MultiheadAttention of the queries q over kv.
func (r *reference) mha(q, kv rows, prefix string) rows {
	w, heads := r.cfg.Width, r.cfg.Heads
	hd := w / heads
	in, bias := r.t[prefix+".in_proj_weight"], r.t[prefix+".in_proj_bias"]
	Q := affine(q, in[:w*w], bias[:w], w)
	K := affine(kv, in[w*w:2*w*w], bias[w:2*w], w)
	V := affine(kv, in[2*w*w:], bias[2*w:], w)
	out := make(rows, len(q))
	for i := range q {
		out[i] = make([]float64, w)
		for h := range heads {
			lo, hi := h*hd, (h+1)*hd
			scores := make([]float64, len(kv))
			for j := range kv {
				scores[j] = dot64(Q[i][lo:hi], K[j][lo:hi]) / math.Sqrt(float64(hd))
			}
			p := softmax64(scores)
			for j := range kv {
				for d := lo; d < hi; d++ {
					out[i][d] += p[j] * V[j][d]
				}
			}
		}
	}
	return r.linear(out, prefix+".out_proj", w, true)
}

func (r *reference) feedforward(x rows, first, second string) rows {
	return r.linear(gelu(r.linear(x, first, r.cfg.Feedforward, true)), second, r.cfg.Width, true)
}

func spanMean64(x rows, s [2]int) []float64 {
	out := make([]float64, len(x[0]))
	for k := s[0]; k < s[1]; k++ {
		for j, v := range x[k] {
			out[j] += v
		}
	}
	for j := range out {
		out[j] /= float64(s[1] - s[0])
	}
	return out
}

// logits is the reference forward pass of one record.
func (r *reference) logits(hidden []float32, ids []int, questions []Question, lex Lexicon) ([][]float64, error) {
	cfg := r.cfg
	hs, w := cfg.HiddenSize, cfg.Width
	L := len(ids)
	if len(hidden) != L*hs {
		return nil, fmt.Errorf("%d hidden values for %d tokens", len(hidden), L)
	}
	x := make(rows, L)
	for i := range x {
		x[i] = make([]float64, hs)
		for j := range hs {
			x[i][j] = float64(hidden[i*hs+j])
		}
	}
	normed := r.layerNorm(x, "hidden_norm")
	memory := r.linear(normed, "memory_projection", w, false)
	global := normed[L-1]
	var qv, contexts, lexical rows
	var owner []int
	for qi, q := range questions {
		qv = append(qv, spanMean64(normed, q.Span))
		for _, s := range q.OptionSpans {
			contexts = append(contexts, spanMean64(normed, s))
			rs, err := lex.Rows(ids[s[0]:s[1]])
			if err != nil {
				return nil, err
			}
			lx := make([]float64, hs)
			for _, row := range rs {
				for j, v := range row {
					lx[j] += float64(v)
				}
			}
			for j := range lx {
				lx[j] /= float64(len(rs))
			}
			lexical = append(lexical, lx)
			owner = append(owner, qi)
		}
	}
	oq := r.linear(qv, "option_question_projection", w, false)
	routed := addRows(r.linear(contexts, "option_context_projection", w, false), r.linear(lexical, "option_lexical_projection", w, false))
	for oi := range routed {
		for j := range w {
			routed[oi][j] += oq[owner[oi]][j]
		}
	}
	for i := range cfg.RoutingLayers {
		p := fmt.Sprintf("evidence_layers.%d.", i)
		routed = addRows(routed, r.mha(r.layerNorm(routed, p+"query_norm"), r.layerNorm(memory, p+"memory_norm"), p+"attention"))
		routed = addRows(routed, r.feedforward(r.layerNorm(routed, p+"feedforward_norm"), p+"feedforward.0", p+"feedforward.3"))
	}
	base := r.linear(qv, "question_projection", w, false)
	summaries := make(rows, len(questions))
	start := 0
	for qi, q := range questions {
		n := len(q.OptionSpans)
		scores := make([]float64, n)
		for k := range n {
			scores[k] = dot64(routed[start+k], base[qi]) / math.Sqrt(float64(w))
		}
		p := softmax64(scores)
		summaries[qi] = make([]float64, w)
		for k := range n {
			for j := range w {
				summaries[qi][j] += p[k] * routed[start+k][j]
			}
		}
		start += n
	}
	summaries = r.layerNorm(summaries, "option_summary_norm")
	globalField := r.linear(rows{global}, "global_projection", w, false)[0]
	te := r.t["type_embedding.weight"]
	fields := make(rows, len(questions))
	for qi, q := range questions {
		fields[qi] = make([]float64, w)
		for j := range w {
			fields[qi][j] = base[qi][j] + summaries[qi][j] + globalField[j] + te[q.Type*w+j]
		}
	}
	for i := range cfg.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		n1 := r.layerNorm(fields, p+"norm1")
		fields = addRows(fields, r.mha(n1, n1, p+"self_attn"))
		fields = addRows(fields, r.mha(r.layerNorm(fields, p+"norm2"), memory, p+"multihead_attn"))
		fields = addRows(fields, r.feedforward(r.layerNorm(fields, p+"norm3"), p+"linear1", p+"linear2"))
	}
	fields = r.layerNorm(fields, "field_norm")
	options := r.layerNorm(routed, "option_norm")
	features := make(rows, len(options))
	for oi, o := range options {
		f := fields[owner[oi]]
		features[oi] = make([]float64, 4*w)
		for j := range w {
			features[oi][j], features[oi][w+j], features[oi][2*w+j], features[oi][3*w+j] = f[j], o[j], f[j]*o[j], math.Abs(f[j]-o[j])
		}
	}
	residual := r.linear(gelu(r.linear(features, "residual_scorer.0", w, true)), "residual_scorer.3", 1, true)
	priorScale := math.Exp(math.Min(r.t["prior_logit_scale"][0], math.Log(100)))
	jointScale := math.Exp(math.Min(r.t["joint_logit_scale"][0], math.Log(100)))
	gate := 1 / (1 + math.Exp(-r.t["residual_gate"][0]))
	normalize := func(v []float64) []float64 {
		n := math.Max(math.Sqrt(dot64(v, v)), 1e-12)
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = x / n
		}
		return out
	}
	logits := make([][]float64, len(questions))
	oi := 0
	for qi, q := range questions {
		anchor := make([]float64, hs)
		for j := range hs {
			anchor[j] = qv[qi][j] + global[j]
		}
		anchor = normalize(anchor)
		for range q.OptionSpans {
			prior := priorScale * dot64(normalize(lexical[oi]), anchor)
			f, o := fields[qi], options[oi]
			cos := dot64(f, o) / math.Sqrt(math.Max(dot64(f, f)*dot64(o, o), 1e-16))
			logits[qi] = append(logits[qi], prior+gate*(jointScale*cos+residual[oi][0]))
			oi++
		}
	}
	return logits, nil
}
