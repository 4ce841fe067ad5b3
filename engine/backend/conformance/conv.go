package conformance

// The cases of the ops of the encoders' input stages: GatherBlend (the
// vision tower's bilinear interpolation of its learned position
// embeddings) and Im2Col (the audio tower's convolutions as matmuls).

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

// refGatherBlend is Σ_j weights[i*k+j] · table[ids[i*k+j]] in float64.
func refGatherBlend(table []float32, n int, ids []int, weights []float32, k int) []float32 {
	out := make([]float32, len(ids)/k*n)
	for i := 0; i < len(ids)/k; i++ {
		for c := 0; c < n; c++ {
			var s float64
			for j := i * k; j < (i+1)*k; j++ {
				s += float64(weights[j]) * float64(table[ids[j]*n+c])
			}
			out[i*n+c] = float32(s)
		}
	}
	return out
}

// blendTerms returns m rows of k (id, weight) terms over a table of rows
// rows: bilinear corner weights (positive, summing to 1) when bilinear is
// set, any signs otherwise.
func (s *suite) blendTerms(m, k, rows int, bilinear bool) ([]int, []float32) {
	ids := make([]int, m*k)
	ws := make([]float32, m*k)
	for i := 0; i < m; i++ {
		if bilinear && k == 4 {
			// The four corners of a cell of a 2-D grid and their weights
			// (1-dy)(1-dx), (1-dy)dx, dy(1-dx), dy·dx.
			side := int(math.Sqrt(float64(rows)))
			y, x := s.rng.IntN(side-1), s.rng.IntN(side-1)
			dy, dx := float32(s.rng.Float64()), float32(s.rng.Float64())
			copy(ids[i*k:], []int{y*side + x, y*side + x + 1, (y+1)*side + x, (y+1)*side + x + 1})
			copy(ws[i*k:], []float32{(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx})
			continue
		}
		for j := i * k; j < (i+1)*k; j++ {
			ids[j] = s.rng.IntN(rows)
			ws[j] = float32(s.rng.NormFloat64())
		}
	}
	if len(ids) > 0 {
		ids[0] = rows - 1 // the last row is reachable
	}
	return ids, ws
}

func testGatherBlend(s *suite) {
	rows, n := 49, 70 // a 7x7 grid of embeddings
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		w, deq := s.weight("pos_embed", typ, s.randn(rows*n, 1), rows, n)
		for _, c := range []struct {
			m, k     int
			bilinear bool
		}{{1, 1, false}, {13, 1, false}, {1, 4, true}, {37, 4, true}, {9, 4, false}, {5, 3, false}} {
			ids, ws := s.blendTerms(c.m, c.k, rows, c.bilinear)
			got, err := s.b.GatherBlend(w, ids, ws, c.k)
			if err != nil {
				s.t.Fatalf("GatherBlend %v m=%d k=%d: %v", typ, c.m, c.k, err)
			}
			if got.Rows() != c.m || got.Cols() != n {
				s.t.Fatalf("GatherBlend %v m=%d k=%d: shape %v, want [%d %d]", typ, c.m, c.k, got.Shape, c.m, n)
			}
			s.check(fmt.Sprintf("GatherBlend %v m=%d k=%d bilinear=%v", typ, c.m, c.k, c.bilinear), s.read(got), refGatherBlend(deq, n, ids, ws, c.k), TolExact)
			s.b.Free(got)
		}
	}
	// An activation as the table, an odd width.
	rows, n = 25, 37
	x := s.randn(rows*n, 1)
	tx := s.upload(x, rows, n)
	for _, k := range []int{1, 4} {
		ids, ws := s.blendTerms(11, k, rows, k == 4)
		got, err := s.b.GatherBlend(tx, ids, ws, k)
		if err != nil {
			s.t.Fatalf("GatherBlend activation k=%d: %v", k, err)
		}
		s.check(fmt.Sprintf("GatherBlend activation k=%d", k), s.read(got), refGatherBlend(x, n, ids, ws, k), TolExact)
	}
	s.unchanged("GatherBlend table", tx, x)
	// No ids: no rows.
	got, err := s.b.GatherBlend(tx, nil, nil, 4)
	if err != nil {
		s.t.Fatalf("GatherBlend of no ids: %v", err)
	}
	if got.Rows() != 0 || got.Cols() != n {
		s.t.Errorf("GatherBlend of no ids: shape %v, want [0 %d]", got.Shape, n)
	}
}

// refIm2Col unfolds x by the definition: out[(n, oy, ox)][(c, ky, kx)] =
// x[n, oy*SH-PH+ky, ox*SW-PW+kx, c], 0 outside the picture.
func refIm2Col(x []float32, g backend.Conv2D) []float32 {
	oh := (g.H+2*g.PH-g.KH)/g.SH + 1
	ow := (g.W+2*g.PW-g.KW)/g.SW + 1
	cols := g.C * g.KH * g.KW
	out := make([]float32, g.N*oh*ow*cols)
	for n := 0; n < g.N; n++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				row := (n*oh+oy)*ow + ox
				for c := 0; c < g.C; c++ {
					for ky := 0; ky < g.KH; ky++ {
						for kx := 0; kx < g.KW; kx++ {
							y, xx := oy*g.SH-g.PH+ky, ox*g.SW-g.PW+kx
							if y < 0 || y >= g.H || xx < 0 || xx >= g.W {
								continue
							}
							out[row*cols+(c*g.KH+ky)*g.KW+kx] = x[((n*g.H+y)*g.W+xx)*g.C+c]
						}
					}
				}
			}
		}
	}
	return out
}

// refConv2D is a torch Conv2d in float64: w [Cout, C, KH, KW], x
// channels-last, out channels-last [N*OH*OW, Cout].
func refConv2D(x, w []float32, cout int, g backend.Conv2D) []float32 {
	oh := (g.H+2*g.PH-g.KH)/g.SH + 1
	ow := (g.W+2*g.PW-g.KW)/g.SW + 1
	out := make([]float32, g.N*oh*ow*cout)
	for n := 0; n < g.N; n++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				for o := 0; o < cout; o++ {
					var s float64
					for c := 0; c < g.C; c++ {
						for ky := 0; ky < g.KH; ky++ {
							for kx := 0; kx < g.KW; kx++ {
								y, xx := oy*g.SH-g.PH+ky, ox*g.SW-g.PW+kx
								if y >= 0 && y < g.H && xx >= 0 && xx < g.W {
									s += float64(w[((o*g.C+c)*g.KH+ky)*g.KW+kx]) * float64(x[((n*g.H+y)*g.W+xx)*g.C+c])
								}
							}
						}
					}
					out[((n*oh+oy)*ow+ox)*cout+o] = float32(s)
				}
			}
		}
	}
	return out
}

func testIm2Col(s *suite) {
	type C = backend.Conv2D
	for _, g := range []C{
		{N: 1, H: 5, W: 7, C: 1, KH: 3, KW: 3, SH: 1, SW: 1},
		{N: 1, H: 9, W: 11, C: 1, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1}, // the audio tower's first convolution
		{N: 3, H: 7, W: 5, C: 3, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1},
		{N: 1, H: 9, W: 11, C: 7, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1},
		{N: 3, H: 5, W: 9, C: 7, KH: 3, KW: 3, SH: 2, SW: 2},
		{N: 2, H: 4, W: 6, C: 1, KH: 3, KW: 2, SH: 1, SW: 2, PH: 1},
		{N: 1, H: 1, W: 1, C: 3, KH: 1, KW: 1, SH: 1, SW: 1, PH: 1, PW: 1}, // windows wholly in the padding
		{N: 1, H: 3, W: 3, C: 2, KH: 5, KW: 5, SH: 1, SW: 1, PH: 1, PW: 1}, // kernel larger than the picture
		{N: 2, H: 17, W: 13, C: 40, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1},
		// The reshuffle [N, F, T, C] -> [N*T, C*F] before conv_out.
		{N: 1, H: 5, W: 7, C: 3, KH: 5, KW: 1, SH: 1, SW: 1},
		{N: 3, H: 9, W: 5, C: 7, KH: 9, KW: 1, SH: 1, SW: 1},
	} {
		x := s.randn(g.N*g.H*g.W*g.C, 1)
		tx := s.upload(x, g.N*g.H*g.W, g.C)
		got, err := s.b.Im2Col(tx, g)
		if err != nil {
			s.t.Fatalf("Im2Col %+v: %v", g, err)
		}
		oh, ow := g.Out()
		if got.Rows() != g.N*oh*ow || got.Cols() != g.C*g.KH*g.KW {
			s.t.Fatalf("Im2Col %+v: shape %v, want [%d %d]", g, got.Shape, g.N*oh*ow, g.C*g.KH*g.KW)
		}
		gv := s.read(got)
		s.check(fmt.Sprintf("Im2Col %+v", g), gv, refIm2Col(x, g), 0)
		s.unchanged("Im2Col x", tx, x)
		if g.KH == g.H && g.KW == 1 && g.PH == 0 && g.PW == 0 {
			// Also as the permutation it is: x [N, F=H, T=W, C] -> out
			// [N*T, C*F] with out[(n, t)][(c, f)] = x[n, f, t, c].
			want := make([]float32, len(x))
			for n := 0; n < g.N; n++ {
				for f := 0; f < g.H; f++ {
					for t := 0; t < g.W; t++ {
						for c := 0; c < g.C; c++ {
							want[(n*g.W+t)*g.C*g.H+c*g.H+f] = x[((n*g.H+f)*g.W+t)*g.C+c]
						}
					}
				}
			}
			s.check(fmt.Sprintf("Im2Col reshuffle %+v", g), gv, want, 0)
		}
		s.b.Free(got)
	}
	// A convolution is MatMul(Im2Col(x), w) with the torch weight
	// [Cout, C, KH, KW] flattened to [Cout, C*KH*KW].
	for _, cc := range []struct {
		g    C
		cout int
	}{
		{C{N: 2, H: 9, W: 7, C: 3, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1}, 5},
		{C{N: 1, H: 6, W: 11, C: 1, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1}, 8},
	} {
		g := cc.g
		x := s.randn(g.N*g.H*g.W*g.C, 1)
		wv := s.randn(cc.cout*g.C*g.KH*g.KW, 1/math.Sqrt(float64(g.C*g.KH*g.KW)))
		cols, err := s.b.Im2Col(s.upload(x, g.N*g.H*g.W, g.C), g)
		if err != nil {
			s.t.Fatalf("Im2Col %+v: %v", g, err)
		}
		w, deq := s.weight("conv.weight", quant.F32, wv, cc.cout, g.C*g.KH*g.KW)
		got, err := s.b.MatMul(cols, w)
		if err != nil {
			s.t.Fatalf("MatMul of Im2Col %+v: %v", g, err)
		}
		s.check(fmt.Sprintf("Conv2d as MatMul(Im2Col) %+v cout=%d", g, cc.cout), s.read(got), refConv2D(x, deq, cc.cout, g), TolFloat)
	}
}

// convOpErrors are the bad calls of GatherBlend and Im2Col every backend
// must refuse with an error.
func (s *suite) convOpErrors() map[string]func() error {
	table := s.upload(s.randn(4*3, 1), 4, 3)
	w, _ := s.weight("table", quant.F32, s.randn(4*32, 1), 4, 32)
	q, _ := s.weight("table", quant.Q8_0, s.randn(4*32, 1), 4, 32)
	blend := func(t *backend.Tensor, ids []int, ws []float32, k int) func() error {
		return func() error { _, err := s.b.GatherBlend(t, ids, ws, k); return err }
	}
	x := s.upload(s.randn(2*3*5*2, 1), 2*3*5, 2) // 2 images of 3x5 pixels, 2 channels
	g := backend.Conv2D{N: 2, H: 3, W: 5, C: 2, KH: 3, KW: 3, SH: 1, SW: 1}
	im2col := func(t *backend.Tensor, f func(*backend.Conv2D)) func() error {
		return func() error {
			h := g
			f(&h)
			_, err := s.b.Im2Col(t, h)
			return err
		}
	}
	return map[string]func() error{
		"GatherBlend id":           blend(table, []int{0, 4}, []float32{1, 1}, 2),
		"GatherBlend weight id":    blend(w, []int{4}, []float32{1}, 1),
		"GatherBlend negative id":  blend(table, []int{-1, 0}, []float32{1, 1}, 1),
		"GatherBlend lengths":      blend(table, []int{0, 1, 2, 3}, []float32{1, 1, 1}, 1),
		"GatherBlend k":            blend(table, []int{0, 1, 2}, []float32{1, 1, 1}, 2),
		"GatherBlend k zero":       blend(table, []int{0}, []float32{1}, 0),
		"GatherBlend block format": blend(q, []int{0}, []float32{1}, 1),
		"GatherBlend nil table":    blend(nil, []int{0}, []float32{1}, 1),
		"Im2Col rows":              im2col(x, func(h *backend.Conv2D) { h.N = 3 }),
		"Im2Col channels":          im2col(x, func(h *backend.Conv2D) { h.C = 3 }),
		"Im2Col kernel":            im2col(x, func(h *backend.Conv2D) { h.KH = 4 }),
		"Im2Col padded kernel":     im2col(x, func(h *backend.Conv2D) { h.KW, h.PW = 8, 1 }),
		"Im2Col stride":            im2col(x, func(h *backend.Conv2D) { h.SW = 0 }),
		"Im2Col padding":           im2col(x, func(h *backend.Conv2D) { h.PH = -1 }),
		"Im2Col kernel zero":       im2col(x, func(h *backend.Conv2D) { h.KH = 0 }),
		"Im2Col images":            im2col(x, func(h *backend.Conv2D) { h.N, h.H = 0, 0 }),
		"Im2Col huge": im2col(x, func(h *backend.Conv2D) {
			h.N, h.H, h.W, h.C = 1, 1<<40, 1<<40, 1
		}),
		"Im2Col overflow": im2col(x, func(h *backend.Conv2D) {
			h.N, h.H, h.W = 1, 1<<20, 1<<20 // N*H*W = 2^40 does not fit, rows 30 or not
		}),
		"Im2Col weight": im2col(w, func(h *backend.Conv2D) { *h = backend.Conv2D{N: 1, H: 2, W: 2, C: 32, KH: 1, KW: 1, SH: 1, SW: 1} }),
		"Im2Col nil":    im2col(nil, func(*backend.Conv2D) {}),
	}
}
