package conformance

// The cases of the ops the encoders need (LayerNorm, GELU, AddBias) and of
// the table RoPE and masked Attention the decoder shares with them.

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

// refRoPE rotates x in float64: frequency i of every head turns by
// pos[streams[i]]·inv[i].
func refRoPE(x []float32, pos [][3]int, d int, inv []float64, streams []int) []float32 {
	half := d / 2
	out := make([]float32, len(x))
	c := len(x) / len(pos)
	for p := range pos {
		for h := 0; h < c/d; h++ {
			base := p*c + h*d
			for i := 0; i < half; i++ {
				a := float64(pos[p][streams[i]]) * inv[i]
				co, si := math.Cos(a), math.Sin(a)
				x0, x1 := float64(x[base+i]), float64(x[base+i+half])
				out[base+i] = float32(x0*co - x1*si)
				out[base+i+half] = float32(x1*co + x0*si)
			}
		}
	}
	return out
}

// powInv returns theta^(-2i/dim) for i < n in float64.
func powInv(theta float64, dim, n int) []float64 {
	inv := make([]float64, n)
	for i := range inv {
		inv[i] = math.Pow(theta, -float64(2*i)/float64(dim))
	}
	return inv
}

// refStreams is the M-RoPE stream map, written out independently of
// backend.MRoPE.
func refStreams(half int, sec [3]int, interleaved bool) []int {
	s := make([]int, half)
	for i := range s {
		switch {
		case sec == [3]int{}:
		case interleaved && i%3 == 1 && i < 3*sec[1]:
			s[i] = 1
		case interleaved && i%3 == 2 && i < 3*sec[2]:
			s[i] = 2
		case interleaved:
		case i >= sec[0]+sec[1]:
			s[i] = 2
		case i >= sec[0]:
			s[i] = 1
		}
	}
	return s
}

func testRoPE(s *suite) {
	type mrope struct {
		d           int
		theta       float64
		sec         [3]int
		interleaved bool
	}
	for _, m := range []mrope{
		{16, 1e6, [3]int{4, 2, 2}, true},
		{128, 1e6, [3]int{24, 20, 20}, true},
		{128, 1e6, [3]int{16, 24, 24}, false},
		{64, 1e4, [3]int{}, false},
	} {
		r, err := backend.MRoPE(m.d, m.theta, m.sec, m.interleaved)
		if err != nil {
			s.t.Fatal(err)
		}
		want := refStreams(m.d/2, m.sec, m.interleaved)
		for i := range want {
			if r.Streams[i] != want[i] {
				s.t.Fatalf("MRoPE %+v: frequency %d reads stream %d, want %d", m, i, r.Streams[i], want[i])
			}
		}
		L, heads := 13, 3
		pos := make([][3]int, L)
		for i := range pos {
			// Unequal streams, as image tokens have; positions reach ~1000.
			pos[i] = [3]int{i * 77, i*31 + 5, 1000 - i*7}
		}
		x := s.randn(L*heads*m.d, 1)
		tx := s.upload(x, L, heads*m.d)
		got, err := s.b.RoPE(tx, pos, r)
		if err != nil {
			s.t.Fatal(err)
		}
		// float32 angles at positions ~1000 carry ~1e-4 absolute phase error.
		s.check(fmt.Sprintf("RoPE %+v", m), s.read(got), refRoPE(x, pos, m.d, powInv(m.theta, m.d, m.d/2), want), 1e-7)
		s.unchanged("RoPE x", tx, x)
	}
	// The vision encoder's 2-D table: head_dim/4 frequencies
	// theta^(-2j/(head_dim/2)), once for the row (stream 1), once for the
	// column (stream 2), over the patches of a grid.
	for _, sz := range [][3]int{{72, 5, 7}, {40, 4, 3}, {16, 1, 9}} {
		d, gh, gw := sz[0], sz[1], sz[2]
		q := d / 4
		r := backend.RoPE{HeadDim: d, InvFreq: make([]float32, d/2), Streams: make([]int, d/2)}
		inv := make([]float64, d/2)
		f := powInv(1e4, d/2, q)
		for j := 0; j < q; j++ {
			v := float32(1 / float64(float32(math.Pow(1e4, float64(2*j)/float64(d/2)))))
			r.InvFreq[j], r.InvFreq[q+j] = v, v
			r.Streams[j], r.Streams[q+j] = 1, 2
			inv[j], inv[q+j] = f[j], f[j]
		}
		var pos [][3]int
		for t := 0; t < 2; t++ {
			for y := 0; y < gh; y++ {
				for x := 0; x < gw; x++ {
					pos = append(pos, [3]int{t, y, x})
				}
			}
		}
		L, heads := len(pos), 3
		x := s.randn(L*heads*d, 1)
		tx := s.upload(x, L, heads*d)
		got, err := s.b.RoPE(tx, pos, r)
		if err != nil {
			s.t.Fatal(err)
		}
		s.check(fmt.Sprintf("RoPE 2-D d=%d grid %dx%d", d, gh, gw), s.read(got), refRoPE(x, pos, d, inv, r.Streams), 1e-7)
		s.unchanged("RoPE x", tx, x)
	}
}

// attnMask returns whether query row i (of lq over lk keys) sees key j
// under o, written out from the AttentionOptions documentation.
func attnMask(o backend.AttentionOptions, lq, lk int) func(i, j int) bool {
	segOf := func(p int) int {
		for s := 0; s+1 < len(o.Segments); s++ {
			if p < o.Segments[s+1] {
				return s
			}
		}
		return -1
	}
	return func(i, j int) bool {
		pos := lk - lq + i
		if o.Causal && j > pos {
			return false
		}
		if o.Segments != nil && segOf(i) != segOf(j) {
			return false
		}
		return o.Window == 0 || pos-j < o.Window
	}
}

// refAttention is GQA attention in float64 under the mask of o.
func refAttention(q, k, v []float32, lq, lk, d int, o backend.AttentionOptions) []float32 {
	nh, nkv := o.Heads, o.KVHeads
	see := attnMask(o, lq, lk)
	out := make([]float32, lq*nh*d)
	for h := 0; h < nh; h++ {
		g := h / (nh / nkv)
		for i := 0; i < lq; i++ {
			var js []int
			var sc []float64
			mx := math.Inf(-1)
			for j := 0; j < lk; j++ {
				if !see(i, j) {
					continue
				}
				var s float64
				for t := 0; t < d; t++ {
					s += float64(q[i*nh*d+h*d+t]) * float64(k[j*nkv*d+g*d+t])
				}
				js = append(js, j)
				sc = append(sc, s*float64(o.Scale))
				mx = math.Max(mx, sc[len(sc)-1])
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			for t := 0; t < d; t++ {
				var a float64
				for n, j := range js {
					a += sc[n] * float64(v[j*nkv*d+g*d+t])
				}
				out[i*nh*d+h*d+t] = float32(a / sum)
			}
		}
	}
	return out
}

func testAttention(s *suite) {
	type attnCase struct {
		lq, lk, nh, nkv, d int
		o                  backend.AttentionOptions
	}
	causal := backend.AttentionOptions{Causal: true}
	seg := func(cu ...int) backend.AttentionOptions { return backend.AttentionOptions{Segments: cu} }
	win := func(o backend.AttentionOptions, w int) backend.AttentionOptions { o.Window = w; return o }
	for _, c := range []attnCase{
		// The decoder: causal, whole sequences and chunks (the last Lq of Lk positions).
		{1, 1, 4, 2, 16, causal},
		{7, 7, 4, 2, 16, causal},
		{65, 65, 4, 4, 8, causal},
		{150, 150, 8, 2, 32, causal},
		{1, 45, 4, 2, 16, causal},
		{17, 45, 4, 2, 16, causal},
		{15, 30, 6, 2, 24, causal}, // odd group: single-head tiles
		// The encoders: bidirectional inside segments (per image, per frame, per audio window).
		{37, 37, 3, 3, 72, seg(0, 37)},
		{37, 37, 4, 2, 16, seg(0, 5, 20, 20, 37)},
		{150, 150, 4, 4, 64, seg(0, 104, 150)},
		{70, 70, 2, 1, 40, seg(0, 1, 2, 66, 70)},
		// Sliding windows.
		{45, 45, 4, 2, 16, win(causal, 9)},
		{20, 45, 4, 2, 16, win(causal, 70)},
		{100, 100, 2, 2, 32, win(seg(0, 30, 100), 17)},
		{33, 33, 3, 1, 8, win(backend.AttentionOptions{}, 1)},
		{40, 40, 4, 2, 16, backend.AttentionOptions{Causal: true, Segments: []int{0, 13, 40}}},
		// Bidirectional over every key, Lq != Lk (the head's cross-attention).
		{5, 23, 4, 2, 16, backend.AttentionOptions{}},
		{40, 7, 2, 2, 72, backend.AttentionOptions{}},
		{9, 9, 8, 4, 128, backend.AttentionOptions{}},
	} {
		o := c.o
		o.Heads, o.KVHeads, o.Scale = c.nh, c.nkv, float32(1/math.Sqrt(float64(c.d)))
		q, k, v := s.randn(c.lq*c.nh*c.d, 1), s.randn(c.lk*c.nkv*c.d, 1), s.randn(c.lk*c.nkv*c.d, 1)
		tq, tk, tv := s.upload(q, c.lq, c.nh*c.d), s.upload(k, c.lk, c.nkv*c.d), s.upload(v, c.lk, c.nkv*c.d)
		got, err := s.b.Attention(tq, tk, tv, o)
		if err != nil {
			s.t.Fatalf("Attention %+v: %v", c, err)
		}
		if got.Rows() != c.lq || got.Cols() != c.nh*c.d {
			s.t.Fatalf("Attention %+v: shape %v", c, got.Shape)
		}
		s.check(fmt.Sprintf("Attention Lq=%d Lk=%d heads=%d/%d d=%d causal=%v segments=%v window=%d", c.lq, c.lk, c.nh, c.nkv, c.d, o.Causal, o.Segments, o.Window),
			s.read(got), refAttention(q, k, v, c.lq, c.lk, c.d, o), TolAttn)
		s.unchanged("Attention q", tq, q)
		s.unchanged("Attention k", tk, k)
	}
}

func refLayerNorm(x, w, b []float32, n int, eps float64) []float32 {
	out := make([]float32, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		var mean, ss float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(n)
		for _, v := range row {
			ss += (float64(v) - mean) * (float64(v) - mean)
		}
		sc := 1 / math.Sqrt(ss/float64(n)+eps)
		for i, v := range row {
			y := (float64(v) - mean) * sc * float64(w[i])
			if b != nil {
				y += float64(b[i])
			}
			out[r*n+i] = float32(y)
		}
	}
	return out
}

func testLayerNorm(s *suite) {
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		for _, sz := range [][2]int{{1, 64}, {5, 33}, {3, 1}, {7, 1152}, {2, 1281}} {
			r, n := sz[0], sz[1]
			x := s.randn(r*n, 3)
			for i := range x {
				x[i] += 0.7 // a mean far from zero
			}
			wv := s.randn(n, 0.1)
			for i := range wv {
				wv[i]++
			}
			w, wd := s.weight("ln.weight", typ, wv, 1, n)
			b, bd := s.weight("ln.bias", typ, s.randn(n, 0.5), 1, n)
			tx := s.upload(x, r, n)
			for _, eps := range []float32{1e-6, 1e-5} {
				got, err := s.b.LayerNorm(tx, w, b, eps)
				if err != nil {
					s.t.Fatal(err)
				}
				s.check(fmt.Sprintf("LayerNorm %v [%d %d] eps %g", typ, r, n, eps), s.read(got), refLayerNorm(x, wd, bd, n, float64(eps)), TolAttn)
			}
			got, err := s.b.LayerNorm(tx, w, nil, 1e-6)
			if err != nil {
				s.t.Fatal(err)
			}
			s.check(fmt.Sprintf("LayerNorm %v [%d %d] no bias", typ, r, n), s.read(got), refLayerNorm(x, wd, nil, n, 1e-6), TolAttn)
			s.unchanged("LayerNorm x", tx, x)
		}
	}
}

func testGELU(s *suite) {
	for _, kind := range []backend.GELUKind{backend.GELUErf, backend.GELUTanh} {
		for _, sz := range [][2]int{{1, 1}, {7, 33}, {64, 130}, {3, 4304}} {
			r, c := sz[0], sz[1]
			x := s.randn(r*c, 3)
			x[0] = 0
			tx := s.upload(x, r, c)
			got, err := s.b.GELU(tx, kind)
			if err != nil {
				s.t.Fatal(err)
			}
			want := make([]float32, len(x))
			for i, v := range x {
				a := float64(v)
				if kind == backend.GELUErf {
					want[i] = float32(0.5 * a * (1 + math.Erf(a/math.Sqrt2)))
				} else {
					want[i] = float32(0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a))))
				}
			}
			s.check(fmt.Sprintf("GELU %v [%d %d]", kind, r, c), s.read(got), want, TolFloat)
			s.unchanged("GELU x", tx, x)
		}
	}
}

func testAddBias(s *suite) {
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		for _, sz := range [][2]int{{1, 1}, {9, 37}, {33, 1280}} {
			r, c := sz[0], sz[1]
			x := s.randn(r*c, 1)
			b, bd := s.weight("bias", typ, s.randn(c, 1), 1, c)
			tx := s.upload(x, r, c)
			got, err := s.b.AddBias(tx, b)
			if err != nil {
				s.t.Fatal(err)
			}
			want := make([]float32, len(x))
			for i, v := range x {
				want[i] = v + bd[i%c]
			}
			s.check(fmt.Sprintf("AddBias %v [%d %d]", typ, r, c), s.read(got), want, TolExact)
			s.unchanged("AddBias x", tx, x)
		}
	}
	// An activation as the bias.
	r, c := 5, 19
	x, bv := s.randn(r*c, 1), s.randn(c, 1)
	got, err := s.b.AddBias(s.upload(x, r, c), s.upload(bv, 1, c))
	if err != nil {
		s.t.Fatal(err)
	}
	want := make([]float32, len(x))
	for i, v := range x {
		want[i] = v + bv[i%c]
	}
	s.check("AddBias activation", s.read(got), want, TolExact)
}

// encoderOpErrors are the bad calls of the encoder ops every backend must
// refuse with an error.
func (s *suite) encoderOpErrors() map[string]func() error {
	a := s.upload(s.randn(6, 1), 2, 3)
	b := s.upload(s.randn(8, 1), 2, 4)
	q := s.upload(s.randn(3*8, 1), 3, 8)
	k := s.upload(s.randn(2*8, 1), 2, 8)
	norm, _ := s.weight("norm", quant.F32, s.randn(4, 1), 1, 4)
	rope, err := backend.MRoPE(4, 1e4, [3]int{}, false)
	if err != nil {
		s.t.Fatal(err)
	}
	attn := func(q, k *backend.Tensor, o backend.AttentionOptions) func() error {
		return func() error {
			if o.Heads == 0 {
				o.Heads, o.KVHeads = 2, 2
			}
			_, err := s.b.Attention(q, k, k, o)
			return err
		}
	}
	return map[string]func() error{
		"LayerNorm width":      func() error { _, err := s.b.LayerNorm(a, norm, nil, 1e-6); return err },
		"LayerNorm bias width": func() error { _, err := s.b.LayerNorm(b, norm, a, 1e-6); return err },
		"GELU kind":            func() error { _, err := s.b.GELU(a, backend.GELUKind(7)); return err },
		"AddBias width":        func() error { _, err := s.b.AddBias(a, norm); return err },
		"RoPE table": func() error {
			_, err := s.b.RoPE(b, make([][3]int, 2), backend.RoPE{HeadDim: 4, InvFreq: []float32{1}, Streams: []int{0, 0}})
			return err
		},
		"RoPE stream": func() error {
			_, err := s.b.RoPE(b, make([][3]int, 2), backend.RoPE{HeadDim: 4, InvFreq: []float32{1, 1}, Streams: []int{0, 3}})
			return err
		},
		"RoPE head dim":            func() error { _, err := s.b.RoPE(a, make([][3]int, 2), rope); return err },
		"MRoPE sections":           func() error { _, err := backend.MRoPE(4, 1e4, [3]int{1, 1, 1}, true); return err },
		"MRoPE theta":              func() error { _, err := backend.MRoPE(4, 0, [3]int{}, true); return err },
		"Attention causal keys":    attn(q, k, backend.AttentionOptions{Causal: true}),
		"Attention segments Lk":    attn(q, k, backend.AttentionOptions{Segments: []int{0, 3}}),
		"Attention segments end":   attn(k, k, backend.AttentionOptions{Segments: []int{0, 1}}),
		"Attention segments order": attn(k, k, backend.AttentionOptions{Segments: []int{0, 2, 1, 2}}),
		"Attention window":         attn(k, k, backend.AttentionOptions{Window: -1}),
		"Attention kv heads":       attn(q, k, backend.AttentionOptions{Heads: 2, KVHeads: 3}),
		"Attention width":          attn(q, a, backend.AttentionOptions{}),
	}
}

// expectErrors runs every call of m, each of which must return an error
// and not panic.
func (s *suite) expectErrors(m map[string]func() error) {
	for name, fn := range m {
		func() {
			defer func() {
				if r := recover(); r != nil {
					s.t.Errorf("%s: panic %v", name, r)
				}
			}()
			if err := fn(); err == nil {
				s.t.Errorf("%s: no error", name)
			}
		}()
	}
}
