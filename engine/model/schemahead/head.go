// Package schemahead is Clef-Omni's joint schema head: it turns the thinker's
// final hidden states of one record into one logit per allowed option of every
// question (spec clef-omni.md §1.3), and the logits into probabilities.
//
// The file reads top to bottom in the order of the reference forward pass:
// hidden norm and memory, question/global/option vectors, evidence routing,
// field vectors, decoder layers, scoring. The products over the record's L
// tokens (the memory projection and the cross-attentions over the memory,
// cross.go) run on a backend after Bind; the rest, whose size does not grow
// with L, runs in Go. Float32 is the serving mode; float64 (LogitsFloat64)
// exists to check the float32 path.
package schemahead

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
)

// Question types, as the record encoding numbers them.
const (
	TypeNoul   = 0
	TypeChoice = 1
	TypeScore  = 2
)

// layerNormEps is torch.nn.LayerNorm's default epsilon, used by every norm of
// the head.
const layerNormEps = 1e-5

// Question is what the head needs of one encoded question: its type and the
// token spans [start, end) of its instruction and of each option.
type Question struct {
	Type        int
	Span        [2]int
	OptionSpans [][2]int
}

// Lexicon gives rows of the thinker's output embedding (thinker.lm_head.weight,
// [vocab, hidden]) by token id, dequantized to float32. The lexical prior of
// each option is the mean of its tokens' rows.
type Lexicon interface {
	Rows(ids []int) ([][]float32, error)
}

// TensorLexicon reads lexical rows straight from a weights tensor (normally
// thinker.lm_head.weight [vocab, hidden]), dequantizing only the rows asked
// for when the tensor is quantized.
func TensorLexicon(t *weights.Tensor) Lexicon { return tensorLexicon{t} }

type tensorLexicon struct{ t *weights.Tensor }

func (l tensorLexicon) Rows(ids []int) ([][]float32, error) { return weights.Rows(l.t, ids) }

// layerNorm is a torch.nn.LayerNorm over the last dimension.
type layerNorm struct {
	weight, bias []float32 // [n], [n]
}

// linear is a torch.nn.Linear: y = x·Wᵀ + b, W row-major [out, in].
type linear struct {
	weight  []float32 // [out, in]
	bias    []float32 // [out], nil when the layer has none
	in, out int
	// bound is the weight on the backend given to Bind or BindAll; nil
	// when the layer's products run in Go.
	bound *backend.Tensor
}

// attention is a torch.nn.MultiheadAttention. Its packed in_proj_weight
// [3·width, width] and in_proj_bias [3·width] are split at load into the q,
// k and v projections (rows [0, w), [w, 2w), [2w, 3w)).
type attention struct {
	q, k, v linear
	outProj linear // out_proj.weight [width, width], out_proj.bias [width]
	heads   int
	// kT and vh hold, per head h, Wk_hᵀ [width, head_dim] and Wv_h
	// [head_dim, width] on the backend (BindAll, cross-attentions only):
	// the weights of the folded form's per-head products (cross.go).
	kT, vh []*backend.Tensor
}

// evidenceLayer is the reference EvidenceRoutingLayer: pre-norm cross-attention
// of the option queries to the memory, then a GELU feed-forward.
type evidenceLayer struct {
	queryNorm, memoryNorm layerNorm
	attention             attention
	feedforwardNorm       layerNorm
	feedforward0          linear // feedforward.0 [feedforward, width]
	feedforward3          linear // feedforward.3 [width, feedforward]
}

// decoderLayer is a norm-first torch.nn.TransformerDecoderLayer with exact GELU.
type decoderLayer struct {
	selfAttn, multiheadAttn attention
	linear1                 linear // [feedforward, width]
	linear2                 linear // [width, feedforward]
	norm1, norm2, norm3     layerNorm
}

// Head is a loaded joint schema head. It is safe for concurrent use.
type Head struct {
	cfg Config

	hiddenNorm               layerNorm // [hidden]
	memoryProjection         linear    // [width, hidden]
	questionProjection       linear    // [width, hidden]
	optionQuestionProjection linear    // [width, hidden]
	globalProjection         linear    // [width, hidden]
	optionContextProjection  linear    // [width, hidden]
	optionLexicalProjection  linear    // [width, hidden]
	typeEmbedding            []float32 // [3, width]
	evidenceLayers           []evidenceLayer
	optionSummaryNorm        layerNorm // [width]
	layers                   []decoderLayer
	fieldNorm                layerNorm // [width]
	optionNorm               layerNorm // [width]
	residualScorer0          linear    // [width, 4·width]
	residualScorer3          linear    // [1, width]
	priorLogitScale          float32   // []
	jointLogitScale          float32   // []
	residualGate             float32   // []

	// b runs the products over the record's tokens when set (Bind).
	b backend.Backend
	// crossMode picks the form of the cross-attentions (cross.go):
	// crossAuto except in tests.
	crossMode int
}

// Config returns the head's configuration.
func (h *Head) Config() Config { return h.cfg }

// loader reads the head's tensors from a weights.Model, checking every shape
// and remembering the first error.
type loader struct {
	m    weights.Model
	seen map[string]bool
	err  error
}

func (l *loader) tensor(name string, shape ...int) []float32 {
	if l.err != nil {
		return nil
	}
	l.seen[name] = true
	t, err := l.m.Tensor(name)
	if err != nil {
		l.err = fmt.Errorf("joint head: %w", err)
		return nil
	}
	if !sameShape(t.Shape, shape) {
		l.err = fmt.Errorf("joint head: %s has shape %v, want %v", name, t.Shape, shape)
		return nil
	}
	v, err := weights.Float32(t)
	if err != nil {
		l.err = fmt.Errorf("joint head: %s: %w", name, err)
		return nil
	}
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			l.err = fmt.Errorf("joint head: %s holds a non-finite value", name)
			return nil
		}
	}
	return v
}

func (l *loader) norm(prefix string, n int) layerNorm {
	return layerNorm{weight: l.tensor(prefix+".weight", n), bias: l.tensor(prefix+".bias", n)}
}

func (l *loader) linear(prefix string, out, in int, bias bool) linear {
	lin := linear{weight: l.tensor(prefix+".weight", out, in), in: in, out: out}
	if bias {
		lin.bias = l.tensor(prefix+".bias", out)
	}
	return lin
}

func (l *loader) attention(prefix string, width, heads int) attention {
	w := l.tensor(prefix+".in_proj_weight", 3*width, width)
	b := l.tensor(prefix+".in_proj_bias", 3*width)
	a := attention{outProj: l.linear(prefix+".out_proj", width, width, true), heads: heads}
	if l.err != nil {
		return a
	}
	part := func(i int) linear {
		return linear{weight: w[i*width*width : (i+1)*width*width], bias: b[i*width : (i+1)*width], in: width, out: width}
	}
	a.q, a.k, a.v = part(0), part(1), part(2)
	return a
}

func (l *loader) scalar(name string) float32 {
	v := l.tensor(name)
	if len(v) != 1 {
		return 0
	}
	return v[0]
}

// Load reads the head's tensors (the torch state_dict names of
// joint_head.safetensors) from m and checks them against cfg, as the
// reference's load_state_dict(strict=True) does: every tensor must be present
// with its exact shape, and no other tensor may be there, except backbone
// tensors (thinker., talker., code2wav.) when m is a combined file.
func Load(m weights.Model, cfg Config) (*Head, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hs, w, ff := cfg.HiddenSize, cfg.Width, cfg.Feedforward
	l := &loader{m: m, seen: map[string]bool{}}
	h := &Head{cfg: cfg}
	h.hiddenNorm = l.norm("hidden_norm", hs)
	h.memoryProjection = l.linear("memory_projection", w, hs, false)
	h.questionProjection = l.linear("question_projection", w, hs, false)
	h.optionQuestionProjection = l.linear("option_question_projection", w, hs, false)
	h.globalProjection = l.linear("global_projection", w, hs, false)
	h.optionContextProjection = l.linear("option_context_projection", w, hs, false)
	h.optionLexicalProjection = l.linear("option_lexical_projection", w, hs, false)
	h.typeEmbedding = l.tensor("type_embedding.weight", 3, w)
	for i := range cfg.RoutingLayers {
		p := fmt.Sprintf("evidence_layers.%d.", i)
		h.evidenceLayers = append(h.evidenceLayers, evidenceLayer{
			queryNorm:       l.norm(p+"query_norm", w),
			memoryNorm:      l.norm(p+"memory_norm", w),
			attention:       l.attention(p+"attention", w, cfg.Heads),
			feedforwardNorm: l.norm(p+"feedforward_norm", w),
			feedforward0:    l.linear(p+"feedforward.0", ff, w, true),
			feedforward3:    l.linear(p+"feedforward.3", w, ff, true),
		})
	}
	h.optionSummaryNorm = l.norm("option_summary_norm", w)
	for i := range cfg.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		h.layers = append(h.layers, decoderLayer{
			selfAttn:      l.attention(p+"self_attn", w, cfg.Heads),
			multiheadAttn: l.attention(p+"multihead_attn", w, cfg.Heads),
			linear1:       l.linear(p+"linear1", ff, w, true),
			linear2:       l.linear(p+"linear2", w, ff, true),
			norm1:         l.norm(p+"norm1", w),
			norm2:         l.norm(p+"norm2", w),
			norm3:         l.norm(p+"norm3", w),
		})
	}
	h.fieldNorm = l.norm("field_norm", w)
	h.optionNorm = l.norm("option_norm", w)
	h.residualScorer0 = l.linear("residual_scorer.0", w, 4*w, true)
	h.residualScorer3 = l.linear("residual_scorer.3", 1, w, true)
	h.priorLogitScale = l.scalar("prior_logit_scale")
	h.jointLogitScale = l.scalar("joint_logit_scale")
	h.residualGate = l.scalar("residual_gate")
	if l.err != nil {
		return nil, l.err
	}
	var extra []string
	for _, name := range m.Names() {
		if l.seen[name] || strings.HasPrefix(name, "thinker.") || strings.HasPrefix(name, "talker.") || strings.HasPrefix(name, "code2wav.") {
			continue
		}
		extra = append(extra, name)
	}
	if len(extra) > 0 {
		if len(extra) > 5 {
			extra = append(extra[:5], fmt.Sprintf("… (%d more)", len(extra)-5))
		}
		return nil, fmt.Errorf("joint head: unexpected tensors %s (does joint_head_config.json match the weights?)", strings.Join(extra, ", "))
	}
	return h, nil
}

// Logits runs the head in float32 on one record: hidden is the thinker's final
// normed hidden states [L, hidden] row-major, ids the record's L token ids,
// questions its encoded questions. It returns one logit per option, per
// question, in encoded option order.
func (h *Head) Logits(hidden []float32, ids []int, questions []Question, lex Lexicon) ([][]float32, error) {
	return forward[float32](h, hidden, ids, questions, lex, nil)
}

// LogitsFloat64 is Logits computed in float64 throughout (weights and inputs
// widened exactly), to check the float32 path.
func (h *Head) LogitsFloat64(hidden []float32, ids []int, questions []Question, lex Lexicon) ([][]float64, error) {
	return forward[float64](h, hidden, ids, questions, lex, nil)
}

// Softmax returns the softmax of logits in float32, as the reference computes
// each question's probabilities (logits.float().softmax(-1)).
func Softmax(logits []float32) []float32 {
	p := make([]float32, len(logits))
	if len(logits) == 0 {
		return p
	}
	m := logits[0]
	for _, x := range logits {
		if x > m {
			m = x
		}
	}
	var sum float32
	for i, x := range logits {
		p[i] = float32(math.Exp(float64(x - m)))
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// float is the element type of a head pass.
type float interface{ ~float32 | ~float64 }

// trace collects the head's intermediates for tests (names as in the golden
// trace files).
type trace struct {
	normedHidden, memory, questionVectors, optionContexts, optionLexical, routedOptions, fields []float64
	prior, cosine, residual                                                                     []float64
}

func widen[T float](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// checkRecord validates the record against the head before any work.
func (h *Head) checkRecord(nHidden int, ids []int, questions []Question) error {
	L := len(ids)
	if L == 0 {
		return fmt.Errorf("joint head: empty record")
	}
	if nHidden != L*h.cfg.HiddenSize {
		return fmt.Errorf("joint head: %d hidden values for %d tokens of hidden size %d", nHidden, L, h.cfg.HiddenSize)
	}
	if len(questions) == 0 {
		return fmt.Errorf("joint head: record has no questions")
	}
	span := func(what string, s [2]int) error {
		if s[0] < 0 || s[1] > L || s[0] >= s[1] {
			return fmt.Errorf("joint head: %s span [%d, %d) is empty or outside the record's %d tokens", what, s[0], s[1], L)
		}
		return nil
	}
	for qi, q := range questions {
		if q.Type < 0 || q.Type > 2 {
			return fmt.Errorf("joint head: question %d has type %d, want 0 (noul), 1 (choice) or 2 (score)", qi, q.Type)
		}
		if err := span(fmt.Sprintf("question %d", qi), q.Span); err != nil {
			return err
		}
		if len(q.OptionSpans) == 0 {
			return fmt.Errorf("joint head: question %d has no options", qi)
		}
		for oi, s := range q.OptionSpans {
			if err := span(fmt.Sprintf("question %d option %d", qi, oi), s); err != nil {
				return err
			}
		}
	}
	return nil
}

// forward is the head's pass over one record, in element type T.
func forward[T float](h *Head, hiddenIn []float32, ids []int, questions []Question, lex Lexicon, tr *trace) ([][]T, error) {
	if err := h.checkRecord(len(hiddenIn), ids, questions); err != nil {
		return nil, err
	}
	cfg := h.cfg
	L, hs, w := len(ids), cfg.HiddenSize, cfg.Width

	// Hidden norm, memory, global vector.
	hidden, same := any(hiddenIn).([]T)
	if !same {
		hidden = make([]T, len(hiddenIn))
		for i, x := range hiddenIn {
			hidden[i] = T(x)
		}
	}
	normed := applyNorm(&h.hiddenNorm, hidden, L, hs)
	memory, err := project(h, &h.memoryProjection, normed, L)
	if err != nil {
		return nil, err
	}
	global := normed[(L-1)*hs : L*hs]
	// The memory's transpose, for the folded cross-attentions on a backend
	// (cross.go), made once.
	var memoryT []T
	nOptions := 0
	for _, q := range questions {
		nOptions += len(q.OptionSpans)
	}
	if mf, ok := any(memory).([]float32); ok && h.b != nil && (h.folded(len(questions)) || h.folded(nOptions)) {
		memoryT = any(transpose(mf, L, w)).([]T)
	}

	// Question vectors: mean over each instruction span.
	nq := len(questions)
	questionVectors := make([]T, nq*hs)
	for qi, q := range questions {
		spanMean(questionVectors[qi*hs:(qi+1)*hs], normed, hs, q.Span)
	}

	// Option contexts (mean over the option span) and lexical vectors (mean
	// of the lm_head rows of the option's tokens).
	var spans [][2]int
	var owner []int
	for qi, q := range questions {
		for _, s := range q.OptionSpans {
			spans = append(spans, s)
			owner = append(owner, qi)
		}
	}
	no := len(spans)
	optionContexts := make([]T, no*hs)
	for oi, s := range spans {
		spanMean(optionContexts[oi*hs:(oi+1)*hs], normed, hs, s)
	}
	optionLexical, err := lexicalVectors[T](lex, ids, spans, hs)
	if err != nil {
		return nil, err
	}

	// Option queries, routed through the evidence layers.
	contexts, err := project(h, &h.optionContextProjection, optionContexts, no)
	if err != nil {
		return nil, err
	}
	lexq, err := project(h, &h.optionLexicalProjection, optionLexical, no)
	if err != nil {
		return nil, err
	}
	oq, err := project(h, &h.optionQuestionProjection, questionVectors, nq)
	if err != nil {
		return nil, err
	}
	routed := make([]T, no*w)
	for oi := range no {
		qi := owner[oi]
		for j := range w {
			routed[oi*w+j] = contexts[oi*w+j] + lexq[oi*w+j] + oq[qi*w+j]
		}
	}
	for i := range h.evidenceLayers {
		if routed, err = evidenceForward(h, &h.evidenceLayers[i], routed, no, memory, memoryT, L, w); err != nil {
			return nil, err
		}
	}

	// Field vectors: question projection + norm of the softmax-routed option
	// summary + global projection + type embedding.
	baseFields, err := project(h, &h.questionProjection, questionVectors, nq)
	if err != nil {
		return nil, err
	}
	summaries := make([]T, nq*w)
	invSqrtW := 1 / math.Sqrt(float64(w))
	start := 0
	for qi, q := range questions {
		n := len(q.OptionSpans)
		field := baseFields[qi*w : (qi+1)*w]
		scores := make([]T, n)
		for k := range n {
			scores[k] = T(float64(dot(routed[(start+k)*w:(start+k+1)*w], field)) * invSqrtW)
		}
		softmaxInPlace(scores)
		sum := summaries[qi*w : (qi+1)*w]
		for k := range n {
			o := routed[(start+k)*w : (start+k+1)*w]
			for j := range w {
				sum[j] += scores[k] * o[j]
			}
		}
		start += n
	}
	summaryNormed := applyNorm(&h.optionSummaryNorm, summaries, nq, w)
	globalField, err := project(h, &h.globalProjection, global, 1)
	if err != nil {
		return nil, err
	}
	fields := make([]T, nq*w)
	for qi, q := range questions {
		for j := range w {
			fields[qi*w+j] = baseFields[qi*w+j] + summaryNormed[qi*w+j] + globalField[j] + T(h.typeEmbedding[q.Type*w+j])
		}
	}

	// Decoder layers over the fields, then the field norm.
	mem, err := newMemory(h, memory, memoryT, L, w, nq)
	if err != nil {
		return nil, err
	}
	defer mem.free()
	for i := range h.layers {
		if fields, err = decoderForward(h, &h.layers[i], fields, nq, mem, w); err != nil {
			return nil, err
		}
	}
	fields = applyNorm(&h.fieldNorm, fields, nq, w)

	// Scoring: lexical prior + gated joint term.
	priorScale := T(math.Exp(math.Min(float64(h.priorLogitScale), math.Log(100))))
	jointScale := T(math.Exp(math.Min(float64(h.jointLogitScale), math.Log(100))))
	gate := T(1 / (1 + math.Exp(-float64(h.residualGate))))
	options := applyNorm(&h.optionNorm, routed, no, w)
	// The residual scorer's features [field, option, field·option,
	// |field−option|] of every option, scored as one batch.
	features := make([]T, no*4*w)
	for oi := range no {
		field, o := fields[owner[oi]*w:(owner[oi]+1)*w], options[oi*w:(oi+1)*w]
		f := features[oi*4*w : (oi+1)*4*w]
		for j := range w {
			f[j] = field[j]
			f[w+j] = o[j]
			f[2*w+j] = field[j] * o[j]
			f[3*w+j] = max(field[j]-o[j], o[j]-field[j])
		}
	}
	residuals, err := feedforward(h, &h.residualScorer0, &h.residualScorer3, features, no)
	if err != nil {
		return nil, err
	}
	anchor := make([]T, hs)
	lexAnchor := make([]T, hs)
	var priors, cosines []T
	logits := make([][]T, nq)
	start = 0
	for qi, q := range questions {
		for j := range hs {
			anchor[j] = questionVectors[qi*hs+j] + global[j]
		}
		normalize(anchor)
		field := fields[qi*w : (qi+1)*w]
		out := make([]T, len(q.OptionSpans))
		for k := range out {
			oi := start + k
			copy(lexAnchor, optionLexical[oi*hs:(oi+1)*hs])
			normalize(lexAnchor)
			prior := priorScale * dot(lexAnchor, anchor)
			o := options[oi*w : (oi+1)*w]
			cos := cosineSimilarity(field, o)
			residual := residuals[oi]
			out[k] = prior + gate*(jointScale*cos+residual)
			if tr != nil {
				priors, cosines = append(priors, prior), append(cosines, cos)
			}
		}
		logits[qi] = out
		start += len(q.OptionSpans)
	}
	if tr != nil {
		tr.normedHidden, tr.memory = widen(normed), widen(memory)
		tr.questionVectors, tr.optionContexts, tr.optionLexical = widen(questionVectors), widen(optionContexts), widen(optionLexical)
		tr.routedOptions, tr.fields = widen(routed), widen(fields)
		tr.prior, tr.cosine, tr.residual = widen(priors), widen(cosines), widen(residuals)
	}
	for qi, row := range logits {
		for k, x := range row {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("joint head: question %d option %d: logit is %v (non-finite hidden states?)", qi, k, x)
			}
		}
	}
	return logits, nil
}

// lexicalVectors returns, per option span, the mean of the lm_head rows of its
// token ids [n, hidden]; each distinct id is fetched once.
func lexicalVectors[T float](lex Lexicon, ids []int, spans [][2]int, hs int) ([]T, error) {
	if lex == nil {
		return nil, fmt.Errorf("joint head: no output embedding (thinker.lm_head.weight) for the lexical prior")
	}
	index := map[int]int{}
	var unique []int
	for _, s := range spans {
		for _, id := range ids[s[0]:s[1]] {
			if _, ok := index[id]; !ok {
				index[id] = len(unique)
				unique = append(unique, id)
			}
		}
	}
	rows, err := lex.Rows(unique)
	if err != nil {
		return nil, fmt.Errorf("joint head: lexical rows: %w", err)
	}
	if len(rows) != len(unique) {
		return nil, fmt.Errorf("joint head: lexical rows: got %d rows for %d ids", len(rows), len(unique))
	}
	for i, r := range rows {
		if len(r) != hs {
			return nil, fmt.Errorf("joint head: lm_head row of token %d has %d values, want hidden size %d", unique[i], len(r), hs)
		}
	}
	out := make([]T, len(spans)*hs)
	for oi, s := range spans {
		acc := out[oi*hs : (oi+1)*hs]
		for _, id := range ids[s[0]:s[1]] {
			axpyW(acc, 1, rows[index[id]])
		}
		n := T(s[1] - s[0])
		for j := range acc {
			acc[j] /= n
		}
	}
	return out, nil
}

// evidenceForward runs one evidence-routing layer on the option queries q
// [n, width] against the memory [L, width].
//
// memoryT, the transpose of memory, is set when the folded form runs on the
// backend (it needs the transpose of the normed memory).
func evidenceForward[T float](h *Head, e *evidenceLayer, q []T, n int, memory, memoryT []T, L, w int) ([]T, error) {
	nq := applyNorm(&e.queryNorm, q, n, w)
	var nmT []T
	if memoryT != nil && h.folded(n) {
		mean, inv := normStats(memory, L, w)
		nmT = applyNormT(&e.memoryNorm, memoryT, L, w, mean, inv)
	}
	nm, err := newMemory(h, applyNorm(&e.memoryNorm, memory, L, w), nmT, L, w, n)
	if err != nil {
		return nil, err
	}
	defer nm.free()
	routed, err := crossAttend(h, &e.attention, nq, n, nm, w)
	if err != nil {
		return nil, err
	}
	q = add(q, routed)
	ff, err := feedforward(h, &e.feedforward0, &e.feedforward3, applyNorm(&e.feedforwardNorm, q, n, w), n)
	if err != nil {
		return nil, err
	}
	return add(q, ff), nil
}

// decoderForward runs one norm-first decoder layer on the fields x
// [n, width] with the memory [L, width]: self-attention, cross-attention,
// feed-forward.
func decoderForward[T float](h *Head, d *decoderLayer, x []T, n int, memory *memory[T], w int) ([]T, error) {
	sa, err := selfAttend(h, &d.selfAttn, applyNorm(&d.norm1, x, n, w), n, w)
	if err != nil {
		return nil, err
	}
	x = add(x, sa)
	ca, err := crossAttend(h, &d.multiheadAttn, applyNorm(&d.norm2, x, n, w), n, memory, w)
	if err != nil {
		return nil, err
	}
	x = add(x, ca)
	ff, err := feedforward(h, &d.linear1, &d.linear2, applyNorm(&d.norm3, x, n, w), n)
	if err != nil {
		return nil, err
	}
	return add(x, ff), nil
}

// feedforward is Linear → exact GELU → Linear.
func feedforward[T float](h *Head, l1, l2 *linear, x []T, n int) ([]T, error) {
	hidden, err := project(h, l1, x, n)
	if err != nil {
		return nil, err
	}
	geluInPlace(hidden)
	return project(h, l2, hidden, n)
}

// selfAttend is torch's multi-head self-attention of the n rows x
// [n, width] (a handful of fields): q, k, v projections, q scaled by
// 1/sqrt(head_dim), softmax over the keys per head, out_proj.
func selfAttend[T float](h *Head, a *attention, x []T, n, w int) ([]T, error) {
	Q, err := scaledQuery(h, a, x, n, w)
	if err != nil {
		return nil, err
	}
	K, err := project(h, &a.k, x, n)
	if err != nil {
		return nil, err
	}
	V, err := project(h, &a.v, x, n)
	if err != nil {
		return nil, err
	}
	return project(h, &a.outProj, attendKV(Q, n, K, V, n, a.heads, w), n)
}

// Bind makes the head run its products over the record's tokens (the memory
// projection and the cross-attention products over the memory, which are
// nearly all of its work on a long record) on b, in float32 mode; the rest
// stays in Go. The weights of those products (the memory projection, and the
// key/value projections that the direct form of cross-attention uses) are
// uploaded once, here; a call uploads only its activations. After Bind, calls of
// Logits must not overlap unless b allows concurrent use; LogitsFloat64
// never uses b.
func (h *Head) Bind(b backend.Backend) error {
	ls := []*linear{&h.memoryProjection}
	for i := range h.evidenceLayers {
		ls = append(ls, &h.evidenceLayers[i].attention.k, &h.evidenceLayers[i].attention.v)
	}
	for i := range h.layers {
		ls = append(ls, &h.layers[i].multiheadAttn.k, &h.layers[i].multiheadAttn.v)
	}
	return h.bind(b, ls, nil)
}

// BindAll is Bind for every product of the head: the small ones too (the
// option, field, attention and feed-forward projections of a few rows, and
// the per-head products of the folded cross-attention), whose cost does not
// grow with L but which Go runs several times slower than a backend's
// kernels. Every weight is uploaded as float32, once, here (on the cpu
// backend a second copy of the head's ~0.5 GB), and every bound product is
// checked against Go with one row.
func (h *Head) BindAll(b backend.Backend) error {
	ls, cross := h.layersOf()
	return h.bind(b, ls, cross)
}

// layersOf lists every linear layer of the head, and its cross-attentions.
func (h *Head) layersOf() (ls []*linear, cross []*attention) {
	ls = []*linear{&h.memoryProjection, &h.questionProjection, &h.optionQuestionProjection, &h.globalProjection,
		&h.optionContextProjection, &h.optionLexicalProjection, &h.residualScorer0, &h.residualScorer3}
	attn := func(a *attention) { ls = append(ls, &a.q, &a.k, &a.v, &a.outProj) }
	for i := range h.evidenceLayers {
		e := &h.evidenceLayers[i]
		attn(&e.attention)
		cross = append(cross, &e.attention)
		ls = append(ls, &e.feedforward0, &e.feedforward3)
	}
	for i := range h.layers {
		d := &h.layers[i]
		attn(&d.selfAttn)
		attn(&d.multiheadAttn)
		cross = append(cross, &d.multiheadAttn)
		ls = append(ls, &d.linear1, &d.linear2)
	}
	return ls, cross
}

// bind uploads the weights of ls to b, and those of the folded form's
// per-head products of the attentions cross, then checks the first product
// (every product when cross is set) against Go before the head uses b. On
// failure nothing stays bound.
func (h *Head) bind(b backend.Backend, ls []*linear, cross []*attention) error {
	if h.b != nil {
		return fmt.Errorf("joint head: already bound to backend %s", h.b.Name())
	}
	var bound []*backend.Tensor
	fail := func(err error) error {
		b.Free(bound...)
		for _, l := range ls {
			l.bound = nil
		}
		for _, a := range cross {
			a.kT, a.vh = nil, nil
		}
		return fmt.Errorf("joint head: binding to backend %s: %w", b.Name(), err)
	}
	upload := func(w []float32, rows, cols int) (*backend.Tensor, error) {
		t, err := b.Upload(w, rows, cols)
		if err == nil {
			bound = append(bound, t)
		}
		return t, err
	}
	for _, l := range ls {
		t, err := upload(l.weight, l.out, l.in)
		if err != nil {
			return fail(err)
		}
		l.bound = t
	}
	w := h.cfg.Width
	hd := w / h.cfg.Heads
	for _, a := range cross {
		for hh := range a.heads {
			rows := hh * hd * w
			kT, err := upload(transpose(a.k.weight[rows:rows+hd*w], hd, w), w, hd)
			if err != nil {
				return fail(err)
			}
			vh, err := upload(a.v.weight[rows:rows+hd*w], hd, w)
			if err != nil {
				return fail(err)
			}
			a.kT, a.vh = append(a.kT, kT), append(a.vh, vh)
		}
	}
	// Bound products must agree with Go before they are trusted.
	check := func(t *backend.Tensor, in, out int, want func(x []float32) []float32) error {
		x := make([]float32, in)
		for i := range x {
			x[i] = float32(math.Sin(float64(i) + 0.5))
		}
		got, err := uploadProduct(b, x, 1, in, t, out)
		if err != nil {
			return err
		}
		for i, v := range want(x) {
			if d := math.Abs(float64(got[i] - v)); d > 1e-4*(1+math.Abs(float64(v))) || math.IsNaN(float64(got[i])) {
				return fmt.Errorf("check product differs at %d: %v, want %v", i, got[i], v)
			}
		}
		return nil
	}
	for i, l := range ls {
		if i > 0 && cross == nil {
			break
		}
		noBias := *l
		noBias.bias = nil
		if err := check(l.bound, l.in, l.out, func(x []float32) []float32 { return applyLinear(&noBias, x, 1) }); err != nil {
			return fail(err)
		}
	}
	for _, a := range cross {
		for hh := range a.heads {
			rows := hh * hd * w
			kT := linear{weight: transpose(a.k.weight[rows:rows+hd*w], hd, w), in: hd, out: w}
			vh := linear{weight: a.v.weight[rows : rows+hd*w], in: w, out: hd}
			if err := check(a.kT[hh], hd, w, func(x []float32) []float32 { return applyLinear(&kT, x, 1) }); err != nil {
				return fail(err)
			}
			if err := check(a.vh[hh], w, hd, func(x []float32) []float32 { return applyLinear(&vh, x, 1) }); err != nil {
				return fail(err)
			}
		}
	}
	h.b = b
	return nil
}

// project is applyLinear on the bound backend when l is bound there and T is
// float32, in Go otherwise.
func project[T float](h *Head, l *linear, x []T, n int) ([]T, error) {
	if xf, ok := any(x).([]float32); ok && h.b != nil && l.bound != nil {
		y, err := backendLinear(h.b, l, xf, n)
		if err != nil {
			return nil, fmt.Errorf("joint head: backend %s: %w", h.b.Name(), err)
		}
		return any(y).([]T), nil
	}
	return applyLinear(l, x, n), nil
}

// backendLinear computes x·Wᵀ + b on the backend l is bound to.
func backendLinear(b backend.Backend, l *linear, x []float32, n int) ([]float32, error) {
	y, err := uploadProduct(b, x, n, l.in, l.bound, l.out)
	if err != nil {
		return nil, err
	}
	if l.bias != nil {
		addBias(y, l.bias, n)
	}
	return y, nil
}

// applyNorm returns LayerNorm(x) for n rows of size d (biased variance, eps
// 1e-5), the statistics in T over two passes with four partial sums; rows
// are shared out among the CPUs.
func applyNorm[T float](ln *layerNorm, x []T, n, d int) []T {
	out := make([]T, n*d)
	mean, inv := normStats(x, n, d)
	parallel(n, d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o := out[r*d : (r+1)*d]
			for j, v := range x[r*d : (r+1)*d] {
				o[j] = (v-mean[r])*inv[r]*T(ln.weight[j]) + T(ln.bias[j])
			}
		}
	})
	return out
}

// applyNormT returns the transpose [d, n] of applyNorm(ln, x, n, d) from xt,
// the transpose of x, and the row statistics of x: the same values, written
// column by column.
func applyNormT[T float](ln *layerNorm, xt []T, n, d int, mean, inv []T) []T {
	out := make([]T, n*d)
	parallel(d, n, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			o := out[j*n : (j+1)*n]
			wj, bj := T(ln.weight[j]), T(ln.bias[j])
			for r, v := range xt[j*n : (j+1)*n] {
				o[r] = (v-mean[r])*inv[r]*wj + bj
			}
		}
	})
	return out
}

// normStats returns the mean and 1/sqrt(variance + eps) of each of the n
// rows of x [n, d].
func normStats[T float](x []T, n, d int) (mean, inv []T) {
	mean, inv = make([]T, n), make([]T, n)
	parallel(n, 4*d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := x[r*d : (r+1)*d]
			m := sum(row) / T(d)
			var v0, v1, v2, v3 T
			j := 0
			for ; j+4 <= d; j += 4 {
				a, b, c, e := row[j]-m, row[j+1]-m, row[j+2]-m, row[j+3]-m
				v0 += a * a
				v1 += b * b
				v2 += c * c
				v3 += e * e
			}
			for ; j < d; j++ {
				a := row[j] - m
				v0 += a * a
			}
			variance := ((v0 + v1) + (v2 + v3)) / T(d)
			mean[r], inv[r] = m, T(1/math.Sqrt(float64(variance)+layerNormEps))
		}
	})
	return mean, inv
}

// sum is Σ x[i] in T over four partial sums.
func sum[T float](x []T) T {
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Tile sizes of applyLinear: a tile of weight rows is run against blocks of
// input rows so that both stay in cache.
const (
	weightTile = 16
	inputTile  = 32
)

// applyLinear returns x·Wᵀ + b for n rows of x [n, in]. Tiles of weight rows
// are shared out among the CPUs when the work is large.
func applyLinear[T float](l *linear, x []T, n int) []T {
	in, outN := l.in, l.out
	y := make([]T, n*outN)
	tiles := (outN + weightTile - 1) / weightTile
	parallel(tiles, n*in*weightTile, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o0, o1 := t*weightTile, min((t+1)*weightTile, outN)
			for r0 := 0; r0 < n; r0 += inputTile {
				r1 := min(r0+inputTile, n)
				for r := r0; r < r1; r++ {
					xr := x[r*in : (r+1)*in]
					yr := y[r*outN : (r+1)*outN]
					o := o0
					for ; o+4 <= o1; o += 4 {
						yr[o], yr[o+1], yr[o+2], yr[o+3] = dot4W(xr, l.weight[o*in:(o+1)*in], l.weight[(o+1)*in:(o+2)*in], l.weight[(o+2)*in:(o+3)*in], l.weight[(o+3)*in:(o+4)*in])
					}
					for ; o < o1; o++ {
						yr[o] = dotW(xr, l.weight[o*in:(o+1)*in])
					}
				}
				if l.bias != nil {
					for r := r0; r < r1; r++ {
						yr := y[r*outN : (r+1)*outN]
						for o := o0; o < o1; o++ {
							yr[o] += T(l.bias[o])
						}
					}
				}
			}
		}
	})
	return y
}

// dot4W returns the dot products of x with four float32 weight rows, loading
// each x value once.
func dot4W[T float](x []T, a, b, c, d []float32) (T, T, T, T) {
	n := len(x)
	a, b, c, d = a[:n], b[:n], c[:n], d[:n]
	var sa0, sb0, sc0, sd0, sa1, sb1, sc1, sd1 T
	i := 0
	for ; i+2 <= n; i += 2 {
		x0, x1 := x[i], x[i+1]
		sa0 += x0 * T(a[i])
		sb0 += x0 * T(b[i])
		sc0 += x0 * T(c[i])
		sd0 += x0 * T(d[i])
		sa1 += x1 * T(a[i+1])
		sb1 += x1 * T(b[i+1])
		sc1 += x1 * T(c[i+1])
		sd1 += x1 * T(d[i+1])
	}
	if i < n {
		x0 := x[i]
		sa0 += x0 * T(a[i])
		sb0 += x0 * T(b[i])
		sc0 += x0 * T(c[i])
		sd0 += x0 * T(d[i])
	}
	return sa0 + sa1, sb0 + sb1, sc0 + sc1, sd0 + sd1
}

// parallel calls fn over [0, n) split into contiguous chunks, one goroutine
// per CPU when n·cost is worth it.
func parallel(n, cost int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	if workers <= 1 || n*cost < 1<<16 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// dotW is Σ x[i]·w[i] with float32 weights, in T, over four partial sums.
func dotW[T float](x []T, w []float32) T {
	w = w[:len(x)]
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * T(w[i])
		s1 += x[i+1] * T(w[i+1])
		s2 += x[i+2] * T(w[i+2])
		s3 += x[i+3] * T(w[i+3])
	}
	for ; i < len(x); i++ {
		s0 += x[i] * T(w[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dot is Σ a[i]·b[i] in T over four partial sums.
func dot[T float](a, b []T) T {
	b = b[:len(a)]
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func add[T float](a, b []T) []T {
	out := make([]T, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

// spanMean writes the mean of rows [s[0], s[1]) of x (row size d) into dst.
func spanMean[T float](dst, x []T, d int, s [2]int) {
	clear(dst[:d])
	for r := s[0]; r < s[1]; r++ {
		axpy(dst[:d], 1, x[r*d:(r+1)*d])
	}
	n := T(s[1] - s[0])
	for j := range d {
		dst[j] /= n
	}
}

// softmaxInPlace replaces x by its softmax.
func softmaxInPlace[T float](x []T) {
	m := x[0]
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	var sum T
	for i, v := range x {
		x[i] = T(math.Exp(float64(v - m)))
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

// geluInPlace applies the exact (erf) GELU, torch.nn.GELU's default.
func geluInPlace[T float](x []T) {
	for i, v := range x {
		f := float64(v)
		x[i] = T(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
	}
}

// normalize divides x by max(‖x‖, 1e-12), as torch's F.normalize does.
func normalize[T float](x []T) {
	n := math.Sqrt(float64(dot(x, x)))
	n = math.Max(n, 1e-12)
	for i := range x {
		x[i] = T(float64(x[i]) / n)
	}
}

// cosineSimilarity is torch's F.cosine_similarity with eps 1e-8.
func cosineSimilarity[T float](a, b []T) T {
	na := float64(dot(a, a))
	nb := float64(dot(b, b))
	return T(float64(dot(a, b)) / math.Sqrt(math.Max(na*nb, 1e-16)))
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
