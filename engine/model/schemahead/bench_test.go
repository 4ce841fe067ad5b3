package schemahead

import (
	"fmt"
	"math"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
)

// realConfig is about the published Clef head size (~120M parameters).
var realConfig = release.Head{HiddenSize: 2048, Width: 1024, RoutingLayers: 2, Layers: 4, Heads: 16, Feedforward: 4096}

// syntheticRecord returns L hidden rows, L ids and 3 questions of 4 options
// each, placed after the first 100 tokens.
func syntheticRecord(cfg release.Head, L int) ([]float32, []int, []Question) {
	hidden := make([]float32, L*cfg.HiddenSize)
	for i := range hidden {
		hidden[i] = float32(math.Cos(float64(i)))
	}
	ids := make([]int, L)
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
	return hidden, ids, qs
}

// BenchmarkHead runs a real-size head on the cpu backend (as the engine
// runs it) on records of L tokens. cpu-ms/op is the process CPU time per
// call: the wall time depends on the machine's load.
func BenchmarkHead(b *testing.B) {
	cfg := realConfig
	h, err := Load(randomModel(cfg), cfg)
	if err != nil {
		b.Fatal(err)
	}
	be, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Bind(be); err != nil {
		b.Fatal(err)
	}
	for _, L := range []int{512, 2048} {
		b.Run(fmt.Sprintf("L=%d", L), func(b *testing.B) {
			hidden, ids, qs := syntheticRecord(cfg, L)
			lex := randomLexicon{cfg.HiddenSize}
			c0 := cpuTime()
			for b.Loop() {
				if _, err := h.Logits(hidden, ids, qs, lex); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// TestCrossForms runs every golden case with the cross-attentions forced
// into each form (cross.go) on the cpu backend, with one worker and with
// several, against the reference logits.
func TestCrossForms(t *testing.T) {
	m, h0, lex := openRelease(t, "release")
	cases := readCases(t, "cases.jsonl")
	one, err := backend.Open("cpu", backend.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		mode int
	}{{"direct", crossDirect}, {"folded", crossFolded}, {"auto", crossAuto}} {
		for _, bk := range []struct {
			name string
			b    backend.Backend
		}{{"cpu", cpu(t)}, {"cpu-1", one}} {
			h, err := Load(m, h0.Config())
			if err != nil {
				t.Fatal(err)
			}
			h.crossMode = mode.mode
			if err := h.Bind(bk.b); err != nil {
				t.Fatal(err)
			}
			worst := checkGolden(t, mode.name+"/"+bk.name, h, lex, cases)
			t.Logf("%s/%s: max |Δlogit| %.3g", mode.name, bk.name, worst)
		}
	}
}

// TestFoldedChoice checks the cost rule picks each form where it is cheaper.
func TestFoldedChoice(t *testing.T) {
	h := &Head{cfg: realConfig}
	if !h.folded(12) || !h.folded(3) || h.folded(100) {
		t.Errorf("real head: folded(12, 3, 100) = %v %v %v, want true true false", h.folded(12), h.folded(3), h.folded(100))
	}
	h.crossMode = crossDirect
	if h.folded(1) {
		t.Error("crossDirect chose the folded form")
	}
	h.crossMode = crossFolded
	if !h.folded(1000) {
		t.Error("crossFolded chose the direct form")
	}
}

// TestFoldedWeights checks the folded form's per-head weights (and the
// uploaded value projection) against the in_proj_weight they come from.
func TestFoldedWeights(t *testing.T) {
	_, h, _ := openRelease(t, "release")
	w, heads := h.cfg.Width, h.cfg.Heads
	hd := w / heads
	in, err := weightsOf(h, "layers.1.multihead_attn.in_proj_weight")
	if err != nil {
		t.Fatal(err)
	}
	a := &h.w.layers[1].multiheadAttn
	kT, err := h.b.Read(t.Context(), a.kT)
	if err != nil {
		t.Fatal(err)
	}
	vw, err := h.b.Read(t.Context(), a.v.w)
	if err != nil {
		t.Fatal(err)
	}
	for hh := range heads {
		for d := range hd {
			for j := range w {
				if got, want := kT[(hh*w+j)*hd+d], in[(w+hh*hd+d)*w+j]; got != want {
					t.Fatalf("kT head %d [%d, %d] = %v, want Wk[%d, %d] = %v", hh, j, d, got, hh*hd+d, j, want)
				}
			}
		}
	}
	for i, v := range vw {
		if v != in[2*w*w+i] {
			t.Fatalf("vw[%d] = %v, want Wv's %v", i, v, in[2*w*w+i])
		}
	}
}

// TestRandomHeadMatchesReference runs a head of other proportions than
// the tiny release's (hidden below width, five heads, a question with one
// option) with random weights in every cross-attention form, against the
// float64 reference.
func TestRandomHeadMatchesReference(t *testing.T) {
	cfg := release.Head{HiddenSize: 24, Width: 40, RoutingLayers: 2, Layers: 2, Heads: 5, Feedforward: 56}
	m := randomModel(cfg)
	ref := newReference(t, m, cfg)
	const L = 60
	hidden := make([]float32, L*cfg.HiddenSize)
	for i := range hidden {
		hidden[i] = float32(math.Sin(0.37*float64(i))) * 2
	}
	ids := make([]int, L)
	for i := range ids {
		ids[i] = (i * 7) % 23
	}
	qs := []Question{
		{Type: TypeNoul, Span: [2]int{2, 6}, OptionSpans: [][2]int{{6, 8}, {8, 9}}},
		{Type: TypeChoice, Span: [2]int{10, 14}, OptionSpans: [][2]int{{14, 16}, {16, 19}, {19, 20}, {20, 25}}},
		{Type: TypeScore, Span: [2]int{30, 31}, OptionSpans: [][2]int{{31, 35}}},
	}
	lex := randomLexicon{cfg.HiddenSize}
	want, err := ref.logits(hidden, ids, qs, lex)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []int{crossAuto, crossDirect, crossFolded} {
		h, err := Load(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		h.crossMode = mode
		if err := h.Bind(cpu(t)); err != nil {
			t.Fatal(err)
		}
		got, err := h.Logits(hidden, ids, qs, lex)
		if err != nil {
			t.Fatal(err)
		}
		for qi := range want {
			for k, w := range want[qi] {
				if d := math.Abs(float64(got[qi][k]) - w); d > 1e-5*(1+math.Abs(w)) {
					t.Errorf("mode %d q%d o%d: logit %v, reference %v", mode, qi, k, got[qi][k], w)
				}
			}
		}
	}
}
