package schemahead

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu"
)

// realConfig is about the published Clef head size (~120M parameters).
var realConfig = Config{HiddenSize: 2048, Width: 1024, RoutingLayers: 2, Layers: 4, Heads: 16, Feedforward: 4096}

// syntheticRecord returns L hidden rows, L ids and 3 questions of 4 options
// each, placed after the first 100 tokens.
func syntheticRecord(cfg Config, L int) ([]float32, []int, []Question) {
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

// BenchmarkHead runs a real-size head bound to the cpu backend with Bind (as
// the engine runs it) on records of L tokens. cpu-ms/op is the process CPU
// time per call: the wall time depends on the machine's load.
func BenchmarkHead(b *testing.B) { benchHead(b, (*Head).Bind) }

// BenchmarkHeadAll is BenchmarkHead with every product on the backend
// (BindAll).
func BenchmarkHeadAll(b *testing.B) { benchHead(b, (*Head).BindAll) }

func benchHead(b *testing.B, bind func(*Head, backend.Backend) error) {
	cfg := realConfig
	h, err := Load(randomModel(b, cfg), cfg)
	if err != nil {
		b.Fatal(err)
	}
	be, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := bind(h, be); err != nil {
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
// into each form (cross.go), in Go, on a fake backend and on the cpu
// backend, in float32 and (Go only) float64, against the reference logits.
func TestCrossForms(t *testing.T) {
	const logitTol, probTol = 1e-5, 1e-6
	m, h0, lex := openRelease(t, "release")
	cases := readCases(t, "cases.jsonl")
	cpu, err := backend.Open("cpu", backend.Options{Threads: 2})
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
			all  bool
		}{{"go", nil, false}, {"fake", &fakeBackend{scale: 1}, false}, {"cpu", cpu, false},
			{"fake-all", &fakeBackend{scale: 1}, true}, {"cpu-all", cpu, true}} {
			h, err := Load(m, h0.Config())
			if err != nil {
				t.Fatal(err)
			}
			h.crossMode = mode.mode
			bind := (*Head).Bind
			if bk.all {
				bind = (*Head).BindAll
			}
			if bk.b != nil {
				if err := bind(h, bk.b); err != nil {
					t.Fatal(err)
				}
			}
			var worst float64
			for _, c := range cases {
				hidden, _ := readNpy(t, filepath.Join(tinyDir, c.HiddenFile))
				logits, err := h.Logits(hidden, c.InputIDs, c.questions(), lex)
				if err != nil {
					t.Fatalf("%s/%s/%s: %v", mode.name, bk.name, c.Name, err)
				}
				var logits64 [][]float64
				if bk.b == nil {
					if logits64, err = h.LogitsFloat64(hidden, c.InputIDs, c.questions(), lex); err != nil {
						t.Fatalf("%s/%s/%s: float64: %v", mode.name, bk.name, c.Name, err)
					}
				}
				for qi := range c.Logits {
					probs := Softmax(logits[qi])
					for k, want := range c.Logits[qi] {
						dl := math.Abs(float64(logits[qi][k]) - want)
						dp := math.Abs(float64(probs[k]) - c.Probabilities[qi][k])
						worst = max(worst, dl)
						if dl > logitTol || dp > probTol {
							t.Errorf("%s/%s/%s q%d o%d: logit %v, want %v; p %v, want %v", mode.name, bk.name, c.Name, qi, k, logits[qi][k], want, probs[k], c.Probabilities[qi][k])
						}
						if logits64 != nil && math.Abs(logits64[qi][k]-want) > logitTol {
							t.Errorf("%s/%s/%s q%d o%d: float64 logit %v, want %v", mode.name, bk.name, c.Name, qi, k, logits64[qi][k], want)
						}
					}
				}
			}
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

// TestBindAll checks what BindAll binds, that a wrong backend is refused
// without leaving anything bound, and that a head binds once.
func TestBindAll(t *testing.T) {
	m, h0, _ := openRelease(t, "release")
	fb := &fakeBackend{scale: 1}
	h, _ := Load(m, h0.Config())
	if err := h.BindAll(fb); err != nil {
		t.Fatal(err)
	}
	ls, cross := h.layersOf()
	for _, l := range ls {
		if l.bound == nil {
			t.Fatal("BindAll left a linear unbound")
		}
	}
	heads := h.Config().Heads
	for _, a := range cross {
		if len(a.kT) != heads || len(a.vh) != heads {
			t.Fatalf("cross-attention has %d/%d per-head weights, want %d", len(a.kT), len(a.vh), heads)
		}
	}
	// One check product per linear and two per head of every cross-attention.
	if want := len(ls) + 2*heads*len(cross); fb.matmuls != want {
		t.Errorf("BindAll ran %d check products, want %d", fb.matmuls, want)
	}
	if err := h.BindAll(fb); err == nil || !strings.Contains(err.Error(), "already bound") {
		t.Errorf("second BindAll: err = %v", err)
	}
	broken, _ := Load(m, h0.Config())
	if err := broken.BindAll(&fakeBackend{scale: 1.01}); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Errorf("BindAll to a wrong backend: err = %v", err)
	}
	ls, cross = broken.layersOf()
	for _, l := range ls {
		if l.bound != nil || broken.b != nil {
			t.Fatal("a failed BindAll left the head bound")
		}
	}
	for _, a := range cross {
		if a.kT != nil || a.vh != nil {
			t.Fatal("a failed BindAll left per-head weights bound")
		}
	}
}

// TestTransposeAndNormT checks transpose and the transposed LayerNorm, which
// must equal the transpose of applyNorm bit for bit, on odd sizes.
func TestTransposeAndNormT(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {1, 5}, {17, 1}, {37, 19}, {70, 33}} {
		n, d := sz[0], sz[1]
		x := make([]float32, n*d)
		ln := layerNorm{weight: make([]float32, d), bias: make([]float32, d)}
		for i := range x {
			x[i] = float32(math.Sin(float64(3*i+1))) * 4
		}
		for j := range d {
			ln.weight[j], ln.bias[j] = 1+float32(j)/7, float32(j%3)-1
		}
		xt := transpose(x, n, d)
		for r := range n {
			for c := range d {
				if xt[c*n+r] != x[r*d+c] {
					t.Fatalf("%dx%d: transpose[%d,%d] = %v, want %v", n, d, c, r, xt[c*n+r], x[r*d+c])
				}
			}
		}
		want := transpose(applyNorm(&ln, x, n, d), n, d)
		mean, inv := normStats(x, n, d)
		got := applyNormT(&ln, xt, n, d, mean, inv)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%dx%d: applyNormT[%d] = %v, want %v", n, d, i, got[i], want[i])
			}
		}
	}
}
