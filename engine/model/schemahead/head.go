// Package schemahead is Clef-Omni's joint schema head: it turns the thinker's
// final hidden states of one record into one logit per allowed option of every
// question (spec clef-omni.md §1.3), and the logits into probabilities.
//
// The package is split by concern:
//   - weights.go loads the head's checkpoint tensors by its tensor table
//     (release.HeadTensors) and checks them, as the reference's
//     load_state_dict(strict=True) does;
//   - bind.go binds them on a backend (engine/backend), once;
//   - forward.go runs a record through the head in float32, every product
//     and every per-row computation as backend ops, in the order of the
//     reference forward pass: hidden norm and memory, question/global/option
//     vectors, evidence routing, field vectors, decoder layers, scoring;
//   - cross.go holds the two forms of cross-attention over the record's
//     memory (direct, and folded by associativity when cheaper).
//
// The host keeps only a record's bookkeeping: its spans, which question
// owns which option, and the last few values per option that combine into
// the logits. The float64 reference the float32 pass is checked against
// lives in the tests.
package schemahead

import (
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
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

// Head is a loaded joint schema head. After Bind, Logits may run
// concurrently when the backend allows concurrent use (cpu does).
type Head struct {
	cfg release.Head
	// p holds the checked checkpoint tensors (weights.go).
	p params

	// b is the backend the head is bound to and w its weights there
	// (bind.go); nil before Bind.
	b backend.Backend
	w *bound
	// crossMode picks the form of the cross-attentions (cross.go):
	// crossAuto except in tests.
	crossMode int
}

// Config returns the head's configuration.
func (h *Head) Config() release.Head { return h.cfg }

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
