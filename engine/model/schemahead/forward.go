package schemahead

import (
	"context"
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// Logits runs the head in float32 on one record, on the backend it is bound
// to (Bind): hidden is the thinker's final normed hidden states [L, hidden]
// row-major, ids the record's L token ids, questions its encoded
// questions. It returns one logit per option, per question, in encoded
// option order.
func (h *Head) Logits(hidden []float32, ids []int, questions []Question, lex Lexicon) ([][]float32, error) {
	return h.forward(context.Background(), hidden, ids, questions, lex, nil)
}

// LogitsContext is Logits that gives up once ctx is done, between the
// head's ops (and inside them on a backend.Interruptible backend whose
// interrupt the caller set), returning an error that wraps ctx.Err().
func (h *Head) LogitsContext(ctx context.Context, hidden []float32, ids []int, questions []Question, lex Lexicon) ([][]float32, error) {
	return h.forward(ctx, hidden, ids, questions, lex, nil)
}

// trace collects the head's intermediates for tests (names as in the golden
// trace files).
type trace struct {
	normedHidden, memory, questionVectors, optionContexts, optionLexical, routedOptions, fields []float32
	prior, cosine, residual                                                                     []float32
}

// record is the host's bookkeeping of one record: the spans the head pools
// and which question owns which option.
type record struct {
	qSpans, oSpans [][2]int
	owner          []int    // question of each option
	types          []int    // type of each question
	options        [][2]int // the rows [first, end) of each question's options among all options
}

func newRecord(questions []Question) record {
	var r record
	for qi, q := range questions {
		r.qSpans = append(r.qSpans, q.Span)
		r.types = append(r.types, q.Type)
		r.options = append(r.options, [2]int{len(r.owner), len(r.owner) + len(q.OptionSpans)})
		for _, s := range q.OptionSpans {
			r.oSpans = append(r.oSpans, s)
			r.owner = append(r.owner, qi)
		}
	}
	return r
}

// forward is the head's pass over one record.
func (h *Head) forward(ctx context.Context, hidden []float32, ids []int, questions []Question, lex Lexicon, tr *trace) ([][]float32, error) {
	if h.b == nil {
		return nil, fmt.Errorf("joint head: not bound to a backend (Bind)")
	}
	if err := h.checkRecord(len(hidden), ids, questions); err != nil {
		return nil, err
	}
	cfg, w := h.cfg, h.w
	L, hs, nq := len(ids), cfg.HiddenSize, len(questions)
	r := newRecord(questions)
	no := len(r.owner)
	lexRows, lexSpans, err := lexicalRows(lex, ids, r.oSpans, hs)
	if err != nil {
		return nil, err
	}
	p := &pass{b: h.b, ctx: ctx}
	defer p.free()

	// Hidden norm, memory; question, option-context and global vectors
	// (means over the spans: the global row is the last token's).
	x := p.upload(hidden, L, hs)
	normed := p.layerNorm(x, w.hiddenNorm)
	p.drop(x)
	mem := &memory{x: p.linear(normed, w.memoryProjection)}
	questionVectors := p.spanMeans(normed, r.qSpans)
	optionContexts := p.spanMeans(normed, r.oSpans)
	global := p.spanMeans(normed, [][2]int{{L - 1, L}})
	if tr != nil {
		tr.normedHidden, tr.memory = p.read(normed), p.read(mem.x)
	}
	p.drop(normed)
	// Lexical vectors: the mean of the lm_head rows of each option's tokens.
	optionLexical := p.spanMeans(p.upload(lexRows, len(lexRows)/hs, hs), lexSpans)

	// Option queries, routed through the evidence layers.
	routed := p.add(p.add(p.linear(optionContexts, w.optionContextProjection), p.linear(optionLexical, w.optionLexicalProjection)),
		p.embed(p.linear(questionVectors, w.optionQuestionProjection), r.owner))
	for i := range w.evidenceLayers {
		routed = h.evidenceForward(p, &w.evidenceLayers[i], routed, no, mem.x)
	}

	// Field vectors: question projection + norm of the softmax-routed option
	// summary + global projection + type embedding. The summary of question
	// q weighs its options (rows r.options[q] of routed) by a softmax of
	// their dot products with its projection over sqrt(width).
	base := p.linear(questionVectors, w.questionProjection)
	optionWeights := p.softmax(p.matMul(base, routed), float32(1/math.Sqrt(float64(cfg.Width))), r.options)
	summaries := p.matMul(optionWeights, p.transpose(routed))
	fields := p.add(p.addBias(p.add(base, p.layerNorm(summaries, w.optionSummaryNorm)), p.linear(global, w.globalProjection)),
		p.embed(w.typeEmbedding, r.types))

	// Decoder layers over the fields, then the field norm.
	for i := range w.layers {
		fields = h.decoderForward(p, &w.layers[i], fields, nq, mem)
	}
	mem.free(p)
	fields = p.layerNorm(fields, w.fieldNorm)

	// Scoring: lexical prior + gated joint term. Per option: the residual
	// scorer on the features [field, option, field·option, |field−option|],
	// and the dot products of the two cosines.
	options := p.layerNorm(routed, w.optionNorm)
	optionFields := p.embed(fields, r.owner)
	residual := p.linear(p.gelu(p.linear(p.pairFeatures(optionFields, options), w.residualScorer0)), w.residualScorer3)
	anchors := p.embed(p.addBias(questionVectors, global), r.owner)
	fo, ff, oo := p.read(p.rowDots(optionFields, options)), p.read(p.rowDots(optionFields, optionFields)), p.read(p.rowDots(options, options))
	la, ll, aa := p.read(p.rowDots(optionLexical, anchors)), p.read(p.rowDots(optionLexical, optionLexical)), p.read(p.rowDots(anchors, anchors))
	res := p.read(residual)
	if tr != nil {
		tr.questionVectors, tr.optionContexts, tr.optionLexical = p.read(questionVectors), p.read(optionContexts), p.read(optionLexical)
		tr.routedOptions, tr.fields = p.read(routed), p.read(fields)
	}
	if p.err != nil {
		return nil, fmt.Errorf("joint head: backend %s: %w", h.b.Name(), p.err)
	}

	priorScale := float32(math.Exp(math.Min(float64(h.p.priorLogitScale), math.Log(100))))
	jointScale := float32(math.Exp(math.Min(float64(h.p.jointLogitScale), math.Log(100))))
	gate := float32(1 / (1 + math.Exp(-float64(h.p.residualGate))))
	logits := make([][]float32, nq)
	for qi, q := range questions {
		out := make([]float32, len(q.OptionSpans))
		for k := range out {
			oi := r.options[qi][0] + k
			// torch's F.normalize (norms clamped at 1e-12) for the prior,
			// F.cosine_similarity (product of squared norms clamped at
			// 1e-16) for the joint term.
			prior := priorScale * float32(float64(la[oi])/
				(math.Max(math.Sqrt(float64(ll[oi])), 1e-12)*math.Max(math.Sqrt(float64(aa[oi])), 1e-12)))
			cos := float32(float64(fo[oi]) / math.Sqrt(math.Max(float64(ff[oi])*float64(oo[oi]), 1e-16)))
			out[k] = prior + gate*(jointScale*cos+res[oi])
			if math.IsNaN(float64(out[k])) || math.IsInf(float64(out[k]), 0) {
				return nil, fmt.Errorf("joint head: question %d option %d: logit is %v (non-finite hidden states?)", qi, k, out[k])
			}
			if tr != nil {
				tr.prior, tr.cosine = append(tr.prior, prior), append(tr.cosine, cos)
			}
		}
		logits[qi] = out
	}
	if tr != nil {
		tr.residual = res
	}
	return logits, nil
}

// evidenceForward runs one evidence-routing layer on the option queries q
// [n, width] against the memory x [L, width].
func (h *Head) evidenceForward(p *pass, e *evidenceLayer, q *backend.Tensor, n int, x *backend.Tensor) *backend.Tensor {
	m := &memory{x: p.layerNorm(x, e.memoryNorm)}
	routed := h.crossAttend(p, &e.attention, p.layerNorm(q, e.queryNorm), n, m)
	m.free(p)
	q = p.add(q, routed)
	return p.add(q, p.feedforward(p.layerNorm(q, e.feedforwardNorm), e.feedforward0, e.feedforward3))
}

// decoderForward runs one norm-first decoder layer on the fields x
// [n, width] with the memory: self-attention, cross-attention, feed-forward.
func (h *Head) decoderForward(p *pass, d *decoderLayer, x *backend.Tensor, n int, m *memory) *backend.Tensor {
	x = p.add(x, h.selfAttend(p, &d.selfAttn, p.layerNorm(x, d.norm1)))
	x = p.add(x, h.crossAttend(p, &d.multiheadAttn, p.layerNorm(x, d.norm2), n, m))
	return p.add(x, p.feedforward(p.layerNorm(x, d.norm3), d.linear1, d.linear2))
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

// lexicalRows returns the lm_head rows of every option token, in option
// order ([T, hidden] flat, each distinct id fetched once), and the spans of
// each option's rows among them.
func lexicalRows(lex Lexicon, ids []int, spans [][2]int, hs int) ([]float32, [][2]int, error) {
	if lex == nil {
		return nil, nil, fmt.Errorf("joint head: no output embedding (thinker.lm_head.weight) for the lexical prior")
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
		return nil, nil, fmt.Errorf("joint head: lexical rows: %w", err)
	}
	if len(rows) != len(unique) {
		return nil, nil, fmt.Errorf("joint head: lexical rows: got %d rows for %d ids", len(rows), len(unique))
	}
	for i, r := range rows {
		if len(r) != hs {
			return nil, nil, fmt.Errorf("joint head: lm_head row of token %d has %d values, want hidden size %d", unique[i], len(r), hs)
		}
	}
	tokens := 0
	for _, s := range spans {
		tokens += s[1] - s[0]
	}
	out := make([]float32, 0, tokens*hs)
	lexSpans := make([][2]int, len(spans))
	for oi, s := range spans {
		lexSpans[oi][0] = len(out) / hs
		for _, id := range ids[s[0]:s[1]] {
			out = append(out, rows[index[id]]...)
		}
		lexSpans[oi][1] = len(out) / hs
	}
	return out, lexSpans, nil
}

// pass runs one record's ops on the head's backend. It keeps the first
// error (after which every op does nothing and returns nil) and every
// tensor the ops made, which free releases.
type pass struct {
	b    backend.Backend
	ctx  context.Context // checked before every op: a done context is the pass's error
	err  error
	made []*backend.Tensor
}

// ok reports whether the pass may run its next op: no error yet and its
// context not done (which becomes the error).
func (p *pass) ok() bool {
	if p.err == nil {
		if err := p.ctx.Err(); err != nil {
			p.err = err
		}
	}
	return p.err == nil
}

// keep records the result of an op.
func (p *pass) keep(t *backend.Tensor, err error) *backend.Tensor {
	if err != nil {
		if p.err == nil {
			p.err = err
		}
		return nil
	}
	p.made = append(p.made, t)
	return t
}

// drop frees tensors the pass no longer needs (before free would).
func (p *pass) drop(ts ...*backend.Tensor) { p.b.Free(ts...) }

// free releases every tensor the pass made.
func (p *pass) free() { p.b.Free(p.made...) }

func (p *pass) upload(v []float32, rows, cols int) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Upload(v, rows, cols))
}

func (p *pass) read(t *backend.Tensor) []float32 {
	if !p.ok() {
		return nil
	}
	v, err := p.b.Read(p.ctx, t)
	if err != nil {
		p.err = err
	}
	return v
}

func (p *pass) layerNorm(x *backend.Tensor, n norm) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.LayerNorm(x, n.w, n.b, layerNormEps))
}

// linear is x·Wᵀ (+ b).
func (p *pass) linear(x *backend.Tensor, l linear) *backend.Tensor {
	y := p.matMul(x, l.w)
	if l.b == nil {
		return y
	}
	return p.addBias(y, l.b)
}

// feedforward is Linear → exact GELU → Linear.
func (p *pass) feedforward(x *backend.Tensor, l1, l2 linear) *backend.Tensor {
	return p.linear(p.gelu(p.linear(x, l1)), l2)
}

func (p *pass) matMul(x, w *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.MatMul(x, w))
}

func (p *pass) addBias(x, b *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.AddBias(x, b))
}

func (p *pass) add(a, b *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Add(a, b))
}

func (p *pass) gelu(x *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.GELU(x, backend.GELUErf))
}

func (p *pass) embed(table *backend.Tensor, rows []int) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Embed(table, rows))
}

func (p *pass) attention(q, k, v *backend.Tensor, o backend.AttentionOptions) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Attention(q, k, v, o))
}

func (p *pass) spanMeans(x *backend.Tensor, spans [][2]int) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.SpanMeans(x, spans))
}

func (p *pass) softmax(x *backend.Tensor, scale float32, ranges [][2]int) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Softmax(x, scale, ranges))
}

func (p *pass) transpose(x *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Transpose(x))
}

func (p *pass) reshape(x *backend.Tensor, rows, cols int) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.Reshape(x, rows, cols))
}

func (p *pass) groupMatMul(x, w *backend.Tensor, groups int) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.GroupMatMul(x, w, groups))
}

func (p *pass) rowDots(a, b *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.RowDots(a, b))
}

func (p *pass) pairFeatures(a, b *backend.Tensor) *backend.Tensor {
	if !p.ok() {
		return nil
	}
	return p.keep(p.b.PairFeatures(a, b))
}
