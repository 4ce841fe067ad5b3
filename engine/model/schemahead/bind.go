package schemahead

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// norm is a torch.nn.LayerNorm on the backend.
type norm struct{ w, b *backend.Tensor } // [n], [n]

// linear is a torch.nn.Linear on the backend: y = x·Wᵀ + b.
type linear struct{ w, b *backend.Tensor } // [out, in], [out] (nil without bias)

// attention is a torch.nn.MultiheadAttention on the backend. Its packed
// in_proj_weight [3·width, width] and in_proj_bias [3·width] are bound as
// the q, k and v projections (rows [0, w), [w, 2w), [2w, 3w)).
type attention struct {
	q, k, v, out linear
	// kT is the key weight of the folded form's per-head products
	// (cross.go), cross-attentions only: [heads·width, head_dim], Wk_hᵀ in
	// rows [h·width, (h+1)·width), a float32 activation as GroupMatMul reads
	// it (as it reads v.w, which a cross-attention uploads too).
	kT *backend.Tensor
}

// evidenceLayer is the reference EvidenceRoutingLayer: pre-norm cross-attention
// of the option queries to the memory, then a GELU feed-forward.
type evidenceLayer struct {
	queryNorm, memoryNorm, feedforwardNorm norm
	attention                              attention
	feedforward0, feedforward3             linear // [feedforward, width], [width, feedforward]
}

// decoderLayer is a norm-first torch.nn.TransformerDecoderLayer with exact GELU.
type decoderLayer struct {
	selfAttn, multiheadAttn attention
	linear1, linear2        linear // [feedforward, width], [width, feedforward]
	norm1, norm2, norm3     norm
}

// bound is the head's weights on its backend.
type bound struct {
	hiddenNorm               norm            // [hidden]
	memoryProjection         linear          // [width, hidden]
	questionProjection       linear          // [width, hidden]
	optionQuestionProjection linear          // [width, hidden]
	globalProjection         linear          // [width, hidden]
	optionContextProjection  linear          // [width, hidden]
	optionLexicalProjection  linear          // [width, hidden]
	typeEmbedding            *backend.Tensor // [3, width]
	evidenceLayers           []evidenceLayer
	optionSummaryNorm        norm // [width]
	layers                   []decoderLayer
	fieldNorm                norm   // [width]
	optionNorm               norm   // [width]
	residualScorer0          linear // [width, 4·width]
	residualScorer3          linear // [1, width]
}

// Bind binds the head's weights on b, once. The weights of the products
// over a record's L memory rows (the memory projection, and the key and
// value projections of the cross-attentions) are uploaded as float32
// activations: on the cpu backend a product of two activations is the
// faster one for many rows, and the folded cross-attention's per-head
// products read Wv and Wkᵀ that way anyway. That is (hidden + 3·width·
// (routing layers + layers))·width values, 80 MB at the real size. Every
// other tensor, whose products have a handful of rows, is bound as stored
// (no copy where b can wrap it). After Bind, Logits runs on b. On failure
// nothing stays bound.
func (h *Head) Bind(b backend.Backend) error {
	if h.b != nil {
		return fmt.Errorf("joint head: already bound to backend %s", h.b.Name())
	}
	bd := &binder{b: b, p: h.p, width: h.cfg.Width, heads: h.cfg.Heads}
	w := bd.bind(h.cfg.RoutingLayers, h.cfg.Layers)
	if bd.err != nil {
		b.Free(bd.uploads...)
		return fmt.Errorf("joint head: binding to backend %s: %w", b.Name(), bd.err)
	}
	h.b, h.w = b, w
	return nil
}

// binder binds the head's tensors one by one, keeping the first error and
// what it uploaded.
type binder struct {
	b            backend.Backend
	p            params
	width, heads int
	err          error
	uploads      []*backend.Tensor
}

func (bd *binder) bind(routing, layers int) *bound {
	w := &bound{
		hiddenNorm:               bd.norm("hidden_norm"),
		memoryProjection:         linear{w: bd.uploadTensor(bd.tensor("memory_projection.weight"))},
		questionProjection:       bd.linear("question_projection", false),
		optionQuestionProjection: bd.linear("option_question_projection", false),
		globalProjection:         bd.linear("global_projection", false),
		optionContextProjection:  bd.linear("option_context_projection", false),
		optionLexicalProjection:  bd.linear("option_lexical_projection", false),
		typeEmbedding:            bd.weight(bd.tensor("type_embedding.weight")),
		optionSummaryNorm:        bd.norm("option_summary_norm"),
		fieldNorm:                bd.norm("field_norm"),
		optionNorm:               bd.norm("option_norm"),
		residualScorer0:          bd.linear("residual_scorer.0", true),
		residualScorer3:          bd.linear("residual_scorer.3", true),
	}
	for i := range routing {
		p := fmt.Sprintf("evidence_layers.%d.", i)
		w.evidenceLayers = append(w.evidenceLayers, evidenceLayer{
			queryNorm:       bd.norm(p + "query_norm"),
			memoryNorm:      bd.norm(p + "memory_norm"),
			attention:       bd.attention(p+"attention", true),
			feedforwardNorm: bd.norm(p + "feedforward_norm"),
			feedforward0:    bd.linear(p+"feedforward.0", true),
			feedforward3:    bd.linear(p+"feedforward.3", true),
		})
	}
	for i := range layers {
		p := fmt.Sprintf("layers.%d.", i)
		w.layers = append(w.layers, decoderLayer{
			selfAttn:      bd.attention(p+"self_attn", false),
			multiheadAttn: bd.attention(p+"multihead_attn", true),
			linear1:       bd.linear(p+"linear1", true),
			linear2:       bd.linear(p+"linear2", true),
			norm1:         bd.norm(p + "norm1"),
			norm2:         bd.norm(p + "norm2"),
			norm3:         bd.norm(p + "norm3"),
		})
	}
	return w
}

// tensor returns the checked checkpoint tensor name.
func (bd *binder) tensor(name string) *weights.Tensor {
	t := bd.p.t[name]
	if t == nil && bd.err == nil {
		bd.err = fmt.Errorf("no tensor %s", name)
	}
	return t
}

// weight binds t as stored.
func (bd *binder) weight(t *weights.Tensor) *backend.Tensor {
	if bd.err != nil {
		return nil
	}
	bt, err := bd.b.Weight(t)
	if err != nil {
		bd.err = err
	}
	return bt
}

// uploadTensor uploads the 2-D tensor t as float32.
func (bd *binder) uploadTensor(t *weights.Tensor) *backend.Tensor {
	if bd.err != nil {
		return nil
	}
	v, err := weights.Float32(t)
	if err != nil {
		bd.err = err
		return nil
	}
	return bd.upload(v, t.Shape[0], t.Shape[1])
}

// upload copies v [rows, cols] to the backend.
func (bd *binder) upload(v []float32, rows, cols int) *backend.Tensor {
	if bd.err != nil {
		return nil
	}
	t, err := bd.b.Upload(v, rows, cols)
	if err != nil {
		bd.err = err
		return nil
	}
	bd.uploads = append(bd.uploads, t)
	return t
}

func (bd *binder) norm(prefix string) norm {
	return norm{w: bd.weight(bd.tensor(prefix + ".weight")), b: bd.weight(bd.tensor(prefix + ".bias"))}
}

func (bd *binder) linear(prefix string, bias bool) linear {
	l := linear{w: bd.weight(bd.tensor(prefix + ".weight"))}
	if bias {
		l.b = bd.weight(bd.tensor(prefix + ".bias"))
	}
	return l
}

// attention binds a MultiheadAttention's projections. For a
// cross-attention the key and value projections are uploaded, with the
// folded form's per-head key weights.
func (bd *binder) attention(prefix string, cross bool) attention {
	in, bias := bd.tensor(prefix+".in_proj_weight"), bd.tensor(prefix+".in_proj_bias")
	a := attention{out: bd.linear(prefix+".out_proj", true)}
	for i, l := range []*linear{&a.q, &a.k, &a.v} {
		l.b = bd.part(bias, i)
		if !cross || i == 0 {
			l.w = bd.part(in, i)
		}
	}
	if !cross || bd.err != nil {
		return a
	}
	v, err := weights.Float32(in)
	if err != nil {
		bd.err = err
		return a
	}
	w, heads := bd.width, bd.heads
	hd := w / heads
	wk, wv := v[w*w:2*w*w], v[2*w*w:3*w*w]
	a.k.w = bd.upload(wk, w, w)
	a.v.w = bd.upload(wv, w, w)
	// kT: rows [h·w, (h+1)·w) hold Wk_hᵀ, Wk_h being Wk's rows [h·hd, (h+1)·hd).
	kT := make([]float32, w*w)
	for h := range heads {
		for d := range hd {
			for j := range w {
				kT[(h*w+j)*hd+d] = wk[(h*hd+d)*w+j]
			}
		}
	}
	a.kT = bd.upload(kT, heads*w, hd)
	return a
}

// part binds third i of t (a [3·w, w] in_proj_weight or a [3·w]
// in_proj_bias): a view of the stored bytes for the float types, an upload
// of the dequantized values otherwise.
func (bd *binder) part(t *weights.Tensor, i int) *backend.Tensor {
	if bd.err != nil {
		return nil
	}
	shape := append([]int{t.Shape[0] / 3}, t.Shape[1:]...)
	n := len(t.Data) / 3
	switch t.Type {
	case quant.F32, quant.F16, quant.BF16:
		return bd.weight(&weights.Tensor{Name: fmt.Sprintf("%s[%d]", t.Name, i), Type: t.Type, Shape: shape, Data: t.Data[i*n : (i+1)*n]})
	}
	v, err := weights.Float32(t)
	if err != nil {
		bd.err = err
		return nil
	}
	m := len(v) / 3
	rows, cols := 1, m
	if len(shape) == 2 {
		rows, cols = shape[0], shape[1]
	}
	return bd.upload(v[i*m:(i+1)*m], rows, cols)
}
