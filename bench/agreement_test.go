package bench

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestCompareHandMade(t *testing.T) {
	for _, tc := range []struct {
		name          string
		p, q          []float64
		same          bool
		tv, maxdp, kl float64
	}{
		{"identical", []float64{0.2, 0.5, 0.3}, []float64{0.2, 0.5, 0.3}, true, 0, 0, 0},
		{"flipped noul", []float64{0.7, 0.3}, []float64{0.4, 0.6}, false, 0.3, 0.3,
			0.7*math.Log(0.7/0.4) + 0.3*math.Log(0.3/0.6)},
		{"same top, moved mass", []float64{0.5, 0.25, 0.25}, []float64{0.6, 0.3, 0.1}, true, 0.15, 0.15,
			0.5*math.Log(0.5/0.6) + 0.25*math.Log(0.25/0.3) + 0.25*math.Log(0.25/0.1)},
		// A reference zero contributes nothing; a model zero is floored.
		{"zeros", []float64{1, 0}, []float64{0, 1}, false, 1, 1, math.Log(1 / KLFloor)},
		// Ties go to the first option, as the reference's argmax does.
		{"tie", []float64{0.5, 0.5}, []float64{0.5, 0.5}, true, 0, 0, 0},
	} {
		d, ok := Compare(tc.p, tc.q)
		if !ok {
			t.Fatalf("%s: not comparable", tc.name)
		}
		if d.SameTop1 != tc.same || !near(d.TV, tc.tv) || !near(d.MaxAbsDP, tc.maxdp) || !near(d.KL, tc.kl) {
			t.Errorf("%s: got %+v, want same %v tv %g maxdp %g kl %g", tc.name, d, tc.same, tc.tv, tc.maxdp, tc.kl)
		}
	}
	if _, ok := Compare([]float64{1}, []float64{0.5, 0.5}); ok {
		t.Error("distributions of different lengths compared")
	}
	if _, ok := Compare(nil, nil); ok {
		t.Error("empty distributions compared")
	}
	// Rounded inputs that sum above 1 must not give a negative KL.
	if d, _ := Compare([]float64{0.5, 0.5}, []float64{0.5001, 0.5001}); d.KL < 0 {
		t.Errorf("negative KL %g", d.KL)
	}
}

func TestAgreementSetPerType(t *testing.T) {
	var s AgreementSet
	s.Add(0, []float64{0.7, 0.3}, []float64{0.4, 0.6})           // noul, top-1 differs, tv 0.3
	s.Add(0, []float64{0.9, 0.1}, []float64{0.8, 0.2})           // noul, same, tv 0.1
	s.Add(1, []float64{0.1, 0.2, 0.7}, []float64{0.1, 0.2, 0.7}) // choice, identical
	if s.Add(2, []float64{0.5, 0.5}, []float64{1}) {
		t.Fatal("mismatched question accepted")
	}
	r := s.Result()
	if r["score"] != nil {
		t.Error("a type with no question is reported")
	}
	all, noul, choice := r["all"], r["noul"], r["choice"]
	if all.Questions != 3 || !near(all.Top1, 2.0/3) || !near(all.MeanTV, 0.4/3) || !near(all.MaxAbsDP, 0.3) {
		t.Errorf("all: %+v", all)
	}
	if noul.Questions != 2 || !near(noul.Top1, 0.5) || !near(noul.MeanTV, 0.2) {
		t.Errorf("noul: %+v", noul)
	}
	if choice.Questions != 1 || choice.Top1 != 1 || choice.MeanTV != 0 || choice.MeanKL != 0 {
		t.Errorf("choice: %+v", choice)
	}
	var m AgreementSet
	m.Merge(&s)
	m.Merge(&s)
	if got := m.Result()["all"]; got.Questions != 6 || !near(got.MeanTV, all.MeanTV) || !near(got.MeanKL, all.MeanKL) {
		t.Errorf("merged: %+v", got)
	}
	var empty AgreementSet
	if empty.Result() != nil {
		t.Error("an empty set has a result")
	}
}
