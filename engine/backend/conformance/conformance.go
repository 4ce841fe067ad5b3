// Package conformance is the one op-conformance suite every backend runs:
// each op of backend.Backend on seeded random inputs of odd sizes, compared
// with a plain float64 reference written here (the oracle) by normalised
// mean squared error, plus the error cases every backend must report
// without panicking.
//
// The cases are plain data (Cases), written against the small T interface
// rather than the testing package, so that the same suite runs in three
// places: a backend's test (Run, with *testing.T),
//
//	func TestConformance(t *testing.T) { conformance.Run(t, myBackend) }
//
// `clef selftest` and `clef bench kernels` (Check, with a Reporter that
// collects the failures instead of failing a test).
package conformance

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Tolerances: the largest NMSE Σ(got-want)²/Σwant² accepted per op. Float
// storage is held to float32 rounding; block formats allow the backend to
// quantize activations to 8 bits (as llama.cpp does) on top of the exactly
// dequantized weights.
const (
	TolExact   = 1e-10 // Embed, Add, AddRows: no rounding beyond float32
	TolFloat   = 1e-9  // float32 arithmetic on float storage
	TolHalf    = 1e-6  // backends may accumulate F16/BF16 products in float32
	TolBlock   = 5e-4  // block formats with 8-bit activations
	TolAttn    = 1e-8  // attention, RoPE, RMSNorm, LayerNorm
	TolRouting = 1e-8  // router weights
)

// WeightTypes are the storage types the suite binds weights in.
var WeightTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// NMSE returns Σ(a-b)²/Σb² (+Inf on a length mismatch or NaN).
func NMSE(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range b {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	if den == 0 {
		return num
	}
	return num / den
}

func tolFor(t quant.Type) float64 {
	switch t {
	case quant.F32:
		return TolFloat
	case quant.F16, quant.BF16:
		return TolHalf
	}
	return TolBlock
}

// T is what a case reports through: the part of testing.TB it uses.
// *testing.T implements it, and so does Reporter.
type T interface {
	Helper()
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// Case is one conformance case: Run exercises b and reports every mismatch
// through t. A Fatal or Skip ends the case (t's way: runtime.Goexit for
// *testing.T, a panic that Check recovers for a Reporter).
type Case struct {
	Name string
	Run  func(t T, b backend.Backend)
}

// Cases returns the suite, in order.
func Cases() []Case {
	cases := []struct {
		name string
		fn   func(*suite)
	}{
		{"Embed", testEmbed},
		{"Add", testAdd},
		{"MatMul", testMatMul},
		{"RMSNorm", testRMSNorm},
		{"RoPE", testRoPE},
		{"Attention", testAttention},
		{"LayerNorm", testLayerNorm},
		{"GELU", testGELU},
		{"AddBias", testAddBias},
		{"EmbedActivation", testEmbedActivation},
		{"GatherBlend", testGatherBlend},
		{"Im2Col", testIm2Col},
		{"Reshape", testReshape},
		{"Transpose", testTranspose},
		{"Softmax", testSoftmax},
		{"SpanMeans", testSpanMeans},
		{"RowDots", testRowDots},
		{"PairFeatures", testPairFeatures},
		{"GroupMatMul", testGroupMatMul},
		{"Route", testRoute},
		{"MoE", testMoE},
		{"RowChunker", testRowChunker},
		{"Interrupt", testInterrupt},
		{"Errors", testErrors},
	}
	out := make([]Case, len(cases))
	for i, tc := range cases {
		out[i] = Case{Name: tc.name, Run: func(t T, b backend.Backend) {
			tc.fn(&suite{t: t, b: b, rng: rand.New(rand.NewPCG(1, uint64(len(tc.name)))), ctx: context.Background()})
		}}
	}
	return out
}

// Runner is a T that runs named subtests, as *testing.T does.
type Runner[R T] interface {
	T
	Run(name string, f func(R)) bool
}

// Run runs every case on b as a subtest of t (a *testing.T).
func Run[R Runner[R]](t R, b backend.Backend) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t R) { c.Run(t, b) })
	}
}

// Reporter is a T outside a test: it collects a case's errors. Fatal and
// Skip end the case with a panic that Check recovers.
type Reporter struct {
	// Errors are the case's failures, in order.
	Errors []string
	// Skipped is the reason the case skipped itself ("" if it did not).
	Skipped string
}

// stop ends a case run by Check.
type stop struct{}

func (r *Reporter) Helper()                           {}
func (r *Reporter) Error(args ...any)                 { r.Errors = append(r.Errors, fmt.Sprint(args...)) }
func (r *Reporter) Errorf(format string, args ...any) { r.Error(fmt.Sprintf(format, args...)) }
func (r *Reporter) Fatal(args ...any)                 { r.Error(args...); panic(stop{}) }
func (r *Reporter) Fatalf(format string, args ...any) { r.Errorf(format, args...); panic(stop{}) }
func (r *Reporter) Skip(args ...any)                  { r.Skipped = fmt.Sprint(args...); panic(stop{}) }

// Failed reports whether the case failed.
func (r *Reporter) Failed() bool { return len(r.Errors) > 0 }

// Check runs c on b and returns its report. A panic inside the backend is
// one more error, not a crash.
func Check(c Case, b backend.Backend) (r *Reporter) {
	r = &Reporter{}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stop); !ok {
				r.Errors = append(r.Errors, fmt.Sprintf("panic: %v", p))
			}
		}
	}()
	c.Run(r, b)
	return r
}

// Report runs every case on b, writes one line per case to w ("ok   ",
// "FAIL" or "SKIP", then "conformance" and the case's name, then the first
// error or the reason) and returns the number of failed cases.
func Report(w io.Writer, b backend.Backend) int {
	failed := 0
	for _, c := range Cases() {
		r := Check(c, b)
		switch {
		case r.Failed():
			failed++
			fmt.Fprintf(w, "FAIL conformance %-50s %s", c.Name, r.Errors[0])
			if n := len(r.Errors) - 1; n > 0 {
				fmt.Fprintf(w, " (and %d more)", n)
			}
			fmt.Fprintln(w)
		case r.Skipped != "":
			fmt.Fprintf(w, "SKIP conformance %-50s %s\n", c.Name, r.Skipped)
		default:
			fmt.Fprintf(w, "ok   conformance %s\n", c.Name)
		}
	}
	return failed
}

type suite struct {
	t   T
	b   backend.Backend
	rng *rand.Rand
	ctx context.Context
}

func (s *suite) randn(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(s.rng.NormFloat64() * scale)
	}
	return v
}

func (s *suite) upload(v []float32, r, c int) *backend.Tensor {
	s.t.Helper()
	t, err := s.b.Upload(v, r, c)
	if err != nil {
		s.t.Fatal(err)
	}
	return t
}

func (s *suite) read(t *backend.Tensor) []float32 {
	s.t.Helper()
	v, err := s.b.Read(s.ctx, t)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// scaleFields are the byte offsets of the float16 scale fields inside one
// block of each block format. Random blocks get random bytes everywhere
// else and small finite scales here (quantizing random weights with the
// reference quantizers would be far too slow for the K-quants).
var scaleFields = map[quant.Type][]int{
	quant.Q4_0: {0}, quant.Q4_1: {0, 2}, quant.Q5_0: {0}, quant.Q5_1: {0, 2}, quant.Q8_0: {0},
	quant.Q2_K: {80, 82}, quant.Q3_K: {108}, quant.Q4_K: {0, 2}, quant.Q5_K: {0, 2}, quant.Q6_K: {208},
}

// weight stores v [rows, cols] as typ (float types) or, for block formats,
// draws random valid blocks instead; it binds the result and returns the
// handle and the dequantized values the reference uses. scale is the
// intended standard deviation of the values.
func (s *suite) weight(name string, typ quant.Type, v []float32, rows, cols int) (*backend.Tensor, []float32) {
	s.t.Helper()
	data, deq := s.weightData(name, typ, v, rows, cols)
	shape := []int{rows, cols}
	if rows == 1 {
		shape = []int{cols}
	}
	bt, err := s.b.Weight(&weights.Tensor{Name: name, Type: typ, Shape: shape, Data: data})
	if err != nil {
		s.t.Fatal(err)
	}
	return bt, deq
}

// weightData is weight's storage: the bytes of v [rows, cols] as typ and
// their dequantized values, not bound.
func (s *suite) weightData(name string, typ quant.Type, v []float32, rows, cols int) ([]byte, []float32) {
	s.t.Helper()
	f, err := quant.FormatOf(typ)
	if err != nil {
		s.t.Fatal(err)
	}
	rb, err := quant.RowBytes(typ, cols)
	if err != nil {
		s.t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	deq := make([]float32, rows*cols)
	if fields, ok := scaleFields[typ]; ok {
		for i := range data {
			// Every byte value occurs, q8_0's code -128 included: our
			// quantizer never writes it, but a GGUF from elsewhere may.
			data[i] = byte(s.rng.Uint32())
		}
		for blk := 0; blk < len(data)/f.BlockBytes; blk++ {
			for j, off := range fields {
				d := float32(0.002 + 0.01*s.rng.Float64())
				if j == 1 {
					d *= 0.5 // a K-quant's dmin
				}
				h := quant.Float32ToFloat16(d)
				data[blk*f.BlockBytes+off] = byte(h)
				data[blk*f.BlockBytes+off+1] = byte(h >> 8)
			}
		}
	}
	for r := 0; r < rows; r++ {
		if _, ok := scaleFields[typ]; !ok {
			f.Quantize(data[r*rb:(r+1)*rb], v[r*cols:(r+1)*cols], nil)
		}
		f.Dequantize(deq[r*cols:(r+1)*cols], data[r*rb:(r+1)*rb])
	}
	for i, x := range deq {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			s.t.Fatalf("weight %s %v: non-finite value at %d", name, typ, i)
		}
	}
	return data, deq
}

// stack binds E matrices (each rows x cols bytes of one expert) as one
// stacked weight [E, rows, cols]: back to back in one slice (contiguous, as
// a GGUF *_exps tensor holds them) or one slice per expert (parted, as a
// release stores experts one by one).
func (s *suite) stack(name string, typ quant.Type, parts [][]byte, rows, cols int, parted bool) *backend.Tensor {
	s.t.Helper()
	t := &weights.Tensor{Name: name, Type: typ, Shape: []int{len(parts), rows, cols}}
	if parted {
		t.Parts = parts
	} else {
		for _, p := range parts {
			t.Data = append(t.Data, p...)
		}
	}
	bt, err := s.b.Weight(t)
	if err != nil {
		s.t.Fatal(err)
	}
	return bt
}

func (s *suite) check(what string, got, want []float32, tol float64) {
	s.t.Helper()
	if e := NMSE(got, want); !(e <= tol) {
		s.t.Errorf("%s: NMSE %.3g > %.3g", what, e, tol)
	}
}

// unchanged checks that an op left its input alone.
func (s *suite) unchanged(what string, t *backend.Tensor, want []float32) {
	s.t.Helper()
	got := s.read(t)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			s.t.Fatalf("%s: input modified at %d", what, i)
		}
	}
}

func testEmbed(s *suite) {
	for _, typ := range []quant.Type{quant.F32, quant.BF16, quant.Q8_0, quant.Q4_K} {
		vocab, dim := 37, 256
		w, deq := s.weight("embed", typ, s.randn(vocab*dim, 1), vocab, dim)
		ids := []int{0, 36, 5, 5, 17}
		got, err := s.b.Embed(w, ids)
		if err != nil {
			s.t.Fatal(err)
		}
		var want []float32
		for _, id := range ids {
			want = append(want, deq[id*dim:(id+1)*dim]...)
		}
		s.check(fmt.Sprintf("Embed %v", typ), s.read(got), want, TolExact)
	}
}

func testAdd(s *suite) {
	r, c := 7, 33
	a, b := s.randn(r*c, 1), s.randn(r*c, 1)
	ta, tb := s.upload(a, r, c), s.upload(b, r, c)
	got, err := s.b.Add(ta, tb)
	if err != nil {
		s.t.Fatal(err)
	}
	want := make([]float32, r*c)
	for i := range want {
		want[i] = a[i] + b[i]
	}
	s.check("Add", s.read(got), want, TolExact)
	s.unchanged("Add a", ta, a)

	y := s.randn(3*c, 1)
	rows := []int{6, 0, 3}
	got, err = s.b.AddRows(ta, rows, s.upload(y, 3, c))
	if err != nil {
		s.t.Fatal(err)
	}
	want = append([]float32(nil), a...)
	for i, row := range rows {
		for j := 0; j < c; j++ {
			want[row*c+j] += y[i*c+j]
		}
	}
	s.check("AddRows", s.read(got), want, TolExact)
	s.unchanged("AddRows x", ta, a)
}

// refMatMul is x Wᵀ in float64.
func refMatMul(x, w []float32, m, k, n int) []float32 {
	out := make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for t := 0; t < k; t++ {
				s += float64(x[i*k+t]) * float64(w[j*k+t])
			}
			out[i*n+j] = float32(s)
		}
	}
	return out
}

func testMatMul(s *suite) {
	for _, typ := range WeightTypes {
		f, _ := quant.FormatOf(typ)
		for _, sz := range [][3]int{{1, 1, 1}, {3, 2, 5}, {17, 3, 33}, {5, 2, 1}, {64, 4, 70}} {
			m, kb, n := sz[0], sz[1], sz[2]
			k := kb * max(f.BlockElems, 32)
			if f.BlockElems == 1 && kb == 3 {
				k = 37 // odd widths for plain types
			}
			x := s.randn(m*k, 1)
			w, deq := s.weight("w", typ, s.randn(n*k, 1/math.Sqrt(float64(k))), n, k)
			tx := s.upload(x, m, k)
			got, err := s.b.MatMul(tx, w)
			if err != nil {
				s.t.Fatalf("MatMul %v %v: %v", typ, sz, err)
			}
			if got.Rows() != m || got.Cols() != n {
				s.t.Fatalf("MatMul %v: shape %v, want [%d %d]", typ, got.Shape, m, n)
			}
			s.check(fmt.Sprintf("MatMul %v m=%d k=%d n=%d", typ, m, k, n), s.read(got), refMatMul(x, deq, m, k, n), tolFor(typ))
			s.unchanged("MatMul x", tx, x)
		}
	}
	// A float32 activation as the right-hand side.
	m, k, n := 9, 19, 11
	x, w := s.randn(m*k, 1), s.randn(n*k, 1)
	got, err := s.b.MatMul(s.upload(x, m, k), s.upload(w, n, k))
	if err != nil {
		s.t.Fatal(err)
	}
	s.check("MatMul activation", s.read(got), refMatMul(x, w, m, k, n), TolFloat)
}

func refRMSNorm(x, w []float32, eps float64) []float32 {
	g := len(w)
	out := make([]float32, len(x))
	for q := 0; q < len(x)/g; q++ {
		var ss float64
		for _, v := range x[q*g : (q+1)*g] {
			ss += float64(v) * float64(v)
		}
		sc := 1 / math.Sqrt(ss/float64(g)+eps)
		for i := 0; i < g; i++ {
			out[q*g+i] = float32(float64(x[q*g+i]) * sc * float64(w[i]))
		}
	}
	return out
}

func testRMSNorm(s *suite) {
	for _, sz := range [][3]int{{1, 1, 64}, {5, 1, 33}, {7, 4, 16}, {3, 32, 128}} {
		r, heads, g := sz[0], sz[1], sz[2]
		x := s.randn(r*heads*g, 3)
		wv := s.randn(g, 0.1)
		for i := range wv {
			wv[i]++
		}
		w, deq := s.weight("norm", quant.F32, wv, 1, g)
		tx := s.upload(x, r, heads*g)
		got, err := s.b.RMSNorm(tx, w, 1e-6)
		if err != nil {
			s.t.Fatal(err)
		}
		s.check(fmt.Sprintf("RMSNorm %v", sz), s.read(got), refRMSNorm(x, deq, 1e-6), TolAttn)
		s.unchanged("RMSNorm x", tx, x)
	}
}

// distinctLogits returns logits whose softmax probabilities are separated
// enough that the top-k choice is unambiguous.
func (s *suite) distinctLogits(L, E int) []float32 {
	out := make([]float32, L*E)
	for r := 0; r < L; r++ {
		perm := s.rng.Perm(E)
		for e := range perm {
			out[r*E+e] = float32(perm[e])*0.05 - 1
		}
	}
	return out
}

func refRoute(logits []float32, L, E, k int, norm bool) ([]int, []float32) {
	ids := make([]int, L*k)
	ws := make([]float32, L*k)
	for r := 0; r < L; r++ {
		row := logits[r*E : (r+1)*E]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		p := make([]float64, E)
		var sum float64
		for e, v := range row {
			p[e] = math.Exp(float64(v) - mx)
			sum += p[e]
		}
		used := make([]bool, E)
		var tot float64
		for j := 0; j < k; j++ {
			best := -1
			for e := 0; e < E; e++ {
				if !used[e] && (best < 0 || p[e] > p[best]) {
					best = e
				}
			}
			used[best] = true
			ids[r*k+j] = best
			tot += p[best] / sum
		}
		for j := 0; j < k; j++ {
			w := p[ids[r*k+j]] / sum
			if norm {
				w /= tot
			}
			ws[r*k+j] = float32(w)
		}
	}
	return ids, ws
}

func testRoute(s *suite) {
	for _, sz := range [][3]int{{1, 8, 2}, {9, 8, 2}, {33, 128, 8}, {5, 5, 5}} {
		L, E, k := sz[0], sz[1], sz[2]
		logits := s.distinctLogits(L, E)
		for _, norm := range []bool{true, false} {
			ids, ws, err := s.b.Route(s.upload(logits, L, E), k, norm)
			if err != nil {
				s.t.Fatal(err)
			}
			wantIDs, wantW := refRoute(logits, L, E, k, norm)
			gotIDs := s.read(ids)
			for i := range wantIDs {
				if int(gotIDs[i]) != wantIDs[i] {
					s.t.Fatalf("Route %v: row %d slot %d: expert %v, want %d", sz, i/k, i%k, gotIDs[i], wantIDs[i])
				}
			}
			s.check(fmt.Sprintf("Route %v weights", sz), s.read(ws), wantW, TolRouting)
		}
	}
}

func testMoE(s *suite) {
	silu := func(x float64) float64 { return x / (1 + math.Exp(-x)) }
	for _, typ := range []quant.Type{quant.F32, quant.BF16, quant.Q8_0, quant.Q4_K} {
		for _, sz := range [][4]int{{1, 8, 2, 1}, {13, 8, 2, 1}, {40, 16, 4, 2}} {
			L, E, k, kb := sz[0], sz[1], sz[2], sz[3]
			f, _ := quant.FormatOf(typ)
			hidden := kb * max(f.BlockElems, 32)
			ffn := hidden // down's row length must be a whole number of blocks too
			x := s.randn(L*hidden, 1)
			data := make([][3][]byte, E)
			deq := make([][3][]float32, E)
			for e := range data {
				data[e][0], deq[e][0] = s.weightData("gate", typ, s.randn(ffn*hidden, 1/math.Sqrt(float64(hidden))), ffn, hidden)
				data[e][1], deq[e][1] = s.weightData("up", typ, s.randn(ffn*hidden, 1/math.Sqrt(float64(hidden))), ffn, hidden)
				data[e][2], deq[e][2] = s.weightData("down", typ, s.randn(hidden*ffn, 1/math.Sqrt(float64(ffn))), hidden, ffn)
			}
			proj := func(p int) [][]byte {
				out := make([][]byte, E)
				for e := range out {
					out[e] = data[e][p]
				}
				return out
			}
			logits := s.distinctLogits(L, E)
			wantIDs, wantW := refRoute(logits, L, E, k, true)
			want := make([]float32, L*hidden)
			for r := 0; r < L; r++ {
				acc := make([]float64, hidden)
				for j := 0; j < k; j++ {
					e, w := wantIDs[r*k+j], float64(wantW[r*k+j])
					xr := x[r*hidden : (r+1)*hidden]
					g := refMatMul(xr, deq[e][0], 1, hidden, ffn)
					u := refMatMul(xr, deq[e][1], 1, hidden, ffn)
					a := make([]float32, ffn)
					for i := range a {
						a[i] = float32(silu(float64(g[i])) * float64(u[i]))
					}
					y := refMatMul(a, deq[e][2], 1, ffn, hidden)
					for i := range acc {
						acc[i] += w * float64(y[i])
					}
				}
				for i := range acc {
					want[r*hidden+i] = float32(acc[i])
				}
			}
			// The same experts stacked both ways: one [E, out, in] array per
			// projection, and one slice per expert.
			for _, parted := range []bool{false, true} {
				form := "contiguous"
				if parted {
					form = "parted"
				}
				ex := backend.Experts{
					Gate: s.stack("gate", typ, proj(0), ffn, hidden, parted),
					Up:   s.stack("up", typ, proj(1), ffn, hidden, parted),
					Down: s.stack("down", typ, proj(2), hidden, ffn, parted),
				}
				ids, ws, err := s.b.Route(s.upload(logits, L, E), k, true)
				if err != nil {
					s.t.Fatal(err)
				}
				tx := s.upload(x, L, hidden)
				got, err := s.b.MoE(tx, ids, ws, ex)
				if err != nil {
					s.t.Fatalf("MoE %v %s: %v", typ, form, err)
				}
				s.check(fmt.Sprintf("MoE %v %s L=%d E=%d k=%d hidden=%d", typ, form, L, E, k, hidden), s.read(got), want, tolFor(typ))
				s.unchanged("MoE x", tx, x)
			}
		}
	}
}

// testRowChunker checks the optional chunking ops: Rows views, Concat, and
// attention of the last rows of a sequence against full attention.
func testRowChunker(s *suite) {
	rc, ok := s.b.(backend.RowChunker)
	if !ok {
		s.t.Skip("backend does not implement backend.RowChunker")
	}
	r, c := 11, 24
	x := s.randn(r*c, 1)
	tx := s.upload(x, r, c)
	a, err := rc.Rows(tx, 0, 4)
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := rc.Rows(tx, 4, 11)
	if err != nil {
		s.t.Fatal(err)
	}
	s.check("Rows", s.read(b), x[4*c:], TolExact)
	cat, err := rc.Concat(b, a)
	if err != nil {
		s.t.Fatal(err)
	}
	s.check("Concat", s.read(cat), append(append([]float32(nil), x[4*c:]...), x[:4*c]...), TolExact)
	s.b.Free(a, b)
	s.unchanged("Rows parent after freeing views", tx, x)
	if _, err := rc.Rows(tx, 5, 12); err == nil {
		s.t.Error("Rows past the end: no error")
	}
	if _, err := rc.Concat(tx, s.upload(s.randn(5, 1), 1, 5)); err == nil {
		s.t.Error("Concat of different widths: no error")
	}

	L, nh, nkv, d := 45, 4, 2, 16
	q, k, v := s.randn(L*nh*d, 1), s.randn(L*nkv*d, 1), s.randn(L*nkv*d, 1)
	o := backend.AttentionOptions{Heads: nh, KVHeads: nkv, Scale: 0.25, Causal: true}
	full := refAttention(q, k, v, L, L, d, o)
	tk, tv := s.upload(k, L, nkv*d), s.upload(v, L, nkv*d)
	for _, ch := range [][2]int{{0, 1}, {0, 45}, {13, 30}, {30, 45}} {
		lo, hi := ch[0], ch[1]
		kc, _ := rc.Rows(tk, 0, hi)
		vc, _ := rc.Rows(tv, 0, hi)
		got, err := s.b.Attention(s.upload(q[lo*nh*d:hi*nh*d], hi-lo, nh*d), kc, vc, o)
		if err != nil {
			s.t.Fatal(err)
		}
		s.check(fmt.Sprintf("causal Attention of rows [%d,%d) over row views", lo, hi), s.read(got), full[lo*nh*d:hi*nh*d], TolAttn)
	}
}

// testErrors checks that bad shapes and ids are errors, not panics.
func testErrors(s *suite) {
	a := s.upload(s.randn(6, 1), 2, 3)
	b := s.upload(s.randn(8, 1), 2, 4)
	w, _ := s.weight("w", quant.F32, s.randn(12, 1), 3, 4)
	norm, _ := s.weight("norm", quant.F32, s.randn(4, 1), 1, 4)
	for name, fn := range map[string]func() error{
		"Add shapes":     func() error { _, err := s.b.Add(a, b); return err },
		"MatMul K":       func() error { _, err := s.b.MatMul(a, w); return err },
		"RMSNorm width":  func() error { _, err := s.b.RMSNorm(a, norm, 1e-6); return err },
		"Embed id":       func() error { _, err := s.b.Embed(w, []int{3}); return err },
		"Embed negative": func() error { _, err := s.b.Embed(w, []int{-1}); return err },
		"RoPE positions": func() error {
			r, _ := backend.MRoPE(4, 1e4, [3]int{}, false)
			_, err := s.b.RoPE(b, [][3]int{{0, 0, 0}}, r)
			return err
		},
		"Attention heads": func() error {
			_, err := s.b.Attention(b, b, b, backend.AttentionOptions{Heads: 3, KVHeads: 2, Scale: 1, Causal: true})
			return err
		},
		"Route k":     func() error { _, _, err := s.b.Route(a, 4, true); return err },
		"AddRows row": func() error { _, err := s.b.AddRows(a, []int{2}, s.upload(s.randn(3, 1), 1, 3)); return err },
		"Weight bytes": func() error {
			_, err := s.b.Weight(&weights.Tensor{Name: "bad", Type: quant.Q8_0, Shape: []int{2, 32}, Data: make([]byte, 10)})
			return err
		},
		"Weight parts": func() error {
			_, err := s.b.Weight(&weights.Tensor{Name: "bad", Type: quant.F32, Shape: []int{3, 2, 4}, Parts: [][]byte{make([]byte, 32), make([]byte, 32)}})
			return err
		},
		"Weight stack bytes": func() error {
			_, err := s.b.Weight(&weights.Tensor{Name: "bad", Type: quant.F32, Shape: []int{3, 2, 4}, Data: make([]byte, 64)})
			return err
		},
		"Weight block": func() error {
			_, err := s.b.Weight(&weights.Tensor{Name: "bad", Type: quant.Q4_K, Shape: []int{1, 100}, Data: make([]byte, 144)})
			return err
		},
	} {
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
	s.expectErrors(s.encoderOpErrors())
	s.expectErrors(s.rowOpErrors())
	s.expectErrors(s.convOpErrors())
	ids, wts, err := s.b.Route(s.upload([]float32{1, 2, 3, 4}, 2, 2), 1, true)
	if err != nil {
		s.t.Fatal(err)
	}
	one := func(name string, rows, cols int) *backend.Tensor {
		t, err := s.b.Weight(&weights.Tensor{Name: name, Type: quant.F32, Shape: []int{1, rows, cols}, Data: make([]byte, 4*rows*cols)})
		if err != nil {
			s.t.Fatal(err)
		}
		return t
	}
	ex := backend.Experts{Gate: one("gate", 4, 3), Up: one("up", 4, 3), Down: one("down", 3, 4)}
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.t.Errorf("MoE experts: panic %v", r)
			}
		}()
		if _, err := s.b.MoE(a, ids, wts, ex); err == nil {
			s.t.Error("MoE with an expert id past the expert list: no error")
		}
		if _, err := s.b.MoE(a, ids, wts, backend.Experts{}); err == nil {
			s.t.Error("MoE without experts: no error")
		}
	}()
}
