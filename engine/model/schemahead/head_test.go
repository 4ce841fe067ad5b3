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
	"sync"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
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

// cpuBackend is the cpu backend the tests bind heads to.
var cpuBackend = sync.OnceValues(func() (backend.Backend, error) { return backend.Open("cpu", backend.Options{Threads: 2}) })

func cpu(t testing.TB) backend.Backend {
	t.Helper()
	b, err := cpuBackend()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openRelease opens a clef-tiny release and its head, bound to the cpu
// backend.
func openRelease(t testing.TB, dir string) (weights.Model, *Head, Lexicon) {
	t.Helper()
	r, err := release.Open(filepath.Join(tinyDir, dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if r.Config.Head == nil {
		t.Fatalf("%s: no head configuration", dir)
	}
	h, err := Load(r.Weights, *r.Config.Head)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Bind(cpu(t)); err != nil {
		t.Fatal(err)
	}
	lm, err := r.Weights.Tensor(release.LMHead)
	if err != nil {
		t.Fatal(err)
	}
	return r.Weights, h, TensorLexicon(lm)
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
		m, h, lex := openRelease(t, rel.dir)
		ref := newReference(t, m, h.Config())
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
			logits64, err := ref.logits(hidden, c.InputIDs, c.questions(), lex)
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
		t.Logf("%s: max |Δlogit| %.3g (float64 reference %.3g), max |Δp| %.3g", rel.dir, worstLogit, worst64, worstProb)
	}
}

// checkGolden runs the golden cases through h and checks its logits and
// their float32 softmax against the reference's (the tolerances of
// TestGoldenLogits); it returns the largest |Δlogit|.
func checkGolden(t *testing.T, label string, h *Head, lex Lexicon, cases []goldenCase) float64 {
	t.Helper()
	const logitTol, probTol = 1e-5, 1e-6
	var worst float64
	for _, c := range cases {
		hidden, _ := readNpy(t, filepath.Join(tinyDir, c.HiddenFile))
		logits, err := h.Logits(hidden, c.InputIDs, c.questions(), lex)
		if err != nil {
			t.Fatalf("%s/%s: %v", label, c.Name, err)
		}
		for qi := range c.Logits {
			probs := Softmax(logits[qi])
			for k, want := range c.Logits[qi] {
				dl := math.Abs(float64(logits[qi][k]) - want)
				dp := math.Abs(float64(probs[k]) - c.Probabilities[qi][k])
				worst = max(worst, dl)
				if dl > logitTol || dp > probTol {
					t.Errorf("%s/%s q%d o%d: logit %v, want %v; p %v, want %v", label, c.Name, qi, k, logits[qi][k], want, probs[k], c.Probabilities[qi][k])
				}
			}
		}
	}
	return worst
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
	if _, err := h.forward(context.Background(), hidden, c.InputIDs, c.questions(), lex, &tr); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		file string
		got  []float32
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
			worst = max(worst, math.Abs(float64(s.got[i])-float64(want[i])))
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
		cfg  release.Head
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

// filedModel is a weights.Model that says which file each tensor lives in,
// as weights.Set does.
type filedModel struct {
	memModel
	file map[string]string
}

func (f filedModel) File(name string) string { return f.file[name] }

// TestLoadExtraByFile checks that only the head's own file must hold
// nothing but the head: a backbone stored under other names (a GGUF's
// blk.*) in another file is no concern, an unknown tensor beside the head
// is.
func TestLoadExtraByFile(t *testing.T) {
	cfg := release.Head{HiddenSize: 8, Width: 8, RoutingLayers: 1, Layers: 1, Heads: 2, Feedforward: 16}
	m := filedModel{memModel: randomModel(cfg), file: map[string]string{}}
	for name := range m.memModel {
		m.file[name] = "model.head.gguf"
	}
	blk := &weights.Tensor{Name: "blk.0.attn_q.weight", Type: quant.F32, Shape: []int{1}, Data: make([]byte, 4)}
	m.memModel[blk.Name], m.file[blk.Name] = blk, "model.gguf"
	tower := &weights.Tensor{Name: "thinker.visual.patch_embed.weight", Type: quant.F32, Shape: []int{1}, Data: make([]byte, 4)}
	m.memModel[tower.Name], m.file[tower.Name] = tower, "model.head.gguf"
	if _, err := Load(m, cfg); err != nil {
		t.Fatalf("backbone in another file: %v", err)
	}
	stray := &weights.Tensor{Name: "blk.0.attn_k.weight", Type: quant.F32, Shape: []int{1}, Data: make([]byte, 4)}
	m.memModel[stray.Name], m.file[stray.Name] = stray, "model.head.gguf"
	if _, err := Load(m, cfg); err == nil || !strings.Contains(err.Error(), "unexpected tensors blk.0.attn_k.weight") {
		t.Errorf("a stray tensor in the head's file: err = %v", err)
	}
	if _, err := Load(m.memModel, cfg); err == nil || !strings.Contains(err.Error(), "unexpected tensors blk.0.attn_") {
		t.Errorf("a model without files: err = %v", err)
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
	m, _, _ := openRelease(t, "release")
	unbound, err := Load(m, h.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unbound.Logits(hidden, c.InputIDs, qs, lex); err == nil || !strings.Contains(err.Error(), "not bound") {
		t.Errorf("unbound head: err = %v", err)
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
// weights (uniform, scaled by the fan-in; norm weights around 1), one
// tensor per row of the head's tensor table.
func randomModel(cfg release.Head) memModel {
	m := memModel{}
	seed := uint64(1)
	for _, row := range release.HeadTensors(cfg) {
		n := 1
		for _, d := range row.Shape {
			n *= d
		}
		fan := 1.0
		if len(row.Shape) == 2 {
			fan = float64(row.Shape[1])
		}
		data := make([]byte, 4*n)
		for i := range n {
			seed = seed*6364136223846793005 + 1442695040888963407
			u := float64(seed>>11)/float64(1<<53) - 0.5
			v := float32(u * 2 * math.Sqrt(3/fan))
			if len(row.Shape) == 1 && strings.HasSuffix(row.Name, ".weight") {
				v += 1
			}
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		m[row.Name] = &weights.Tensor{Name: row.Name, Type: quant.F32, Shape: row.Shape, Data: data}
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
// on the cpu backend on a 1000-token record with 3 questions of 4 options.
func BenchmarkHeadLarge(b *testing.B) {
	cfg := realConfig
	h, err := Load(randomModel(cfg), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Bind(cpu(b)); err != nil {
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

// failing is the cpu backend whose uploads fail after the first n.
type failing struct {
	backend.Backend
	n int
}

func (f *failing) Upload(data []float32, rows, cols int) (*backend.Tensor, error) {
	if f.n == 0 {
		return nil, fmt.Errorf("out of device memory")
	}
	f.n--
	return f.Backend.Upload(data, rows, cols)
}

// TestBind checks that a head binds once, and that a failed Bind leaves it
// unbound.
func TestBind(t *testing.T) {
	m, h, _ := openRelease(t, "release")
	if err := h.Bind(cpu(t)); err == nil || !strings.Contains(err.Error(), "already bound") {
		t.Errorf("second Bind: err = %v", err)
	}
	broken, err := Load(m, h.Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := broken.Bind(&failing{Backend: cpu(t), n: 3}); err == nil || !strings.Contains(err.Error(), "out of device memory") {
		t.Errorf("Bind to a failing backend: err = %v", err)
	}
	if broken.b != nil || broken.w != nil {
		t.Error("a failed Bind left the head bound")
	}
	if err := broken.Bind(cpu(t)); err != nil {
		t.Errorf("Bind after a failed Bind: %v", err)
	}
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

// weightsOf returns a checked checkpoint tensor of h in float32.
func weightsOf(h *Head, name string) ([]float32, error) {
	t := h.p.t[name]
	if t == nil {
		return nil, fmt.Errorf("no tensor %s", name)
	}
	return weights.Float32(t)
}
