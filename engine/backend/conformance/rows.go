package conformance

// The cases of the row and shape ops the joint head needs (Reshape,
// Transpose, Softmax, SpanMeans, RowDots, PairFeatures, GroupMatMul, and
// Embed as a gather of activation rows).

import (
	"fmt"
	"math"
)

// TolRows is the NMSE bound of the row ops that sum in float32 (SpanMeans,
// RowDots, Softmax, GroupMatMul) against their float64 references.
const TolRows = 1e-10

func testReshape(s *suite) {
	x := s.randn(6*10, 1)
	tx := s.upload(x, 6, 10)
	for _, sh := range [][2]int{{60, 1}, {3, 20}, {12, 5}, {6, 10}} {
		got, err := s.b.Reshape(tx, sh[0], sh[1])
		if err != nil {
			s.t.Fatalf("Reshape %v: %v", sh, err)
		}
		if got.Rows() != sh[0] || got.Cols() != sh[1] {
			s.t.Errorf("Reshape %v: shape %v", sh, got.Shape)
		}
		s.check(fmt.Sprintf("Reshape %v", sh), s.read(got), x, 0)
		// A reshaped tensor is an activation like any other.
		sum, err := s.b.Add(got, got)
		if err != nil {
			s.t.Fatalf("Add of a reshaped tensor: %v", err)
		}
		want := make([]float32, len(x))
		for i, v := range x {
			want[i] = v + v
		}
		s.check(fmt.Sprintf("Add of Reshape %v", sh), s.read(sum), want, TolExact)
		s.b.Free(sum, got)
	}
	s.unchanged("Reshape x", tx, x)
}

// testEmbedActivation gathers rows of an activation (Embed with an
// uploaded table), as the joint head gathers per-option rows.
func testEmbedActivation(s *suite) {
	r, c := 9, 70
	x := s.randn(r*c, 1)
	tx := s.upload(x, r, c)
	ids := []int{8, 0, 3, 3, 7}
	got, err := s.b.Embed(tx, ids)
	if err != nil {
		s.t.Fatal(err)
	}
	var want []float32
	for _, id := range ids {
		want = append(want, x[id*c:(id+1)*c]...)
	}
	s.check("Embed of an activation", s.read(got), want, 0)
	s.unchanged("Embed table", tx, x)
	if _, err := s.b.Embed(tx, []int{9}); err == nil {
		s.t.Error("Embed of an activation: row 9 of 9: no error")
	}
}

func testTranspose(s *suite) {
	for _, sh := range [][2]int{{1, 1}, {1, 7}, {9, 1}, {33, 70}, {64, 65}} {
		r, c := sh[0], sh[1]
		x := s.randn(r*c, 1)
		tx := s.upload(x, r, c)
		got, err := s.b.Transpose(tx)
		if err != nil {
			s.t.Fatalf("Transpose %v: %v", sh, err)
		}
		if got.Rows() != c || got.Cols() != r {
			s.t.Errorf("Transpose %v: shape %v", sh, got.Shape)
		}
		want := make([]float32, r*c)
		for i := range r {
			for j := range c {
				want[j*r+i] = x[i*c+j]
			}
		}
		s.check(fmt.Sprintf("Transpose %v", sh), s.read(got), want, 0)
		s.unchanged("Transpose x", tx, x)
	}
}

// refSoftmax is the softmax of scale·x over each row's range in float64
// (the scaled values rounded to float32 first, as the op specifies).
func refSoftmax(x []float32, r, c int, scale float32, ranges [][2]int) []float32 {
	out := make([]float32, r*c)
	for i := range r {
		lo, hi := 0, c
		if ranges != nil {
			lo, hi = ranges[i][0], ranges[i][1]
		}
		m := math.Inf(-1)
		for j := lo; j < hi; j++ {
			m = math.Max(m, float64(x[i*c+j]*scale))
		}
		var sum float64
		for j := lo; j < hi; j++ {
			sum += math.Exp(float64(x[i*c+j]*scale) - m)
		}
		for j := lo; j < hi; j++ {
			out[i*c+j] = float32(math.Exp(float64(x[i*c+j]*scale)-m) / sum)
		}
	}
	return out
}

func testSoftmax(s *suite) {
	for _, c := range []struct {
		r, c   int
		scale  float32
		ranges [][2]int
	}{
		{1, 1, 1, nil},
		{5, 37, 0.125, nil},
		{3, 700, 1, nil},
		{4, 9, 0.5, [][2]int{{0, 9}, {2, 3}, {0, 4}, {4, 9}}},
		{3, 300, 0.0625, [][2]int{{10, 290}, {0, 1}, {299, 300}}},
	} {
		x := s.randn(c.r*c.c, 4)
		x[0] = 30 // a large logit: the maximum must be subtracted
		tx := s.upload(x, c.r, c.c)
		got, err := s.b.Softmax(tx, c.scale, c.ranges)
		if err != nil {
			s.t.Fatalf("Softmax %dx%d: %v", c.r, c.c, err)
		}
		what := fmt.Sprintf("Softmax [%d %d] ranges %v", c.r, c.c, c.ranges != nil)
		g := s.read(got)
		s.check(what, g, refSoftmax(x, c.r, c.c, c.scale, c.ranges), TolRows)
		for i, v := range g {
			lo, hi := 0, c.c
			if c.ranges != nil {
				lo, hi = c.ranges[i/c.c][0], c.ranges[i/c.c][1]
			}
			if j := i % c.c; (j < lo || j >= hi) && v != 0 {
				s.t.Errorf("%s: [%d, %d] = %v outside the row's range, want 0", what, i/c.c, j, v)
				break
			}
		}
		s.unchanged("Softmax x", tx, x)
	}
}

func testSpanMeans(s *suite) {
	r, c := 40, 70
	x := s.randn(r*c, 1)
	tx := s.upload(x, r, c)
	for _, spans := range [][][2]int{
		{{0, 1}},
		{{39, 40}, {0, 40}, {5, 17}, {5, 17}, {12, 13}},
		{{3, 9}, {1, 2}, {20, 38}},
	} {
		got, err := s.b.SpanMeans(tx, spans)
		if err != nil {
			s.t.Fatalf("SpanMeans %v: %v", spans, err)
		}
		if got.Rows() != len(spans) || got.Cols() != c {
			s.t.Errorf("SpanMeans %v: shape %v", spans, got.Shape)
		}
		want := make([]float32, len(spans)*c)
		for i, sp := range spans {
			for j := range c {
				var sum float64
				for k := sp[0]; k < sp[1]; k++ {
					sum += float64(x[k*c+j])
				}
				want[i*c+j] = float32(sum / float64(sp[1]-sp[0]))
			}
		}
		s.check(fmt.Sprintf("SpanMeans %v", spans), s.read(got), want, TolRows)
	}
	s.unchanged("SpanMeans x", tx, x)
}

func testRowDots(s *suite) {
	for _, sh := range [][2]int{{1, 1}, {7, 33}, {12, 1024}, {3, 2049}} {
		r, c := sh[0], sh[1]
		a, b := s.randn(r*c, 1), s.randn(r*c, 1)
		ta, tb := s.upload(a, r, c), s.upload(b, r, c)
		got, err := s.b.RowDots(ta, tb)
		if err != nil {
			s.t.Fatalf("RowDots %v: %v", sh, err)
		}
		if got.Rows() != r || got.Cols() != 1 {
			s.t.Errorf("RowDots %v: shape %v", sh, got.Shape)
		}
		want := make([]float32, r)
		for i := range r {
			var sum float64
			for j := range c {
				sum += float64(a[i*c+j]) * float64(b[i*c+j])
			}
			want[i] = float32(sum)
		}
		s.check(fmt.Sprintf("RowDots %v", sh), s.read(got), want, TolRows)
		s.unchanged("RowDots a", ta, a)
		s.unchanged("RowDots b", tb, b)
	}
}

func testPairFeatures(s *suite) {
	for _, sh := range [][2]int{{1, 1}, {5, 37}, {12, 256}} {
		r, c := sh[0], sh[1]
		a, b := s.randn(r*c, 1), s.randn(r*c, 1)
		ta, tb := s.upload(a, r, c), s.upload(b, r, c)
		got, err := s.b.PairFeatures(ta, tb)
		if err != nil {
			s.t.Fatalf("PairFeatures %v: %v", sh, err)
		}
		if got.Rows() != r || got.Cols() != 4*c {
			s.t.Errorf("PairFeatures %v: shape %v", sh, got.Shape)
		}
		want := make([]float32, 4*r*c)
		for i := range r {
			o := want[4*i*c : 4*(i+1)*c]
			for j := range c {
				u, v := a[i*c+j], b[i*c+j]
				o[j], o[c+j], o[2*c+j], o[3*c+j] = u, v, u*v, float32(math.Abs(float64(u-v)))
			}
		}
		s.check(fmt.Sprintf("PairFeatures %v", sh), s.read(got), want, 0)
		s.unchanged("PairFeatures a", ta, a)
		s.unchanged("PairFeatures b", tb, b)
	}
}

func testGroupMatMul(s *suite) {
	for _, c := range []struct{ m, g, n, k int }{{1, 1, 1, 1}, {3, 4, 33, 8}, {12, 16, 64, 64}, {5, 3, 7, 45}, {2, 16, 8, 70}} {
		x := s.randn(c.m*c.g*c.k, 1)
		w := s.randn(c.g*c.n*c.k, 1/math.Sqrt(float64(c.k)))
		tx, tw := s.upload(x, c.m, c.g*c.k), s.upload(w, c.g*c.n, c.k)
		got, err := s.b.GroupMatMul(tx, tw, c.g)
		if err != nil {
			s.t.Fatalf("GroupMatMul %+v: %v", c, err)
		}
		if got.Rows() != c.m || got.Cols() != c.g*c.n {
			s.t.Errorf("GroupMatMul %+v: shape %v", c, got.Shape)
		}
		want := make([]float32, c.m*c.g*c.n)
		for i := range c.m {
			for g := range c.g {
				for j := range c.n {
					var sum float64
					for t := range c.k {
						sum += float64(x[i*c.g*c.k+g*c.k+t]) * float64(w[(g*c.n+j)*c.k+t])
					}
					want[i*c.g*c.n+g*c.n+j] = float32(sum)
				}
			}
		}
		s.check(fmt.Sprintf("GroupMatMul %+v", c), s.read(got), want, TolRows)
		s.unchanged("GroupMatMul x", tx, x)
		s.unchanged("GroupMatMul w", tw, w)
	}
}

// rowOpErrors are the bad calls of the row and shape ops every backend
// must refuse with an error.
func (s *suite) rowOpErrors() map[string]func() error {
	a := s.upload(s.randn(6, 1), 2, 3)
	b := s.upload(s.randn(8, 1), 2, 4)
	w := s.upload(s.randn(12, 1), 4, 3)
	return map[string]func() error{
		"Reshape count":         func() error { _, err := s.b.Reshape(a, 4, 2); return err },
		"Reshape negative":      func() error { _, err := s.b.Reshape(a, -2, -3); return err },
		"Softmax ranges count":  func() error { _, err := s.b.Softmax(a, 1, [][2]int{{0, 3}}); return err },
		"Softmax empty range":   func() error { _, err := s.b.Softmax(a, 1, [][2]int{{0, 3}, {2, 2}}); return err },
		"Softmax range outside": func() error { _, err := s.b.Softmax(a, 1, [][2]int{{0, 3}, {1, 4}}); return err },
		"SpanMeans empty":       func() error { _, err := s.b.SpanMeans(a, [][2]int{{1, 1}}); return err },
		"SpanMeans outside":     func() error { _, err := s.b.SpanMeans(a, [][2]int{{1, 3}}); return err },
		"SpanMeans negative":    func() error { _, err := s.b.SpanMeans(a, [][2]int{{-1, 1}}); return err },
		"RowDots shapes":        func() error { _, err := s.b.RowDots(a, b); return err },
		"PairFeatures shapes":   func() error { _, err := s.b.PairFeatures(a, b); return err },
		"GroupMatMul columns":   func() error { _, err := s.b.GroupMatMul(b, w, 2); return err },
		"GroupMatMul rows":      func() error { _, err := s.b.GroupMatMul(s.upload(s.randn(9, 1), 1, 9), w, 3); return err },
		"GroupMatMul groups":    func() error { _, err := s.b.GroupMatMul(a, w, 0); return err },
		"Transpose nil":         func() error { _, err := s.b.Transpose(nil); return err },
	}
}
