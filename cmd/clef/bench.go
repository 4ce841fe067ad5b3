package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/bench"
	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/quant"
)

// benchFlags are clef bench's flags.
type benchFlags struct {
	models, url, token, tokenizer string
	states, questions, options    string
	records                       int
	seed                          uint64
	scenarios, media              string
	reps, warmup                  int
	out                           string
	backend                       string
	threads, maxLength            int
	reference                     string
	quants, work                  string
	synthetic                     string
	layers                        int
	kernels                       bool
	kernelTime                    time.Duration
	ffmpeg                        string
}

func init() {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure per-schema latency across quantizations, their agreement, and the kernels' roofline",
		Long: `bench runs deterministic synthetic records (grouped by state length, number
of questions and options; each record's token count is fixed before running)
and/or your own requests (--scenarios FILE.jsonl) on one or more models, in
process or against a daemon (--url), with warm-up and repetitions. It reports
per model and scenario p50/p95/p99 latency, tokens/s, time per stage, load
time and peak RSS, and each model's agreement with the most precise one
(top-1 agreement, mean total variation, max |dp|, mean KL, per question type).

--out DIR writes report.json (fields documented in bench/README.md),
report.md, latency.svg, agreement.svg and bench.txt (benchstat lines).

Without --models the embedded tiny model runs. --quants q8_0,q4_k_m first
quantizes the first model with clef quantize into --work DIR and runs the
results too. --synthetic-real-shape DIR writes (once) a 4-layer model with
the real layer shapes into DIR and benchmarks it and its --quants variants.

States: 256, 1k (1024), 4k, 16k tokens, or 64k (fills --max-length).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.models, "models", "", "comma-separated models (PATH or NAME=PATH): release/MLX directories or GGUFs from clef quantize (default: the embedded tiny model)")
	fl.StringVar(&f.url, "url", "", "benchmark a running daemon at this base URL instead (POST /v1/systemone)")
	fl.StringVar(&f.token, "token", "", "bearer token for --url")
	fl.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer.json (or a release directory) that builds the records for --url (default: the first --models directory, else the embedded tiny model's)")
	fl.StringVar(&f.states, "states", "256", "state lengths in tokens: 256,1k,4k,16k,64k")
	fl.StringVar(&f.questions, "questions", "1,8", "questions per record: 1,8,64")
	fl.StringVar(&f.options, "options", "4", "options per choice question (2..255; scores get min(n,10) levels, nouls 2)")
	fl.IntVar(&f.records, "records", 1, "different records per scenario")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic records")
	fl.StringVar(&f.media, "media", "", "media scenarios to run too (alone unless grid flags are also given): image (a 1280x800 JPEG), audio (a 30 s WAV), image+audio, audio300 (300 s), video (10 s of 640x360 H.264 made with ffmpeg), video+audio (with an AAC soundtrack, heard)")
	fl.StringVar(&f.ffmpeg, "ffmpeg", "", ffmpegHelp+"; the video scenarios are skipped without one")
	fl.StringVar(&f.scenarios, "scenarios", "", "JSONL of SystemOne requests to run too (alone unless grid flags are also given)")
	fl.IntVar(&f.reps, "reps", 3, "measured runs of every record")
	fl.IntVar(&f.warmup, "warmup", 1, "warm-up runs of every record")
	fl.StringVar(&f.out, "out", "", "write report.json, report.md, plots and bench.txt into DIR")
	fl.StringVar(&f.backend, "backend", "", "compute backend (cpu, metal); default: the best available")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fl.IntVar(&f.maxLength, "max-length", engine.DefaultMaxLength, "token budget of a record (64k states fill it)")
	fl.StringVar(&f.reference, "reference", "", "model name the others are compared with (default: the most precise)")
	fl.StringVar(&f.quants, "quants", "", "also quantize the first model to these types ("+strings.Join(fileTypeNames(), ",")+") and run them")
	fl.StringVar(&f.work, "work", "", "directory for --quants outputs (default: a temporary one; kept when given, and reused)")
	fl.StringVar(&f.synthetic, "synthetic-real-shape", "", "write a real-shape synthetic model into DIR (an existing one is reused as is) and benchmark it")
	fl.IntVar(&f.layers, "layers", 4, "layers of the --synthetic-real-shape model")
	fl.BoolVar(&f.kernels, "kernels", false, "also run the kernel microbenchmarks (see clef bench kernels)")
	fl.DurationVar(&f.kernelTime, "kernel-time", 200*time.Millisecond, "minimum time per kernel measurement")
	cmd.AddCommand(benchSynthCmd(), benchKernelsCmd(), benchRenderCmd())
	rootCmd.AddCommand(cmd)
}

func fileTypeNames() []string {
	names := make([]string, len(convert.FileTypes))
	for i, t := range convert.FileTypes {
		names[i] = t.Name
	}
	return names
}

func runBench(cmd *cobra.Command, f *benchFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	usage := func(err error) error { return &exitError{2, err} }

	states, err := bench.ParseStates(f.states)
	if err != nil {
		return usage(err)
	}
	qs, err := bench.ParseInts("questions", f.questions, 1, bench.MaxQuestions)
	if err != nil {
		return usage(err)
	}
	opts, err := bench.ParseInts("options", f.options, bench.MinOptions, bench.MaxOptions)
	if err != nil {
		return usage(err)
	}
	if f.records < 1 || f.records > 1000 {
		return usage(fmt.Errorf("--records must be 1..1000, got %d", f.records))
	}
	if f.maxLength <= 0 {
		return usage(fmt.Errorf("--max-length must be positive, got %d", f.maxLength))
	}
	if f.reps < 1 || f.warmup < 0 {
		return usage(fmt.Errorf("--reps must be at least 1 and --warmup at least 0 (got %d, %d)", f.reps, f.warmup))
	}
	if f.url != "" && (f.quants != "" || f.synthetic != "") {
		return usage(fmt.Errorf("--url benchmarks a running daemon: --quants and --synthetic-real-shape do not apply"))
	}
	kinds, err := bench.ParseMedia(f.media)
	if err != nil {
		return usage(err)
	}
	grid := (f.scenarios == "" && f.media == "") || cmd.Flags().Changed("states") || cmd.Flags().Changed("questions") || cmd.Flags().Changed("options")
	if onlyVideo(kinds) && !grid && f.scenarios == "" {
		// Nothing else to run: a missing ffmpeg skips them, not fails.
		if _, err := video.Find(f.ffmpeg); err != nil {
			for _, k := range kinds {
				fmt.Fprintf(errOut, "skipped media-%s: the video scenarios need ffmpeg: %v\n", k.Name, err)
			}
			return nil
		}
	}

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	models := bench.ParseModels(f.models)
	for i := range models {
		p, err := modelPath(models[i].Path)
		if err != nil {
			return usage(err)
		}
		models[i].Path = p
	}
	if f.synthetic != "" {
		if len(models) > 0 {
			return usage(fmt.Errorf("--synthetic-real-shape and --models do not go together"))
		}
		if err := ensureSynthetic(f.synthetic, f.layers, errOut); err != nil {
			return err
		}
		models = []bench.ModelSpec{{Name: "bf16", Path: f.synthetic}}
		if f.work == "" {
			f.work = f.synthetic
		}
	}
	if len(models) == 0 && f.url == "" {
		dir, cleanup, err := tinymodel.WriteDir()
		if err != nil {
			return err
		}
		cleanups = append(cleanups, cleanup)
		models = []bench.ModelSpec{{Name: "tiny", Path: dir}}
		fmt.Fprintln(errOut, "clef: note:", tinymodel.Warning)
	}
	if f.quants != "" {
		work := f.work
		if work == "" {
			dir, err := os.MkdirTemp("", "clef-bench-")
			if err != nil {
				return err
			}
			cleanups = append(cleanups, func() { os.RemoveAll(dir) })
			work = dir
		}
		more, err := quantizeModels(models[0], f.quants, work, f.threads, errOut)
		if err != nil {
			return err
		}
		models = append(models, more...)
	}

	var tok record.Tokenizer
	if f.url != "" {
		t, err := benchTokenizer(f.tokenizer, models)
		if err != nil {
			return err
		}
		tok = t
	}
	// The video records are counted with the first model's processor
	// settings, as its engine reads them.
	var proc *release.Processor
	if len(models) > 0 {
		if cfg, err := release.ReadConfig(models[0].Path); err == nil {
			proc = cfg.Processor
		}
	}
	build := func(tok record.Tokenizer) ([]*bench.Scenario, []bench.Skipped, error) {
		var all []*bench.Scenario
		var skipped []bench.Skipped
		if grid {
			s, sk, err := bench.Build(tok, bench.Grid{States: states, Questions: qs, Options: opts, Records: f.records, Seed: f.seed}, f.maxLength)
			if err != nil {
				return nil, nil, err
			}
			all, skipped = s, sk
		}
		if len(kinds) > 0 {
			s, sk, err := bench.BuildMedia(tok, kinds, bench.MediaOptions{MaxLength: f.maxLength, Seed: f.seed, FFmpeg: f.ffmpeg, Processor: proc})
			if err != nil {
				return nil, nil, err
			}
			all, skipped = append(all, s...), append(skipped, sk...)
		}
		if f.scenarios != "" {
			fh, err := os.Open(f.scenarios)
			if err != nil {
				return nil, nil, err
			}
			defer fh.Close()
			s, err := bench.LoadJSONL(fh, tok, f.maxLength)
			if err != nil {
				return nil, nil, err
			}
			all = append(all, s...)
		}
		return all, skipped, nil
	}
	cfg := bench.Config{Models: models, URL: f.url, Token: f.token, Warmup: f.warmup, Reps: f.reps,
		Engine:    engine.Options{Backend: f.backend, Threads: f.threads, MaxLength: f.maxLength, FFmpeg: f.ffmpeg},
		Reference: f.reference, Log: errOut}
	rep, err := bench.Run(ctx, cfg, tok, build)
	if err != nil {
		return err
	}
	if f.kernels {
		k, err := bench.RunKernels(ctx, bench.KernelOptions{MinTime: f.kernelTime, Threads: f.threads, Log: errOut})
		if err != nil {
			return err
		}
		rep.Kernels = k
	}
	return writeBenchOutput(out, rep, f.out)
}

// onlyVideo reports whether kinds are all video scenarios (and not none).
func onlyVideo(kinds []bench.MediaKind) bool {
	for _, k := range kinds {
		if k.Videos == 0 {
			return false
		}
	}
	return len(kinds) > 0
}

// writeBenchOutput writes the report into dir, or report.md to out.
func writeBenchOutput(out io.Writer, rep *bench.Report, dir string) error {
	if dir == "" {
		return rep.WriteMarkdown(out)
	}
	paths, err := rep.WriteDir(dir)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintln(out, "wrote", p)
	}
	return nil
}

// benchTokenizer loads the tokenizer that builds the records sent to a
// daemon.
func benchTokenizer(path string, models []bench.ModelSpec) (*tokenizer.Tokenizer, error) {
	if path == "" && len(models) > 0 {
		if st, err := os.Stat(models[0].Path); err == nil && st.IsDir() {
			path = models[0].Path
		}
	}
	if path == "" {
		dir, cleanup, err := tinymodel.WriteDir()
		if err != nil {
			return nil, err
		}
		defer cleanup()
		path = dir
	}
	t, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --tokenizer: %w", err)
	}
	return t, nil
}

// quantizeModels writes src quantized to each type of list into work
// (reusing files already there) and returns them as models.
func quantizeModels(src bench.ModelSpec, list, work string, threads int, log io.Writer) ([]bench.ModelSpec, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	var out []bench.ModelSpec
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		ft, err := convert.ParseFileType(name)
		if err != nil {
			return nil, &exitError{2, fmt.Errorf("--quants: %w", err)}
		}
		path := filepath.Join(work, "model-"+ft.Name+".gguf")
		if _, err := os.Stat(path); err != nil {
			fmt.Fprintf(log, "quantizing %s to %s\n", src.Path, path)
			start := time.Now()
			if _, err := convert.Quantize(src.Path, convert.Options{Type: ft, Out: path, Threads: threads}); err != nil {
				return nil, fmt.Errorf("bench: quantize %s: %w", ft.Name, err)
			}
			fmt.Fprintf(log, "  done in %.1f s\n", time.Since(start).Seconds())
		}
		out = append(out, bench.ModelSpec{Name: ft.Name, Path: path})
	}
	return out, nil
}

// ensureSynthetic writes the real-shape synthetic model into dir unless it
// is already there.
func ensureSynthetic(dir string, layers int, log io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return nil
	}
	c := bench.RealShape(layers)
	fmt.Fprintf(log, "writing a %d-layer real-shape synthetic model (%.2f GB) into %s\n", layers, float64(c.SynthBytes())/1e9, dir)
	return bench.WriteSynthetic(dir, c, log)
}

// benchSynthCmd is clef bench synth.
func benchSynthCmd() *cobra.Command {
	var out, quants, tok string
	var layers, threads int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "synth --out DIR [--layers 4] [--quants q8_0,q4_k_m]",
		Short: "Write a seeded synthetic model with the real Qwen3-Omni layer shapes (and its quantized variants)",
		Long: `synth writes a release directory with random bf16 weights in the real
thinker shapes (hidden 2048, 32/4 heads x 128, 128 experts top-8, expert FFN
768, vocabulary 151936), --layers layers, and a ~120M-parameter joint head:
about 1.5 GB per layer plus 1.7 GB. Its answers mean nothing; it exists to
measure speed and quantization agreement. --quants writes model-TYPE.gguf
files next to it with clef quantize.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return &exitError{2, fmt.Errorf("synth: --out is required")}
			}
			if layers < 1 || layers > 48 {
				return &exitError{2, fmt.Errorf("synth: --layers must be 1..48, got %d", layers)}
			}
			c := bench.RealShape(layers)
			c.Seed, c.Tokenizer = seed, tok
			log := cmd.ErrOrStderr()
			fmt.Fprintf(log, "writing %.2f GB into %s\n", float64(c.SynthBytes())/1e9, out)
			if err := bench.WriteSynthetic(out, c, log); err != nil {
				return err
			}
			if quants != "" {
				if _, err := quantizeModels(bench.ModelSpec{Path: out}, quants, out, threads, log); err != nil {
					return err
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "directory to write")
	fl.IntVar(&layers, "layers", 4, "decoder layers")
	fl.StringVar(&quants, "quants", "", "also write these quantizations ("+strings.Join(fileTypeNames(), ",")+")")
	fl.StringVar(&tok, "tokenizer", "", "tokenizer.json to ship (default: the embedded tiny model's)")
	fl.Uint64Var(&seed, "seed", 1, "weight seed")
	fl.IntVar(&threads, "threads", 0, "quantization threads (0: all cores)")
	return cmd
}

// benchKernelsCmd is clef bench kernels.
func benchKernelsCmd() *cobra.Command {
	var out, types, estimate string
	var threads int
	var minTime time.Duration
	check := true
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "Kernel microbenchmarks against the machine's roofline",
		Long: `kernels measures the CPU's copy bandwidth and FMA rate once, then each
quantized GEMM kernel (one thread) and each backend's MatMul and Attention
(all threads), and prints achieved GB/s and GFLOP/s with their ratio to the
peaks. A Metal backend is compared with its chip's numbers from the
M-series table instead. Before timing, every backend runs the backend
conformance suite (--check=false skips it): a backend that fails it is not
measured.

--estimate CHIP measures nothing: it prints, for the chip (m1-max ...
m5-max, any key of the chip table, or all for the M1-M5 Max), each
kernel's and the whole prefill's bytes, FLOPs and estimated time at 1k,
14k and 64k tokens of the Qwen3-Omni thinker at 4-bit, per kernel set
(current, shader, tensor) with the efficiencies it assumes, next to the
MLX port's published figures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if estimate != "" {
				cs, err := bench.EstimateChips(estimate)
				if err != nil {
					return &exitError{2, fmt.Errorf("kernels: --estimate: %w", err)}
				}
				return bench.WriteEstimate(cmd.OutOrStdout(), cs, bench.Sets)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			o := bench.KernelOptions{MinTime: minTime, Threads: threads, Log: cmd.ErrOrStderr()}
			for _, name := range strings.Split(types, ",") {
				if name = strings.TrimSpace(name); name == "" {
					continue
				}
				t, err := quant.ParseType(name)
				if err != nil {
					return &exitError{2, fmt.Errorf("kernels: --types: %w", err)}
				}
				o.Types = append(o.Types, t)
			}
			if check {
				for _, name := range backend.Names() {
					b, err := backend.Open(name, backend.Options{Threads: threads})
					if err != nil {
						continue // RunKernels says why
					}
					failed := conformance.Report(cmd.ErrOrStderr(), b)
					b.Close()
					if failed > 0 {
						return &exitError{1, fmt.Errorf("kernels: backend %s fails %d conformance cases", name, failed)}
					}
				}
			}
			k, err := bench.RunKernels(ctx, o)
			if err != nil {
				return err
			}
			rep := &bench.Report{SchemaVersion: bench.SchemaVersion, Tool: "clef bench kernels", Created: time.Now().UTC().Format(time.RFC3339), Kernels: k}
			return writeBenchOutput(cmd.OutOrStdout(), rep, out)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&out, "out", "", "write report.json, report.md and bench.txt into DIR")
	fl.StringVar(&types, "types", "", "GEMM weight types (default: f32,bf16,q8_0,q6_K,q5_K,q4_K,q3_K,q2_K)")
	fl.IntVar(&threads, "threads", 0, "threads of the backend ops (0: all cores)")
	fl.DurationVar(&minTime, "min-time", 200*time.Millisecond, "minimum time per measurement")
	fl.BoolVar(&check, "check", true, "run the backend conformance suite on every backend before timing it")
	fl.StringVar(&estimate, "estimate", "", "print the estimated prefill time on CHIP (m1-max..m5-max, or all) instead of measuring")
	return cmd
}

// benchRenderCmd is clef bench render: report.md, plots and bench.txt again
// from a report.json.
func benchRenderCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "render REPORT.json --out DIR",
		Short: "Write report.md, the plots and bench.txt again from a report.json",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return &exitError{2, fmt.Errorf("render: --out is required")}
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			rep, err := bench.ReadReport(data)
			if err != nil {
				return err
			}
			return writeBenchOutput(cmd.OutOrStdout(), rep, out)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write")
	return cmd
}
