package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/quant"
)

// ModelSpec names one model file of a run.
type ModelSpec struct {
	Name string // how reports call it; "" derives it from the file (its quantization)
	Path string // release or MLX directory, or GGUF from clef quantize
}

// ParseModels parses --models: comma-separated PATH or NAME=PATH.
func ParseModels(list string) []ModelSpec {
	var out []ModelSpec
	for _, f := range splitList(list) {
		if name, path, ok := strings.Cut(f, "="); ok && name != "" && !strings.ContainsAny(name, `/\`) {
			out = append(out, ModelSpec{Name: name, Path: path})
			continue
		}
		out = append(out, ModelSpec{Path: f})
	}
	return out
}

// Config is one benchmark run.
type Config struct {
	// Models run in process, one after another, on the same records.
	Models []ModelSpec
	// URL, when set, sends the records to a daemon instead (Models is then
	// only used for its name); Token is its bearer token.
	URL, Token string
	// Warmup runs of every record before the measured Reps runs.
	Warmup, Reps int
	// Engine options of the in-process runs (MaxLength also sizes "64k").
	Engine engine.Options
	// Reference names the model the others are compared with; "" picks the
	// highest-precision one.
	Reference string
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// Build makes the scenarios once the tokenizer is known.
type BuildFunc func(tok record.Tokenizer) ([]*Scenario, []Skipped, error)

// Run measures every model on the scenarios build returns (built with the
// first model's tokenizer, or tok when given: the HTTP runner has no model
// of its own) and compares the models with the reference.
func Run(ctx context.Context, cfg Config, tok record.Tokenizer, build BuildFunc) (*Report, error) {
	if cfg.Reps <= 0 {
		return nil, fmt.Errorf("bench: --reps must be at least 1, got %d", cfg.Reps)
	}
	if cfg.Warmup < 0 {
		return nil, fmt.Errorf("bench: --warmup must not be negative, got %d", cfg.Warmup)
	}
	if cfg.Engine.MaxLength <= 0 {
		cfg.Engine.MaxLength = engine.DefaultMaxLength
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", a...)
		}
	}
	rep := newReport(cfg)
	var scenarios []*Scenario
	buildOnce := func(t record.Tokenizer) error {
		if scenarios != nil {
			return nil
		}
		s, skipped, err := build(t)
		if err != nil {
			return err
		}
		if len(s) == 0 {
			return fmt.Errorf("bench: no scenario fits (every one was skipped)")
		}
		SortScenarios(s)
		scenarios = s
		rep.Skipped = skipped
		for _, sk := range skipped {
			logf("skipped %s: %s", sk.Name, sk.Reason)
		}
		for _, sc := range s {
			rep.Scenarios = append(rep.Scenarios, scenarioInfo(sc))
		}
		return nil
	}
	if tok != nil {
		if err := buildOnce(tok); err != nil {
			return nil, err
		}
	}

	// probs[model][scenario][record] from the first measured run.
	var probs [][][][][]float64
	if cfg.URL != "" {
		name := "daemon"
		if len(cfg.Models) == 1 && cfg.Models[0].Name != "" {
			name = cfg.Models[0].Name
		}
		mr := &ModelReport{Name: name, Path: cfg.URL, Quant: "unknown", Backend: "http"}
		h, err := NewHTTP(cfg.URL, cfg.Token)
		if err != nil {
			return nil, err
		}
		if scenarios == nil {
			return nil, fmt.Errorf("bench: the HTTP runner needs a tokenizer to build its records")
		}
		logf("model %s (%s)", name, cfg.URL)
		p, err := measure(ctx, cfg, h, mr, scenarios, false, logf)
		if err != nil {
			return nil, err
		}
		rep.Models = append(rep.Models, mr)
		probs = append(probs, p)
	} else {
		if len(cfg.Models) == 0 {
			return nil, fmt.Errorf("bench: no model to run")
		}
		names := map[string]bool{}
		for i, ms := range cfg.Models {
			mr := &ModelReport{Path: ms.Path, Quant: QuantName(ms.Path), FileBytes: ModelBytes(ms.Path)}
			mr.Name = ms.Name
			if mr.Name == "" {
				mr.Name = mr.Quant
				if mr.Name == "unknown" || names[mr.Name] {
					mr.Name = fmt.Sprintf("%s#%d", filepath.Base(ms.Path), i+1)
				}
			}
			if names[mr.Name] {
				return nil, fmt.Errorf("bench: two models are named %q: name them with NAME=PATH", mr.Name)
			}
			names[mr.Name] = true
			logf("model %s (%s)", mr.Name, ms.Path)
			runtime.GC()
			ResetPeakRSS()
			t := time.Now()
			e, err := engine.Open(ms.Path, cfg.Engine)
			if err != nil {
				return nil, fmt.Errorf("bench: model %s: %w", mr.Name, err)
			}
			mr.LoadSeconds = time.Since(t).Seconds()
			mr.PeakRSSBytes = PeakRSS()
			mr.Backend = e.Backend()
			if err := buildOnce(e.Tokenizer()); err != nil {
				e.Close()
				return nil, err
			}
			p, err := measure(ctx, cfg, &InProcess{E: e, MaxLength: cfg.Engine.MaxLength}, mr, scenarios, true, logf)
			e.Close()
			if err != nil {
				return nil, fmt.Errorf("bench: model %s: %w", mr.Name, err)
			}
			rep.Models = append(rep.Models, mr)
			probs = append(probs, p)
		}
	}
	if err := compare(rep, scenarios, probs, cfg.Reference); err != nil {
		return nil, err
	}
	return rep, nil
}

// measure runs every scenario on one runner and fills mr.
func measure(ctx context.Context, cfg Config, r Runner, mr *ModelReport, scenarios []*Scenario, inProcess bool, logf func(string, ...any)) ([][][][]float64, error) {
	out := make([][][][]float64, len(scenarios))
	for si, sc := range scenarios {
		out[si] = make([][][]float64, len(sc.Records))
		for w := 0; w < cfg.Warmup; w++ {
			for _, rec := range sc.Records {
				if _, err := r.Decide(ctx, rec); err != nil {
					return nil, fmt.Errorf("%s (warm-up): %w", rec.ID, err)
				}
			}
		}
		runtime.GC()
		ResetPeakRSS()
		var lat []time.Duration
		var st Stages
		tokens := 0
		for rep := 0; rep < cfg.Reps; rep++ {
			for ri, rec := range sc.Records {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				res, err := r.Decide(ctx, rec)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", rec.ID, err)
				}
				if res.InputTokens != rec.InputTokens {
					return nil, fmt.Errorf("%s: the model read %d tokens, the record was built with %d: the tokenizers differ", rec.ID, res.InputTokens, rec.InputTokens)
				}
				if len(res.Probs) != len(rec.QuestionTypes) {
					return nil, fmt.Errorf("%s: %d answers for %d questions", rec.ID, len(res.Probs), len(rec.QuestionTypes))
				}
				if rep == 0 {
					out[si][ri] = res.Probs
				}
				lat = append(lat, res.Latency)
				st.Tokenize += res.Stages.Tokenize
				st.Encode += res.Stages.Encode
				st.Decode += res.Stages.Decode
				st.Processor += res.Stages.Processor
				st.Thinker += res.Stages.Thinker
				st.Towers += res.Stages.Towers
				st.Head += res.Stages.Head
				tokens += rec.InputTokens
			}
		}
		n := time.Duration(len(lat))
		sr := &ScenarioResult{Scenario: sc.Name, InputTokens: sc.InputTokens(), StateTokens: sc.StateTokens(), Runs: len(lat),
			Latency: percentiles(lat), LatenciesMS: durationsMS(lat)}
		var total time.Duration
		for _, l := range lat {
			total += l
		}
		if total > 0 {
			sr.TokensPerSecond = float64(tokens) / total.Seconds()
		}
		if inProcess {
			sr.Stages = &StagesMS{Tokenize: ms(st.Tokenize / n), Encode: ms(st.Encode / n), Decode: ms(st.Decode / n), Processor: ms(st.Processor / n),
				Thinker: ms(st.Thinker / n), Towers: ms(st.Towers / n), Head: ms(st.Head / n)}
			if st.Thinker > 0 {
				sr.PrefillTokensPerSecond = float64(tokens) / st.Thinker.Seconds()
			}
			sr.PeakRSSBytes = PeakRSS()
			mr.PeakRSSBytes = max(mr.PeakRSSBytes, sr.PeakRSSBytes)
		}
		mr.Scenarios = append(mr.Scenarios, sr)
		logf("  %-22s %6d tokens  p50 %9.1f ms  p95 %9.1f ms  %8.0f tok/s", sc.Name, sr.InputTokens, sr.Latency.P50, sr.Latency.P95, sr.TokensPerSecond)
	}
	return out, nil
}

// compare picks the reference model and fills every other model's
// agreement with it, per scenario and over all scenarios.
func compare(rep *Report, scenarios []*Scenario, probs [][][][][]float64, want string) error {
	if len(rep.Models) == 0 {
		return nil
	}
	ref := -1
	if want != "" {
		for i, m := range rep.Models {
			if m.Name == want {
				ref = i
			}
		}
		if ref < 0 {
			return fmt.Errorf("bench: --reference %q is none of the models run", want)
		}
	} else {
		best := math.MinInt
		for i, m := range rep.Models {
			if r := PrecisionRank(m.Quant); r > best {
				best, ref = r, i
			}
		}
	}
	rep.Reference = rep.Models[ref].Name
	rep.Models[ref].Reference = true
	for mi, m := range rep.Models {
		if mi == ref {
			continue
		}
		var all AgreementSet
		for si, sc := range scenarios {
			var set AgreementSet
			for ri, rec := range sc.Records {
				a, b := probs[ref][si][ri], probs[mi][si][ri]
				for qi, typ := range rec.QuestionTypes {
					if !set.Add(typ, a[qi], b[qi]) {
						return fmt.Errorf("bench: %s, %s question %d: %d options against %d for %s", m.Name, rec.ID, qi+1, len(b[qi]), len(a[qi]), rep.Reference)
					}
				}
			}
			m.Scenarios[si].Agreement = set.Result()
			all.Merge(&set)
		}
		m.Agreement = all.Result()
	}
	return nil
}

// percentiles returns the latency summary in milliseconds. A percentile is
// the nearest-rank value: the smallest latency with at least p% of the runs
// at or below it.
func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) float64 {
		k := int(math.Ceil(p/100*float64(len(s)))) - 1
		return ms(s[max(k, 0)])
	}
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Percentiles{P50: rank(50), P95: rank(95), P99: rank(99), Mean: ms(sum / time.Duration(len(s))), Min: ms(s[0]), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return math.Round(d.Seconds()*1e6) / 1e3 }

func durationsMS(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = ms(v)
	}
	return out
}

// Quantization names, most precise first, with their rank.
var precision = []struct {
	name string
	rank int
}{
	{"f32", 100}, {"bf16", 90}, {"f16", 90}, {"q8_0", 80}, {"mlx-8bit", 78}, {"q6_k", 70},
	{"q5_k_m", 60}, {"q4_k_m", 50}, {"mlx-4bit", 48}, {"q3_k_m", 40}, {"q2_k", 30},
}

// PrecisionRank orders quantizations: higher is more precise; unknown
// names rank lowest.
func PrecisionRank(quant string) int {
	for _, p := range precision {
		if p.name == quant {
			return p.rank
		}
	}
	return 0
}

// QuantName says which quantization a model path holds: a known name in
// the file name (q4_k_m, bf16, ...), else for a model directory the storage
// type of its decoder's weights (MLX bits, or the float type); "unknown"
// otherwise.
func QuantName(path string) string {
	base := strings.ToLower(filepath.Base(strings.TrimRight(path, `/\`)))
	names := make([]string, len(precision))
	for i, p := range precision {
		names[i] = p.name
	}
	// Longest first, so q4_k_m wins over q4_k and mlx-8bit over 8bit.
	sort.SliceStable(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		if strings.Contains(base, n) || strings.Contains(base, strings.ReplaceAll(n, "_", "-")) {
			return n
		}
	}
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return "unknown"
	}
	r, err := release.Open(path)
	if err != nil {
		return "unknown"
	}
	defer r.Close()
	// The attention projections are stored at the model's precision (a
	// quantized checkpoint may keep norms, the router or the lm_head wider).
	rows := release.DecoderTensors(r.Config.Thinker.Text)
	i := slices.IndexFunc(rows, func(t release.Tensor) bool { return t.Role == release.RoleAttnQ })
	if i < 0 {
		return "unknown"
	}
	w, _, err := release.Lookup(r.Weights, rows[i])
	if err != nil {
		return "unknown"
	}
	switch w.Type {
	case quant.MLXAffine4:
		return "mlx-4bit"
	case quant.MLXAffine8:
		return "mlx-8bit"
	case quant.BF16:
		return "bf16"
	case quant.F16:
		return "f16"
	case quant.F32:
		return "f32"
	}
	return "unknown"
}

// ModelBytes is the size of a model on disk: a GGUF and its FILE.head.gguf
// companion, or a directory's weight files (.safetensors, .gguf).
func ModelBytes(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if !st.IsDir() {
		n := st.Size()
		if c, err := os.Stat(release.CompanionPath(path)); err == nil && strings.HasSuffix(path, release.GGUFExt) && !strings.HasSuffix(path, release.CompanionExt) {
			n += c.Size()
		}
		return n
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") || strings.HasSuffix(e.Name(), release.GGUFExt) {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
	}
	return n
}
