package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// SchemaVersion is report.json's "schema_version". It changes only when a
// field is removed or changes meaning; fields may be added.
const SchemaVersion = 1

// Report is report.json. Its field names are read by tools outside this
// repository: README.md documents them; keep them stable.
type Report struct {
	SchemaVersion int            `json:"schema_version"`
	Tool          string         `json:"tool"`
	Created       string         `json:"created"` // RFC 3339, UTC
	Host          Host           `json:"host"`
	Settings      Settings       `json:"settings"`
	Reference     string         `json:"reference"` // name of the model the others are compared with
	Scenarios     []ScenarioInfo `json:"scenarios"`
	Skipped       []Skipped      `json:"skipped,omitempty"`
	Models        []*ModelReport `json:"models"`
	Kernels       *KernelReport  `json:"kernels,omitempty"`
}

// Host describes the machine.
type Host struct {
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
}

// Settings are the run's options.
type Settings struct {
	Warmup    int    `json:"warmup"`
	Reps      int    `json:"reps"`
	MaxLength int    `json:"max_length"`
	Backend   string `json:"backend,omitempty"`
	Threads   int    `json:"threads"`
	URL       string `json:"url,omitempty"`
}

// ScenarioInfo is a scenario as built, before anything ran.
type ScenarioInfo struct {
	Name        string         `json:"name"`
	Source      string         `json:"source"`
	StateLabel  string         `json:"state_label,omitempty"`
	StateTokens int            `json:"state_tokens"`
	InputTokens int            `json:"input_tokens"`
	Questions   int            `json:"questions"`
	Options     int            `json:"options"`
	Records     int            `json:"records"`
	Types       map[string]int `json:"question_types"`
}

// ModelReport is one model's results.
type ModelReport struct {
	Name           string            `json:"name"`
	Path           string            `json:"path"`
	Quant          string            `json:"quant"`
	FileBytes      int64             `json:"file_bytes"`
	Backend        string            `json:"backend"`
	LoadSeconds    float64           `json:"load_seconds"`
	PeakRSSBytes   int64             `json:"peak_rss_bytes"`
	GPUMemoryBytes int64             `json:"gpu_memory_bytes,omitempty"`
	Reference      bool              `json:"reference"`
	Scenarios      []*ScenarioResult `json:"scenarios"`
	// Agreement with the reference over all scenarios, keyed "all", "noul",
	// "choice", "score"; absent for the reference itself.
	Agreement map[string]*Agreement `json:"agreement,omitempty"`
}

// ScenarioResult is one model on one scenario.
type ScenarioResult struct {
	Scenario    string      `json:"scenario"`
	InputTokens int         `json:"input_tokens"`
	StateTokens int         `json:"state_tokens"`
	Runs        int         `json:"runs"`
	Latency     Percentiles `json:"latency_ms"`
	LatenciesMS []float64   `json:"latencies_ms"`
	// TokensPerSecond is input tokens over the whole decision time;
	// PrefillTokensPerSecond over the thinker's time only (in process).
	TokensPerSecond        float64               `json:"tokens_per_second"`
	PrefillTokensPerSecond float64               `json:"prefill_tokens_per_second,omitempty"`
	Stages                 *StagesMS             `json:"stages_ms,omitempty"`
	PeakRSSBytes           int64                 `json:"peak_rss_bytes,omitempty"`
	Agreement              map[string]*Agreement `json:"agreement,omitempty"`
}

// Percentiles summarise latencies in milliseconds (nearest rank).
type Percentiles struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// StagesMS are the mean time per stage in milliseconds.
type StagesMS struct {
	Tokenize  float64 `json:"tokenize"`
	Encode    float64 `json:"encode"`
	Decode    float64 `json:"decode"`    // the media decoders
	Processor float64 `json:"processor"` // the image processor and log-mel
	Thinker   float64 `json:"thinker"`   // the thinker forward (towers included)
	Towers    float64 `json:"towers"`    // of thinker: the vision and audio towers
	Head      float64 `json:"head"`
}

func newReport(cfg Config) *Report {
	return &Report{
		SchemaVersion: SchemaVersion,
		Tool:          "clef bench",
		Created:       time.Now().UTC().Format(time.RFC3339),
		Host:          Host{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()},
		Settings: Settings{Warmup: cfg.Warmup, Reps: cfg.Reps, MaxLength: cfg.Engine.MaxLength, Backend: cfg.Engine.Backend,
			Threads: cfg.Engine.Threads, URL: cfg.URL},
		Models: []*ModelReport{},
	}
}

func scenarioInfo(s *Scenario) ScenarioInfo {
	return ScenarioInfo{Name: s.Name, Source: s.Source, StateLabel: s.StateLabel, StateTokens: s.StateTokens(), InputTokens: s.InputTokens(),
		Questions: s.Questions, Options: s.Options, Records: len(s.Records), Types: s.Types}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// ReadReport decodes a report.json, refusing unknown schema versions.
func ReadReport(data []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: report: %w", err)
	}
	if r.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("bench: report schema_version %d, this clef reads %d", r.SchemaVersion, SchemaVersion)
	}
	return &r, nil
}

// WriteBenchfmt writes one Go benchmark line per measured decision, in the
// format benchstat reads:
//
//	BenchmarkDecide/model=q4_k_m/scenario=s256-q8-o4-8  1  123456789 ns/op  2087 tok/s
func (r *Report) WriteBenchfmt(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "goos: %s\ngoarch: %s\npkg: github.com/clefrt/clef/bench\n", r.Host.GOOS, r.Host.GOARCH)
	procs := max(r.Host.CPUs, 1)
	for _, m := range r.Models {
		for _, s := range m.Scenarios {
			for _, l := range s.LatenciesMS {
				tps := 0.0
				if l > 0 {
					tps = float64(s.InputTokens) / (l / 1e3)
				}
				fmt.Fprintf(&b, "BenchmarkDecide/model=%s/scenario=%s-%d\t1\t%.0f ns/op\t%.1f tok/s\n", benchName(m.Name), benchName(s.Scenario), procs, l*1e6, tps)
			}
		}
	}
	if r.Kernels != nil {
		for _, k := range r.Kernels.Results {
			fmt.Fprintf(&b, "BenchmarkKernel/backend=%s/%s-%d\t%d\t%.0f ns/op\t%.3f GB/s\t%.3f GFLOP/s\n",
				k.Backend, benchName(k.Name), procs, k.Iterations, k.Seconds/float64(max(k.Iterations, 1))*1e9, k.BytesPerSecond/1e9, k.FLOPsPerSecond/1e9)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// benchName makes a name safe inside a benchmark name (no spaces).
func benchName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' {
			return '_'
		}
		return r
	}, s)
}

// Output file names in --out DIR.
const (
	ReportJSON     = "report.json"
	ReportMarkdown = "report.md"
	BenchTxt       = "bench.txt"
	LatencySVG     = "latency.svg"
	AgreementSVG   = "agreement.svg"
)

// WriteDir writes report.json, report.md, bench.txt and the plots into dir
// (created if needed). It returns the paths written.
func (r *Report) WriteDir(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var written []string
	write := func(name string, f func(io.Writer) error) error {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		written = append(written, p)
		return nil
	}
	files := []struct {
		name string
		f    func(io.Writer) error
	}{
		{ReportJSON, r.WriteJSON},
		{ReportMarkdown, r.WriteMarkdown},
		{BenchTxt, r.WriteBenchfmt},
	}
	if len(r.Models) > 0 {
		files = append(files, struct {
			name string
			f    func(io.Writer) error
		}{LatencySVG, r.WriteLatencySVG}, struct {
			name string
			f    func(io.Writer) error
		}{AgreementSVG, r.WriteAgreementSVG})
	}
	for _, f := range files {
		if err := write(f.name, f.f); err != nil {
			return written, err
		}
	}
	return written, nil
}
