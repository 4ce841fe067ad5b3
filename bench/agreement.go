package bench

import (
	"math"

	"github.com/clefrt/clef/engine/api"
)

// KLFloor is the smallest probability the KL divergence uses for the
// compared model: answers carry 4 decimals (as on the wire), so a
// probability printed as 0 is taken as half the rounding step.
const KLFloor = 0.5e-4

// Agreement compares a model's answers with the reference model's on the
// same questions. All figures are over questions: Top1 is the fraction whose
// most probable option is the same, MeanTV the mean total variation
// distance (½Σ|p−q|), MaxAbsDP the largest |p−q| of any option, MeanKL the
// mean KL(reference ‖ model) in nats.
type Agreement struct {
	Questions int     `json:"questions"`
	Top1      float64 `json:"top1_agreement"`
	MeanTV    float64 `json:"mean_total_variation"`
	MaxAbsDP  float64 `json:"max_abs_dp"`
	MeanKL    float64 `json:"mean_kl"`
}

// QuestionDiff is the comparison of one question's distributions.
type QuestionDiff struct {
	SameTop1 bool
	TV       float64
	MaxAbsDP float64
	KL       float64
}

// Compare compares distribution q (the model) with p (the reference) over
// the same options. Both must have the same length (else ok is false).
func Compare(p, q []float64) (d QuestionDiff, ok bool) {
	if len(p) != len(q) || len(p) == 0 {
		return d, false
	}
	d.SameTop1 = argmax(p) == argmax(q)
	for i := range p {
		diff := math.Abs(p[i] - q[i])
		d.TV += diff
		d.MaxAbsDP = math.Max(d.MaxAbsDP, diff)
		if p[i] > 0 {
			d.KL += p[i] * math.Log(p[i]/math.Max(q[i], KLFloor))
		}
	}
	d.TV /= 2
	// Rounded inputs can make the sum slightly negative; KL is ≥ 0.
	d.KL = math.Max(d.KL, 0)
	return d, true
}

// argmax returns the index of the largest value, the first one on a tie
// (as the reference picks a choice's answer).
func argmax(v []float64) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

// AgreementSet accumulates agreement per question type and over all
// questions.
type AgreementSet struct {
	all    acc
	byType [3]acc
}

type acc struct {
	n                int
	same             int
	tv, kl, maxAbsDP float64
}

func (a *acc) add(d QuestionDiff) {
	a.n++
	if d.SameTop1 {
		a.same++
	}
	a.tv += d.TV
	a.kl += d.KL
	a.maxAbsDP = math.Max(a.maxAbsDP, d.MaxAbsDP)
}

func (a *acc) result() *Agreement {
	if a.n == 0 {
		return nil
	}
	n := float64(a.n)
	return &Agreement{Questions: a.n, Top1: float64(a.same) / n, MeanTV: a.tv / n, MaxAbsDP: a.maxAbsDP, MeanKL: a.kl / n}
}

// Add records one question of type typ (0 noul, 1 choice, 2 score); it
// reports false when the two distributions do not line up.
func (s *AgreementSet) Add(typ int, ref, got []float64) bool {
	d, ok := Compare(ref, got)
	if !ok {
		return false
	}
	s.all.add(d)
	if typ >= 0 && typ < len(s.byType) {
		s.byType[typ].add(d)
	}
	return true
}

// Merge adds everything o accumulated.
func (s *AgreementSet) Merge(o *AgreementSet) {
	merge := func(a *acc, b acc) {
		a.n += b.n
		a.same += b.same
		a.tv += b.tv
		a.kl += b.kl
		a.maxAbsDP = math.Max(a.maxAbsDP, b.maxAbsDP)
	}
	merge(&s.all, o.all)
	for i := range s.byType {
		merge(&s.byType[i], o.byType[i])
	}
}

// Result returns the figures keyed "all", "noul", "choice", "score" (types
// with no question are left out); nil when nothing was compared.
func (s *AgreementSet) Result() map[string]*Agreement {
	if s.all.n == 0 {
		return nil
	}
	out := map[string]*Agreement{"all": s.all.result()}
	for t := range s.byType {
		if r := s.byType[t].result(); r != nil {
			out[api.QuestionType(t).String()] = r
		}
	}
	return out
}
