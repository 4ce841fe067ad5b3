package schemahead

import (
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// Cross-attention of a few query rows (the options, or the fields) over the
// L rows of the record's memory is nearly all of the head's work on a long
// record. torch computes it as
//
//	K = X·Wkᵀ + bk, V = X·Wvᵀ + bv   (two L×width×width products)
//	out_h = softmax(s·Q_h·K_hᵀ)·V_h   (per head h, s = 1/sqrt(head_dim))
//
// With few query rows the same quantities come cheaper by associativity:
// Q_h·K_hᵀ = (Q_h·Wk_h)·Xᵀ + Q_h·bk_h, whose last term is the same for every
// key of a row and so leaves the softmax unchanged, and since every softmax
// row sums to 1, softmax(·)·V_h = (softmax(·)·X)·Wv_hᵀ + bv_h. The "folded"
// form runs two products of (rows·heads)×L×width instead of two of
// L×width×width, so it wins while rows·(heads−1) < width (a dozen options
// of a real head: about five times less work). Both forms are the same
// arithmetic up to float32 rounding; the head picks the cheaper one per
// attention. In backend ops the folded form is
//
//	Qk = GroupMatMul(Q, kT, heads) as [rows·heads, width]   row (i, h) = Q_{i,h}·Wk_h
//	P  = Softmax(Qk·Xᵀ, s)                                  [rows·heads, L]
//	Z  = P·(Xᵀ)ᵀ as [rows, heads·width]                     MatMul against Transpose(X)
//	out_proj(GroupMatMul(Z, Wv, heads) + bv)

// Cross-attention modes (Head.crossMode): automatic by cost, or one form
// always (tests run both on every golden case).
const (
	crossAuto = iota
	crossDirect
	crossFolded
)

// memory is the key/value source of a cross-attention: x [L, width] on the
// backend, and its transpose [width, L] once the folded form needs it.
type memory struct {
	x, xt *backend.Tensor
}

// free drops the memory's tensors.
func (m *memory) free(p *pass) { p.drop(m.x, m.xt) }

// folded reports whether a cross-attention of nq query rows uses the folded
// form: forced by crossMode, else when it is the cheaper one.
func (h *Head) folded(nq int) bool {
	switch h.crossMode {
	case crossDirect:
		return false
	case crossFolded:
		return true
	}
	return nq*(h.cfg.Heads-1) < h.cfg.Width
}

// scale is the attention's score scale 1/sqrt(head_dim).
func (h *Head) scale() float32 { return float32(1 / math.Sqrt(float64(h.cfg.Width/h.cfg.Heads))) }

// attentionOptions are those of the head's bidirectional attentions.
func (h *Head) attentionOptions() backend.AttentionOptions {
	return backend.AttentionOptions{Heads: h.cfg.Heads, KVHeads: h.cfg.Heads, Scale: h.scale()}
}

// crossAttend is torch's multi-head attention of the queries q [nq, width]
// over the memory (keys and values both m.x), out_proj included.
func (h *Head) crossAttend(p *pass, a *attention, q *backend.Tensor, nq int, m *memory) *backend.Tensor {
	Q := p.linear(q, a.q)
	if !h.folded(nq) {
		K, V := p.linear(m.x, a.k), p.linear(m.x, a.v)
		o := p.attention(Q, K, V, h.attentionOptions())
		p.drop(K, V)
		return p.linear(o, a.out)
	}
	heads, w := h.cfg.Heads, h.cfg.Width
	if m.xt == nil {
		m.xt = p.transpose(m.x)
	}
	qk := p.reshape(p.groupMatMul(Q, a.kT, heads), nq*heads, w)
	scores := p.matMul(qk, m.x)
	probs := p.softmax(scores, h.scale(), nil)
	p.drop(scores)
	z := p.reshape(p.matMul(probs, m.xt), nq, heads*w)
	p.drop(probs)
	return p.linear(p.addBias(p.groupMatMul(z, a.v.w, heads), a.v.b), a.out)
}

// selfAttend is torch's multi-head self-attention of the rows of x (a
// handful of fields), out_proj included.
func (h *Head) selfAttend(p *pass, a *attention, x *backend.Tensor) *backend.Tensor {
	return p.linear(p.attention(p.linear(x, a.q), p.linear(x, a.k), p.linear(x, a.v), h.attentionOptions()), a.out)
}
