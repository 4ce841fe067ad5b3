package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/record"
)

// tinyBuild is a small grid: 16- and 64-token states, 1 and 3 questions.
func tinyBuild(t *testing.T) BuildFunc {
	return func(tok record.Tokenizer) ([]*Scenario, []Skipped, error) {
		states, err := ParseStates("16,64")
		if err != nil {
			t.Fatal(err)
		}
		return Build(tok, Grid{States: states, Questions: []int{1, 3}, Options: []int{3}, Seed: 1}, 0)
	}
}

// Two names for the same model agree perfectly; the bf16 copy is compared
// with the f32 one, which is picked as the reference on its own.
func TestRunInProcessAgreement(t *testing.T) {
	cfg := Config{Models: []ModelSpec{{Path: tinyReleaseB16}, {Path: tinyRelease}, {Name: "again", Path: tinyRelease}},
		Reps: 2, Warmup: 1, Engine: engine.Options{Backend: "cpu", Threads: 1}}
	rep, err := Run(context.Background(), cfg, nil, tinyBuild(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reference != "f32" || len(rep.Models) != 3 || !rep.Models[1].Reference {
		t.Fatalf("reference %q, models %d", rep.Reference, len(rep.Models))
	}
	if len(rep.Scenarios) != 4 {
		t.Fatalf("%d scenarios", len(rep.Scenarios))
	}
	for i := 1; i < len(rep.Scenarios); i++ {
		if rep.Scenarios[i].InputTokens < rep.Scenarios[i-1].InputTokens {
			t.Error("scenarios are not ordered by length")
		}
	}
	same := rep.Models[2].Agreement["all"]
	if same == nil || same.Top1 != 1 || same.MeanTV != 0 || same.MaxAbsDP != 0 || same.MeanKL != 0 {
		t.Errorf("the same model disagrees with itself: %+v", same)
	}
	if same.Questions != 2*(1+3) {
		t.Errorf("%d questions compared, want 8", same.Questions)
	}
	b16 := rep.Models[0]
	if b16.Name != "bf16" || b16.Quant != "bf16" || b16.Agreement == nil || b16.Agreement["noul"] == nil || b16.Agreement["choice"] == nil || b16.Agreement["score"] == nil {
		t.Fatalf("bf16 model: %+v", b16)
	}
	if a := b16.Agreement["all"]; a.MeanTV < 0 || a.MeanTV > 1 || a.MaxAbsDP > 1 || a.MeanKL < 0 {
		t.Errorf("bf16 agreement out of range: %+v", a)
	}
	for _, m := range rep.Models {
		if m.LoadSeconds <= 0 || m.FileBytes <= 0 || m.Backend != "cpu" || len(m.Scenarios) != 4 {
			t.Errorf("%s: load %g s, %d bytes, backend %q, %d scenarios", m.Name, m.LoadSeconds, m.FileBytes, m.Backend, len(m.Scenarios))
		}
		for _, s := range m.Scenarios {
			if s.Runs != 2 || len(s.LatenciesMS) != 2 || s.Latency.P50 <= 0 || s.Latency.P50 > s.Latency.P99 || s.TokensPerSecond <= 0 ||
				s.Stages == nil || s.Stages.Thinker <= 0 || s.PrefillTokensPerSecond <= 0 {
				t.Errorf("%s %s: %+v", m.Name, s.Scenario, s)
			}
		}
	}
}

// The HTTP runner reads a SystemOne daemon's answers in request order: run
// against a server answering with the tiny engine, they are the in-process
// probabilities exactly.
func TestRunHTTP(t *testing.T) {
	e, err := engine.Open(tinyRelease, engine.Options{Backend: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var posts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != SystemOnePath || r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "wrong route", http.StatusNotFound)
			return
		}
		posts++
		body, _ := io.ReadAll(r.Body)
		req, err := api.ParseRequest(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, _, err := e.Decide(r.Context(), req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		data, _ := resp.MarshalJSON()
		w.Write(data)
	}))
	defer srv.Close()

	cfg := Config{URL: srv.URL + "/", Token: "tok", Reps: 1}
	rep, err := Run(context.Background(), cfg, e.Tokenizer(), tinyBuild(t))
	if err != nil {
		t.Fatal(err)
	}
	if posts != 4 || len(rep.Models) != 1 || rep.Models[0].Backend != "http" || rep.Models[0].Scenarios[0].Stages != nil {
		t.Fatalf("%d posts, report %+v", posts, rep.Models)
	}
	// The same records in process give the same probabilities.
	scs, _, _ := tinyBuild(t)(e.Tokenizer())
	h, _ := NewHTTP(srv.URL, "tok")
	p := &InProcess{E: e, MaxLength: engine.DefaultMaxLength}
	for _, sc := range scs {
		for _, r := range sc.Records {
			a, err := h.Decide(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			b, err := p.Decide(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a.Probs, b.Probs) || a.InputTokens != b.InputTokens {
				t.Errorf("%s: over HTTP %v, in process %v", r.ID, a.Probs, b.Probs)
			}
		}
	}

	bad := Config{URL: srv.URL, Token: "wrong", Reps: 1}
	if _, err := Run(context.Background(), bad, e.Tokenizer(), tinyBuild(t)); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a refusing daemon: %v", err)
	}
	if _, err := NewHTTP("localhost:8089", ""); err == nil {
		t.Error("a URL without a scheme was accepted")
	}
}

func TestParseWireErrors(t *testing.T) {
	req, err := api.ParseRequest([]byte(`{"model": "clef-omni", "state": "s", "questions": {"a": {"type": "noul", "instructions": "?"}, "b": {"type": "choice", "instructions": "?", "criteria": {"y": "Y", "x": "X"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	good := `{"model": "m", "answers": {"b": {"type": "choice", "choice": "y", "confidence": 0.6, "probabilities": {"y": 0.6, "x": 0.4}}, "a": {"type": "noul", "noul": 0.25}}, "usage": {"input_tokens": 9, "output_tokens": 0}}`
	probs, n, err := parseWire([]byte(good), req)
	if err != nil || n != 9 || !reflect.DeepEqual(probs, [][]float64{{0.25, 0.75}, {0.6, 0.4}}) {
		t.Fatalf("got %v %d %v", probs, n, err)
	}
	for _, bad := range []string{`not json`, `{"answers": {"a": {"type": "noul", "noul": 0.5}}}`, `{"answers": {"a": {"type": "noul"}, "b": {}}}`,
		`{"answers": {"a": {"type": "noul", "noul": 0.5}, "b": {"type": "choice", "probabilities": [0.5]}}}`} {
		if _, _, err := parseWire([]byte(bad), req); err == nil {
			t.Errorf("parseWire(%s) accepted", bad)
		}
	}
}

func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Models: []ModelSpec{{Path: tinyRelease}}, Reps: 0}, "reps"},
		{Config{Models: []ModelSpec{{Path: tinyRelease}}, Reps: 1, Warmup: -1}, "warmup"},
		{Config{Reps: 1}, "no model"},
		{Config{Models: []ModelSpec{{Path: "no/such/model"}}, Reps: 1}, "no/such/model"},
		{Config{Models: []ModelSpec{{Path: tinyRelease}}, Reps: 1, Reference: "nope"}, "nope"},
		{Config{Models: []ModelSpec{{Name: "x", Path: tinyRelease}, {Name: "x", Path: tinyRelease}}, Reps: 1}, "two models"},
		{Config{URL: "http://127.0.0.1:1", Reps: 1}, "tokenizer"},
	} {
		_, err := Run(ctx, tc.cfg, nil, tinyBuild(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %q", tc.cfg, err, tc.want)
		}
	}
}

func TestPercentilesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(d)
	if p.P50 != 50 || p.P95 != 95 || p.P99 != 99 || p.Min != 1 || p.Max != 100 || p.Mean != 50.5 {
		t.Errorf("%+v", p)
	}
	if p := percentiles([]time.Duration{3 * time.Millisecond}); p.P50 != 3 || p.P99 != 3 {
		t.Errorf("one run: %+v", p)
	}
	if p := percentiles(nil); p != (Percentiles{}) {
		t.Errorf("no run: %+v", p)
	}
}

func TestQuantName(t *testing.T) {
	for path, want := range map[string]string{
		"out/model-q4_k_m.gguf": "q4_k_m", "x/Clef-Q8_0.gguf": "q8_0", "m-q2_k.gguf": "q2_k", "model-q6_k.gguf": "q6_k",
		"a/release-bf16": "bf16", tinyRelease: "f32", "weird.gguf": "unknown", "clef-mlx-4bit": "mlx-4bit",
	} {
		if got := QuantName(path); got != want {
			t.Errorf("QuantName(%q) = %q, want %q", path, got, want)
		}
	}
	if PrecisionRank("bf16") <= PrecisionRank("q8_0") || PrecisionRank("q4_k_m") <= PrecisionRank("q2_k") || PrecisionRank("x") != 0 {
		t.Error("precision order")
	}
	got := ParseModels("a.gguf, fast=b/c.gguf,,d/e=f")
	want := []ModelSpec{{Path: "a.gguf"}, {Name: "fast", Path: "b/c.gguf"}, {Path: "d/e=f"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseModels: %+v", got)
	}
}

// documentedFields are report.json's keys as bench/README.md lists them.
var documentedFields = []string{
	"schema_version", "tool", "created", "host", "goos", "goarch", "cpus", "go_version", "settings", "warmup", "reps",
	"max_length", "threads", "reference", "scenarios", "name", "source", "state_label", "state_tokens", "input_tokens",
	"questions", "options", "records", "question_types", "models", "path", "quant", "file_bytes", "backend",
	"load_seconds", "peak_rss_bytes", "scenario", "runs", "latency_ms", "p50", "p95", "p99", "mean", "min", "max",
	"latencies_ms", "tokens_per_second", "prefill_tokens_per_second", "stages_ms", "tokenize", "encode", "thinker",
	"head", "agreement", "all", "noul", "choice", "top1_agreement", "mean_total_variation", "max_abs_dp", "mean_kl",
}

// keys collects every object key of a decoded JSON document.
func keys(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			into[k] = true
			keys(c, into)
		}
	case []any:
		for _, c := range x {
			keys(c, into)
		}
	}
}

// report.json round-trips, carries every documented field, and README.md
// documents every field it carries.
func TestReportJSONRoundTripAndFields(t *testing.T) {
	cfg := Config{Models: []ModelSpec{{Name: "ref", Path: tinyRelease}, {Name: "copy", Path: tinyRelease}}, Reps: 1, Engine: engine.Options{Threads: 1}}
	rep, err := Run(context.Background(), cfg, nil, tinyBuild(t))
	if err != nil {
		t.Fatal(err)
	}
	rep.Kernels = &KernelReport{Peaks: []Peaks{{Backend: "cpu", Source: "measured", Threads: 1, BytesPerSecond: 1e10, FLOPsPerSecond: 1e11}},
		Results: []KernelResult{{Name: "gemm/q8_0/m=16", Backend: "cpu", Type: "q8_0", Threads: 1, M: 16, N: 32, K: 64, Iterations: 3, Seconds: 1, Bytes: 10, FLOPs: 20}}}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Error("report.json does not round-trip")
	}
	var doc any
	json.Unmarshal(buf.Bytes(), &doc)
	got := map[string]bool{}
	keys(doc, got)
	for _, k := range documentedFields {
		if !got[k] {
			t.Errorf("report.json lacks documented field %q", k)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for k := range got {
		if !strings.Contains(string(readme), "`"+k+"`") && !strings.Contains(string(readme), "`"+k+"[]`") {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("README.md does not document %v", missing)
	}
	if _, err := ReadReport([]byte(`{"schema_version": 99}`)); err == nil {
		t.Error("an unknown schema version was read")
	}
	if _, err := ReadReport([]byte(`{`)); err == nil {
		t.Error("broken JSON was read")
	}

	dir := t.TempDir()
	paths, err := rep.WriteDir(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 5 {
		t.Fatalf("wrote %v", paths)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "out", ReportMarkdown))
	for _, want := range []string{"| ref |", "| copy |", "reference", "1.000 | 0.0000", "Kernels against the roofline", "gemm/q8_0/m=16"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	txt, _ := os.ReadFile(filepath.Join(dir, "out", BenchTxt))
	lines := 0
	for _, l := range strings.Split(string(txt), "\n") {
		if strings.HasPrefix(l, "BenchmarkDecide/model=") {
			lines++
			if f := strings.Split(l, "\t"); len(f) != 4 || f[1] != "1" || !strings.HasSuffix(f[2], " ns/op") {
				t.Errorf("benchmark line %q", l)
			}
		}
	}
	if lines != 2*4 {
		t.Errorf("%d benchmark lines, want 8", lines)
	}
	for _, svg := range []string{LatencySVG, AgreementSVG} {
		data, _ := os.ReadFile(filepath.Join(dir, "out", svg))
		if !bytes.HasPrefix(data, []byte("<svg")) || !bytes.Contains(data, []byte("copy")) || !bytes.HasSuffix(data, []byte("</svg>\n")) {
			t.Errorf("%s is not a plot of the models", svg)
		}
	}
}

// With more scenarios than fit as columns, latency gets one row per
// scenario and a column per model.
func TestMarkdownSplitTables(t *testing.T) {
	rep := &Report{SchemaVersion: SchemaVersion, Reference: "a"}
	for _, name := range []string{"a", "b"} {
		m := &ModelReport{Name: name, Quant: "q8_0", Reference: name == "a"}
		if name == "b" {
			m.Agreement = map[string]*Agreement{"all": {Questions: 6, Top1: 0.5, MeanTV: 0.25}}
		}
		rep.Models = append(rep.Models, m)
	}
	for i := 0; i < maxInlineScenarios+1; i++ {
		name := fmt.Sprintf("s%d", i)
		rep.Scenarios = append(rep.Scenarios, ScenarioInfo{Name: name, InputTokens: 100 * (i + 1)})
		for k, m := range rep.Models {
			m.Scenarios = append(m.Scenarios, &ScenarioResult{Scenario: name, Latency: Percentiles{P50: float64(10*i + k)}})
		}
	}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"## Models and agreement", "| b | q8_0 |", "0.500 | 0.2500", "| scenario | tokens | a | b |", "| s4 | 500 | 40.0 | 41.0 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}
