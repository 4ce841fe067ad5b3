package schemahead

import (
	"fmt"
	"math"
	"path/filepath"
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

// BenchmarkHead runs a real-size head bound to the cpu backend (as the engine
// runs it) on records of L tokens. cpu-ms/op is the process CPU time per
// call: the wall time depends on the machine's load.
func BenchmarkHead(b *testing.B) {
	cfg := realConfig
	h, err := Load(randomModel(b, cfg), cfg)
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
		}{{"go", nil}, {"fake", &fakeBackend{scale: 1}}, {"cpu", cpu}} {
			h, err := Load(m, h0.Config())
			if err != nil {
				t.Fatal(err)
			}
			h.crossMode = mode.mode
			if bk.b != nil {
				if err := h.Bind(bk.b); err != nil {
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
