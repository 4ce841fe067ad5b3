package schemahead

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
)

const tinyDir = "../../../testdata/clef-tiny"

// goldenCase is the part of a cases.jsonl line the head needs.
type goldenCase struct {
	Name      string `json:"name"`
	InputIDs  []int  `json:"input_ids"`
	Questions []struct {
		Type        int      `json:"question_type"`
		Span        [2]int   `json:"question_span"`
		OptionSpans [][2]int `json:"option_spans"`
	} `json:"questions"`
	HiddenFile    string      `json:"hidden_file"`
	HiddenShape   []int       `json:"hidden_shape"`
	Logits        [][]float64 `json:"logits"`
	Probabilities [][]float64 `json:"probabilities"`
}

func (c *goldenCase) questions() []Question {
	var qs []Question
	for _, q := range c.Questions {
		qs = append(qs, Question{Type: q.Type, Span: q.Span, OptionSpans: q.OptionSpans})
	}
	return qs
}

func readCases(t testing.TB, file string) []goldenCase {
	t.Helper()
	f, err := os.Open(filepath.Join(tinyDir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("%s: no cases", file)
	}
	return cases
}

var npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)

// readNpy reads a little-endian float32 C-order .npy file.
func readNpy(t testing.TB, path string) ([]float32, []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		t.Fatalf("%s: not a .npy file", path)
	}
	var hlen, off int
	if b[6] == 1 {
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	} else {
		hlen, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	}
	header := string(b[off : off+hlen])
	if !strings.Contains(header, "'descr': '<f4'") || !strings.Contains(header, "'fortran_order': False") {
		t.Fatalf("%s: want little-endian float32 C order, header %s", path, header)
	}
	m := npyShape.FindStringSubmatch(header)
	if m == nil {
		t.Fatalf("%s: no shape in header %s", path, header)
	}
	var shape []int
	n := 1
	for _, f := range strings.Split(m[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: shape %q", path, m[1])
		}
		shape = append(shape, d)
		n *= d
	}
	data := b[off+hlen:]
	if len(data) != 4*n {
		t.Fatalf("%s: %d data bytes for shape %v", path, len(data), shape)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return out, shape
}

// openRelease opens a clef-tiny release and its head.
func openRelease(t testing.TB, release string) (weights.Model, *Head, Lexicon) {
	t.Helper()
	dir := filepath.Join(tinyDir, release)
	m, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	cfg, err := LoadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Load(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := m.Tensor("thinker.lm_head.weight")
	if err != nil {
		t.Fatal(err)
	}
	return m, h, TensorLexicon(lm)
}

var releases = []struct{ dir, cases string }{
	{"release", "cases.jsonl"},
	{"release-bf16", "cases-bf16.jsonl"},
}

// TestGoldenLogits runs the head on the golden hidden states of every case
// (media cases included: the head does not care where the hidden states came
// from) and compares logits and float32 softmax probabilities.
func TestGoldenLogits(t *testing.T) {
	const logitTol, probTol = 1e-5, 1e-6
	for _, rel := range releases {
		_, h, lex := openRelease(t, rel.dir)
		var worstLogit, worstProb, worst64 float64
		for _, c := range readCases(t, rel.cases) {
			hidden, shape := readNpy(t, filepath.Join(tinyDir, c.HiddenFile))
			if len(shape) != 2 || shape[0] != len(c.InputIDs) || shape[1] != h.Config().HiddenSize {
				t.Fatalf("%s: hidden shape %v for %d ids", c.Name, shape, len(c.InputIDs))
			}
			logits, err := h.Logits(hidden, c.InputIDs, c.questions(), lex)
			if err != nil {
				t.Fatalf("%s/%s: %v", rel.dir, c.Name, err)
			}
			logits64, err := h.LogitsFloat64(hidden, c.InputIDs, c.questions(), lex)
			if err != nil {
				t.Fatalf("%s/%s: float64: %v", rel.dir, c.Name, err)
			}
			if len(logits) != len(c.Logits) {
				t.Fatalf("%s/%s: %d questions, want %d", rel.dir, c.Name, len(logits), len(c.Logits))
			}
			for qi := range logits {
				if len(logits[qi]) != len(c.Logits[qi]) {
					t.Fatalf("%s/%s q%d: %d options, want %d", rel.dir, c.Name, qi, len(logits[qi]), len(c.Logits[qi]))
				}
				probs := Softmax(logits[qi])
				for k := range logits[qi] {
					dl := math.Abs(float64(logits[qi][k]) - c.Logits[qi][k])
					dp := math.Abs(float64(probs[k]) - c.Probabilities[qi][k])
					d64 := math.Abs(logits64[qi][k] - c.Logits[qi][k])
					worstLogit, worstProb, worst64 = max(worstLogit, dl), max(worstProb, dp), max(worst64, d64)
					if dl > logitTol || dp > probTol || d64 > logitTol {
						t.Errorf("%s/%s q%d o%d: logit %v (float64 %v), want %v; p %v, want %v",
							rel.dir, c.Name, qi, k, logits[qi][k], logits64[qi][k], c.Logits[qi][k], probs[k], c.Probabilities[qi][k])
					}
				}
			}
		}
		t.Logf("%s: max |Δlogit| %.3g (float64 mode %.3g), max |Δp| %.3g", rel.dir, worstLogit, worst64, worstProb)
	}
}

// TestGoldenTrace compares the head's intermediates with the reference's on
// the trace case.
func TestGoldenTrace(t *testing.T) {
	_, h, lex := openRelease(t, "release")
	var c *goldenCase
	for _, k := range readCases(t, "cases.jsonl") {
		if k.Name == "multi_question_mixed" {
			c = &k
		}
	}
	if c == nil {
		t.Fatal("no multi_question_mixed case")
	}
	hidden, _ := readNpy(t, filepath.Join(tinyDir, c.HiddenFile))
	var tr trace
	if _, err := forward[float32](h, hidden, c.InputIDs, c.questions(), lex, &tr); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		file string
		got  []float64
	}{
		{"normed_hidden", tr.normedHidden}, {"memory", tr.memory}, {"question_vectors", tr.questionVectors},
		{"option_contexts", tr.optionContexts}, {"option_lexical", tr.optionLexical},
		{"routed_options", tr.routedOptions}, {"fields", tr.fields},
		{"prior", tr.prior}, {"cosine", tr.cosine}, {"residual", tr.residual},
	} {
		want, _ := readNpy(t, filepath.Join(tinyDir, "trace", "multi_question_mixed_"+s.file+".npy"))
		if len(want) != len(s.got) {
			t.Errorf("%s: %d values, want %d", s.file, len(s.got), len(want))
			continue
		}
		var worst float64
		for i := range want {
			worst = max(worst, math.Abs(s.got[i]-float64(want[i])))
		}
		if worst > 1e-5 {
			t.Errorf("%s: max |Δ| %.3g", s.file, worst)
		}
	}
}

func TestSoftmax(t *testing.T) {
	p := Softmax([]float32{1, 2, 3, 1000})
	if p[3] != 1 || p[0] != 0 {
		t.Errorf("Softmax overflowed: %v", p)
	}
	p = Softmax([]float32{0, float32(math.Log(3))})
	if math.Abs(float64(p[0])-0.25) > 1e-7 || math.Abs(float64(p[1])-0.75) > 1e-7 {
		t.Errorf("Softmax = %v, want [0.25 0.75]", p)
	}
}

// filtered is a weights.Model with some tensors hidden or replaced.
type filtered struct {
	weights.Model
	drop    string
	replace map[string]*weights.Tensor
}

func (f *filtered) Tensor(name string) (*weights.Tensor, error) {
	if name == f.drop {
		return nil, fmt.Errorf("tensor %q not found", name)
	}
	if t, ok := f.replace[name]; ok {
		return t, nil
	}
	return f.Model.Tensor(name)
}

func (f *filtered) Has(name string) bool { _, err := f.Tensor(name); return err == nil }

func (f *filtered) Names() []string {
	var out []string
	for _, n := range f.Model.Names() {
		if n != f.drop {
			out = append(out, n)
		}
	}
	for n := range f.replace {
		if !f.Model.Has(n) {
			out = append(out, n)
		}
	}
	return out
}

func TestLoadErrors(t *testing.T) {
	m, h, _ := openRelease(t, "release")
	cfg := h.Config()
	mp, _ := m.Tensor("memory_projection.weight")
	wrong := *mp
	wrong.Shape = []int{mp.Shape[1], mp.Shape[0]}
	nan := *mp
	nan.Data = append([]byte(nil), mp.Data...)
	binary.LittleEndian.PutUint32(nan.Data[8:], math.Float32bits(float32(math.NaN())))
	extra := *mp
	extra.Name = "layers.2.linear1.weight"
	big := cfg
	big.Layers = 3
	small := cfg
	small.HiddenSize = 32
	for _, tc := range []struct {
		name string
		m    weights.Model
		cfg  Config
		want string
	}{
		{"missing", &filtered{Model: m, drop: "layers.1.norm3.bias"}, cfg, "layers.1.norm3.bias"},
		{"shape", &filtered{Model: m, replace: map[string]*weights.Tensor{"memory_projection.weight": &wrong}}, cfg, "shape"},
		{"nan", &filtered{Model: m, replace: map[string]*weights.Tensor{"memory_projection.weight": &nan}}, cfg, "non-finite"},
		{"extra", &filtered{Model: m, replace: map[string]*weights.Tensor{"layers.2.linear1.weight": &extra}}, cfg, "unexpected tensors layers.2.linear1.weight"},
		{"config layers", m, big, "layers.2"},
		{"config hidden", m, small, "shape"},
	} {
		_, err := Load(tc.m, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 5, "feedforward": 64}`, "multiple of heads"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4}`, "feedforward = 0"},
		{`{"hidden_size": -1, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64}`, "hidden_size = -1"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64, "depth": 3}`, "unknown field"},
		{`{"hidden_size": 64, "width": 1e12}`, "width"},
		{`{"hidden_size": 64,`, "unexpected EOF"},
		{`{"hidden_size": 64, "width": 32, "routing_layers": 100000, "layers": 2, "heads": 4, "feedforward": 64}`, "routing_layers"},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.json, err, tc.want)
		}
	}
	c, err := ParseConfig([]byte(`{"hidden_size": 64, "width": 32, "routing_layers": 0, "layers": 1, "heads": 4, "feedforward": 64, "dropout": 0.1}`))
	if err != nil || c.Width != 32 || c.Dropout != 0.1 {
		t.Errorf("ParseConfig = %+v, %v", c, err)
	}
}

// badLexicon returns rows of the wrong size.
type badLexicon struct{ n int }

func (b badLexicon) Rows(ids []int) ([][]float32, error) {
	out := make([][]float32, len(ids))
	for i := range out {
		out[i] = make([]float32, b.n)
	}
	return out, nil
}

func TestRecordErrors(t *testing.T) {
	_, h, lex := openRelease(t, "release")
	c := readCases(t, "cases.jsonl")[0]
	hidden, _ := readNpy(t, filepath.Join(tinyDir, c.HiddenFile))
	L := len(c.InputIDs)
	qs := c.questions()
	withSpan := func(s [2]int) []Question {
		q := qs[0]
		q.OptionSpans = append([][2]int{s}, q.OptionSpans[1:]...)
		return []Question{q}
	}
	badIDs := append([]int(nil), c.InputIDs...)
	badIDs[qs[0].OptionSpans[0][0]] = 1 << 20
	nanHidden := append([]float32(nil), hidden...)
	nanHidden[5] = float32(math.NaN())
	for _, tc := range []struct {
		name   string
		hidden []float32
		ids    []int
		qs     []Question
		lex    Lexicon
		want   string
	}{
		{"hidden size", hidden[:len(hidden)-1], c.InputIDs, qs, lex, "hidden values"},
		{"no questions", hidden, c.InputIDs, nil, lex, "no questions"},
		{"empty span", hidden, c.InputIDs, withSpan([2]int{5, 5}), lex, "empty or outside"},
		{"span past end", hidden, c.InputIDs, withSpan([2]int{L - 1, L + 1}), lex, "empty or outside"},
		{"negative span", hidden, c.InputIDs, withSpan([2]int{-1, 3}), lex, "empty or outside"},
		{"type", hidden, c.InputIDs, []Question{{Type: 3, Span: qs[0].Span, OptionSpans: qs[0].OptionSpans}}, lex, "type 3"},
		{"no options", hidden, c.InputIDs, []Question{{Type: 0, Span: qs[0].Span}}, lex, "no options"},
		{"id out of vocab", hidden, badIDs, qs, lex, "out of range"},
		{"no lexicon", hidden, c.InputIDs, qs, nil, "lm_head"},
		{"lexicon rows", hidden, c.InputIDs, qs, badLexicon{3}, "hidden size 64"},
		{"nan hidden", nanHidden, c.InputIDs, qs, lex, "non-finite"},
		{"empty", nil, nil, qs, lex, "empty record"},
	} {
		_, err := h.Logits(tc.hidden, tc.ids, tc.qs, tc.lex)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func BenchmarkHeadTiny(b *testing.B) {
	_, h, lex := openRelease(b, "release")
	var c goldenCase
	for _, k := range readCases(b, "cases.jsonl") {
		if k.Name == "four_questions_long_state" {
			c = k
		}
	}
	hidden, _ := readNpy(b, filepath.Join(tinyDir, c.HiddenFile))
	for b.Loop() {
		if _, err := h.Logits(hidden, c.InputIDs, c.questions(), lex); err != nil {
			b.Fatal(err)
		}
	}
}

// memModel is an in-memory weights.Model.
type memModel map[string]*weights.Tensor

func (m memModel) Tensor(name string) (*weights.Tensor, error) {
	if t, ok := m[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("tensor %q not found", name)
}
func (m memModel) Has(name string) bool { _, ok := m[name]; return ok }
func (m memModel) Names() []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}
func (m memModel) Close() error { return nil }

// randomModel returns a head of the given size with deterministic random
// weights, laid out as the tiny release's (same names, scaled shapes).
func randomModel(t testing.TB, cfg Config) memModel {
	t.Helper()
	ref, h, _ := openRelease(t, "release")
	small := h.Config()
	scale := func(d int) int {
		switch d {
		case small.HiddenSize:
			return cfg.HiddenSize
		case small.Width:
			return cfg.Width
		case 3 * small.Width:
			return 3 * cfg.Width
		case 4 * small.Width:
			return 4 * cfg.Width
		}
		return d
	}
	m := memModel{}
	seed := uint64(1)
	for _, name := range ref.Names() {
		if strings.HasPrefix(name, "thinker.") || strings.HasPrefix(name, "talker.") || strings.HasPrefix(name, "code2wav.") {
			continue
		}
		// Layer 0 of each stack stands for every layer of the bigger head.
		var names []string
		switch {
		case strings.HasPrefix(name, "evidence_layers.0."):
			for i := range cfg.RoutingLayers {
				names = append(names, fmt.Sprintf("evidence_layers.%d.", i)+strings.TrimPrefix(name, "evidence_layers.0."))
			}
		case strings.HasPrefix(name, "layers.0."):
			for i := range cfg.Layers {
				names = append(names, fmt.Sprintf("layers.%d.", i)+strings.TrimPrefix(name, "layers.0."))
			}
		case strings.HasPrefix(name, "evidence_layers."), strings.HasPrefix(name, "layers."):
			continue
		default:
			names = []string{name}
		}
		rt, _ := ref.Tensor(name)
		shape := make([]int, len(rt.Shape))
		for i, d := range rt.Shape {
			shape[i] = scale(d)
		}
		// The feed-forward layers are [feedforward, width] and [width, feedforward]:
		// 64 is both the tiny hidden size and the tiny feedforward.
		if strings.Contains(name, "linear1.weight") || strings.Contains(name, "feedforward.0.weight") {
			shape = []int{cfg.Feedforward, cfg.Width}
		}
		if strings.Contains(name, "linear1.bias") || strings.Contains(name, "feedforward.0.bias") {
			shape = []int{cfg.Feedforward}
		}
		if strings.Contains(name, "linear2.weight") || strings.Contains(name, "feedforward.3.weight") {
			shape = []int{cfg.Width, cfg.Feedforward}
		}
		n := 1
		for _, d := range shape {
			n *= d
		}
		fan := 1.0
		if len(shape) == 2 {
			fan = float64(shape[1])
		}
		for _, name := range names {
			data := make([]byte, 4*n)
			for i := range n {
				seed = seed*6364136223846793005 + 1442695040888963407
				u := float64(seed>>11)/float64(1<<53) - 0.5
				v := float32(u * 2 * math.Sqrt(3/fan))
				if len(shape) == 1 && strings.HasSuffix(name, ".weight") {
					v += 1
				}
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			}
			m[name] = &weights.Tensor{Name: name, Type: rt.Type, Shape: shape, Data: data}
		}
	}
	return m
}

// randomLexicon returns deterministic rows.
type randomLexicon struct{ hidden int }

func (r randomLexicon) Rows(ids []int) ([][]float32, error) {
	out := make([][]float32, len(ids))
	for i, id := range ids {
		out[i] = make([]float32, r.hidden)
		for j := range out[i] {
			out[i][j] = float32(math.Sin(float64(id*r.hidden + j)))
		}
	}
	return out, nil
}

// BenchmarkHeadLarge runs a head of about the published Clef head size
// (hidden 2048, width 1024, 2 routing + 4 decoder layers, ~110M parameters)
// on a 1000-token record with 3 questions of 4 options.
func BenchmarkHeadLarge(b *testing.B) {
	cfg := Config{HiddenSize: 2048, Width: 1024, RoutingLayers: 2, Layers: 4, Heads: 16, Feedforward: 4096}
	h, err := Load(randomModel(b, cfg), cfg)
	if err != nil {
		b.Fatal(err)
	}
	const L = 1000
	hidden := make([]float32, L*cfg.HiddenSize)
	ids := make([]int, L)
	for i := range hidden {
		hidden[i] = float32(math.Cos(float64(i)))
	}
	for i := range ids {
		ids[i] = i % 500
	}
	var qs []Question
	pos := 100
	for range 3 {
		q := Question{Type: TypeChoice, Span: [2]int{pos, pos + 20}}
		pos += 20
		for range 4 {
			q.OptionSpans = append(q.OptionSpans, [2]int{pos, pos + 15})
			pos += 15
		}
		qs = append(qs, q)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.Logits(hidden, ids, qs, randomLexicon{cfg.HiddenSize}); err != nil {
			b.Fatal(err)
		}
	}
}

// fakeBackend does Upload, MatMul, Read and Free in plain Go (float64 sums);
// scale multiplies every product, to simulate a broken backend.
type fakeBackend struct {
	backend.Backend
	scale   float32
	matmuls int
}

func (f *fakeBackend) Name() string { return "fake" }
func (f *fakeBackend) Upload(data []float32, rows, cols int) (*backend.Tensor, error) {
	if len(data) != rows*cols {
		return nil, fmt.Errorf("upload: %d values for [%d, %d]", len(data), rows, cols)
	}
	return &backend.Tensor{Shape: []int{rows, cols}, Handle: append([]float32(nil), data...)}, nil
}
func (f *fakeBackend) MatMul(x, w *backend.Tensor) (*backend.Tensor, error) {
	m, k, n := x.Shape[0], x.Shape[1], w.Shape[0]
	if w.Shape[1] != k {
		return nil, fmt.Errorf("matmul: [%d, %d] x [%d, %d]ᵀ", m, k, n, w.Shape[1])
	}
	xs, ws := x.Handle.([]float32), w.Handle.([]float32)
	out := make([]float32, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for c := range k {
				s += float64(xs[i*k+c]) * float64(ws[j*k+c])
			}
			out[i*n+j] = float32(s) * f.scale
		}
	}
	f.matmuls++
	return &backend.Tensor{Shape: []int{m, n}, Handle: out}, nil
}
func (f *fakeBackend) Read(_ context.Context, t *backend.Tensor) ([]float32, error) {
	return append([]float32(nil), t.Handle.([]float32)...), nil
}
func (f *fakeBackend) Free(ts ...*backend.Tensor) {
	for _, t := range ts {
		t.Handle = nil
	}
}

func TestBind(t *testing.T) {
	m, h, lex := openRelease(t, "release")
	c := readCases(t, "cases.jsonl")[7]
	hidden, _ := readNpy(t, filepath.Join(tinyDir, c.HiddenFile))
	want, err := h.Logits(hidden, c.InputIDs, c.questions(), lex)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := Load(m, h.Config())
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{scale: 1}
	if err := bound.Bind(fb); err != nil {
		t.Fatal(err)
	}
	got, err := bound.Logits(hidden, c.InputIDs, c.questions(), lex)
	if err != nil {
		t.Fatal(err)
	}
	// memory projection + k, v of 2 evidence and 2 decoder layers, plus the check.
	if fb.matmuls != 1+1+4+4 {
		t.Errorf("%d products ran on the backend, want 10", fb.matmuls)
	}
	for qi := range want {
		for k := range want[qi] {
			if d := math.Abs(float64(got[qi][k] - want[qi][k])); d > 1e-5 || math.Abs(float64(got[qi][k])-c.Logits[qi][k]) > 1e-5 {
				t.Errorf("q%d o%d: bound %v, Go %v, golden %v", qi, k, got[qi][k], want[qi][k], c.Logits[qi][k])
			}
		}
	}
	broken, _ := Load(m, h.Config())
	if err := broken.Bind(&fakeBackend{scale: 1.01}); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Errorf("Bind to a wrong backend: err = %v", err)
	}
	if broken.b != nil || broken.memoryProjection.bound != nil {
		t.Error("a failed Bind left the head bound")
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64}`))
	f.Add([]byte(`{"hidden_size": 64, "width": 0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err == nil && c.Validate() != nil {
			t.Errorf("ParseConfig accepted an invalid config %+v", c)
		}
	})
}

// FuzzRecord feeds the tiny head arbitrary questions: it must answer or
// refuse, never panic, and never return a non-finite logit.
func FuzzRecord(f *testing.F) {
	_, h, lex := openRelease(f, "release")
	c := readCases(f, "cases.jsonl")[0]
	hidden, _ := readNpy(f, filepath.Join(tinyDir, c.HiddenFile))
	q := c.Questions[0]
	f.Add(q.Type, q.Span[0], q.Span[1], q.OptionSpans[0][0], q.OptionSpans[0][1], q.OptionSpans[1][0], q.OptionSpans[1][1], 7)
	f.Fuzz(func(t *testing.T, typ, s0, s1, a0, a1, b0, b1, id int) {
		ids := append([]int(nil), c.InputIDs...)
		ids[len(ids)/2] = id
		qs := []Question{{Type: typ, Span: [2]int{s0, s1}, OptionSpans: [][2]int{{a0, a1}, {b0, b1}}}}
		logits, err := h.Logits(hidden, ids, qs, lex)
		if err != nil {
			return
		}
		for _, x := range logits[0] {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("non-finite logit %v", x)
			}
		}
	})
}
