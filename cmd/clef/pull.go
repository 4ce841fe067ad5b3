package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/hub"
	"github.com/clefrt/clef/quant"
)

func init() {
	var f pullFlags
	names := make([]string, len(convert.FileTypes))
	for i, t := range convert.FileTypes {
		names[i] = t.Name
	}
	cmd := &cobra.Command{
		Use:   "pull ORG/NAME [--revision R] [--include GLOB]... [--quantize TYPE]",
		Short: "Download a model from the Hugging Face Hub into the shared cache",
		Long: `pull downloads a model repository (Cloudflare/clef-omni,
mlx-community/clef-omni-4bit, or any repository of the same layout) into
the Hugging Face cache that huggingface_hub, transformers and mlx use:
$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub. Files
already there (from clef or Python tools) are reused; interrupted
transfers resume. Only the files the runtime needs are fetched: weights,
configuration, tokenizer; shards holding only the speech-output weights
(talker, code2wav) are skipped unless --all-files.

With --quantize TYPE the bf16 release is converted shard by shard as the
shards arrive, each shard deleted once converted, into
$HF_HOME/clef/quantized/ORG--NAME/COMMIT/TYPE.gguf (+ TYPE.head.gguf).

Then: clef decide --model ORG/NAME (or ORG/NAME:TYPE for a quantized one).

Environment: HF_TOKEN (or the token file of huggingface-cli login) for
gated models, HF_ENDPOINT for a mirror, HF_HUB_OFFLINE=1 for no network.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPull(cmd, &f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.revision, "revision", hub.DefaultRevision, "branch, tag or commit")
	fl.StringArrayVar(&f.include, "include", nil, "fetch only files matching GLOB (repeatable; replaces the runtime's file list)")
	fl.BoolVar(&f.allFiles, "all-files", false, "fetch every file of the repository, the speech-output shards included")
	fl.StringVar(&f.quantize, "quantize", "", "convert while downloading, to: "+strings.Join(names, ", "))
	fl.StringVar(&f.towers, "towers", "keep", "with --quantize: audio/vision towers kept, or q8_0")
	fl.IntVar(&f.jobs, "jobs", 4, "parallel transfers")
	fl.IntVar(&f.threads, "threads", 0, "with --quantize: quantization threads (0: all cores)")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress output")
	rootCmd.AddCommand(cmd)
}

type pullFlags struct {
	revision, quantize, towers string
	include                    []string
	allFiles, quiet            bool
	jobs, threads              int
}

func runPull(cmd *cobra.Command, f *pullFlags, arg string) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	ref, err := hub.ParseRef(arg)
	if err != nil || ref.Quant != "" {
		return &exitError{2, fmt.Errorf("pull: want ORG/NAME (a Hub model id), got %q", arg)}
	}
	if ref.Revision != hub.DefaultRevision && cmd.Flags().Changed("revision") && ref.Revision != f.revision {
		return &exitError{2, fmt.Errorf("pull: revision given twice (%s and --revision %s)", ref.Revision, f.revision)}
	}
	if cmd.Flags().Changed("revision") {
		ref.Revision = f.revision
	}
	if f.jobs < 1 || f.jobs > 64 {
		return &exitError{2, fmt.Errorf("pull: --jobs must be 1 to 64, got %d", f.jobs)}
	}
	for _, g := range f.include {
		if _, err := path.Match(g, ""); err != nil {
			return &exitError{2, fmt.Errorf("pull: --include %q: %v", g, err)}
		}
	}
	cache, err := hub.DefaultCache()
	if err != nil {
		return err
	}
	client, err := hub.NewClient()
	if err != nil {
		return &exitError{2, err}
	}
	var notes sync.Mutex
	prog := newPullProgress(errOut, isTerminal(errOut), f.quiet)
	client.Notef = func(format string, a ...any) {
		notes.Lock()
		defer notes.Unlock()
		prog.note(fmt.Sprintf(format, a...))
	}
	opts := hub.PullOptions{Revision: ref.Revision, Include: f.include, AllFiles: f.allFiles, Jobs: f.jobs, Progress: prog}
	var sink *quantSink
	if f.quantize != "" {
		ft, err := convert.ParseFileType(f.quantize)
		if err != nil {
			return &exitError{2, fmt.Errorf("pull: --quantize: %w", err)}
		}
		sink = &quantSink{ctx: cmd.Context(), client: client, cache: cache, repo: ref.Repo, ft: ft, threads: f.threads}
		switch f.towers {
		case "", "keep":
		case "q8_0":
			sink.towers = quant.Q8_0
		default:
			return &exitError{2, fmt.Errorf("pull: --towers must be keep or q8_0, got %q", f.towers)}
		}
		if !f.quiet {
			sink.progress = errOut
		}
		opts.Sink = sink
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if sink != nil {
		sink.ctx = ctx
	}
	res, err := client.Pull(ctx, cache, ref.Repo, opts)
	prog.finish()
	if err != nil {
		if sink != nil {
			sink.abort()
		}
		return err
	}
	name := ref.Repo
	if res.Revision != hub.DefaultRevision {
		name += "@" + res.Revision
	}
	if res.Offline {
		fmt.Fprintf(out, "%s: offline (HF_HUB_OFFLINE); commit %s is already in the cache: %s\n", name, res.Commit, res.Snapshot)
		return nil
	}
	var total int64
	for _, fl := range res.Files {
		total += fl.Size
	}
	fmt.Fprintf(out, "%s: commit %s, %d files, %s (%s transferred, %d already cached)\n", name, res.Commit, len(res.Files), humanBytes(total), humanBytes(res.Transferred), res.Reused)
	if len(res.Speech) > 0 {
		var n int64
		var names []string
		for _, s := range res.Speech {
			n += s.Size
			names = append(names, s.Name)
		}
		fmt.Fprintf(out, "skipped %d shard(s) holding only the speech-output weights (talker, code2wav; not used by clef), %s: %s; --all-files fetches them\n", len(res.Speech), humanBytes(n), strings.Join(names, ", "))
	}
	if res.Excluded > 0 {
		fmt.Fprintf(out, "left out %d file(s) the runtime does not need (code, docs); --all-files fetches them\n", res.Excluded)
	}
	use := ref.Repo
	if sink != nil {
		r := sink.result
		fmt.Fprintf(out, "%s: %d tensors, %s\n%s: %d tensors, %s\n", r.Backbone, r.BackboneTensors, humanBytes(r.BackboneBytes), r.Companion, r.CompanionTensors, humanBytes(r.CompanionBytes))
		use += ":" + sink.ft.Name
	} else {
		fmt.Fprintf(out, "in %s\n", res.Snapshot)
	}
	if res.Revision != hub.DefaultRevision {
		use = ref.Repo + "@" + res.Revision + strings.TrimPrefix(use, ref.Repo)
	}
	fmt.Fprintf(out, "use it: clef decide --model %s\n", use)
	return nil
}

// quantSink converts the shards of a pull as they arrive (--quantize).
type quantSink struct {
	ctx      context.Context
	client   *hub.Client
	cache    *hub.Cache
	repo     string
	ft       convert.FileType
	towers   quant.Type
	threads  int
	progress io.Writer
	stream   *convert.Stream
	result   *convert.Result // set by Finish
	out      string
}

// Space estimates the output: the shards' bytes scaled by the type's bits
// per weight against bf16's 16 (towers and head, kept, are a small part).
func (q *quantSink) Space(shards []hub.File) (int64, string) {
	var n int64
	for _, s := range shards {
		n += s.Size
	}
	bits := map[string]float64{"bf16": 16, "q8_0": 8.5, "q6_k": 6.6, "q5_k_m": 5.7, "q4_k_m": 4.9, "q3_k_m": 3.9, "q2_k": 3.4}[q.ft.Name]
	if bits == 0 {
		bits = 16
	}
	return int64(float64(n) * bits / 16), q.cache.QuantDir
}

// Begin reads every shard's safetensors header with Range requests and
// lays the output files out.
func (q *quantSink) Begin(snapshot string, shards []hub.File) error {
	commit := filepath.Base(snapshot)
	dir := q.cache.QuantizedDir(q.repo, commit)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	headers := map[string][]byte{}
	for _, s := range shards {
		if s.Size < 8 {
			return fmt.Errorf("%s: %d bytes is not a safetensors file", s.Name, s.Size)
		}
		pre, err := q.client.ReadRange(q.ctx, q.repo, commit, s, 0, 8)
		if err != nil {
			return err
		}
		n, err := convert.SafetensorsHeaderSize(pre)
		if err != nil || 8+n > s.Size {
			return fmt.Errorf("%s: not a safetensors file (%v)", s.Name, err)
		}
		if headers[s.Name], err = q.client.ReadRange(q.ctx, q.repo, commit, s, 8, n); err != nil {
			return err
		}
	}
	q.out = filepath.Join(dir, q.ft.Name+".gguf")
	var err error
	q.stream, err = convert.NewStream(snapshot, headers, convert.Options{Type: q.ft, Out: q.out, Threads: q.threads, Name: path.Base(q.repo), TowerType: q.towers, Progress: q.progress})
	return err
}

// Shard converts one shard.
func (q *quantSink) Shard(f hub.File, p string) error { return q.stream.Add(f.Name, p) }

// Finish completes the GGUF pair (before hub.Pull writes the ref).
func (q *quantSink) Finish(snapshot string) error {
	if q.stream == nil {
		return fmt.Errorf("pull: nothing was converted")
	}
	var err error
	q.result, err = q.stream.Finish(snapshot)
	return err
}

func (q *quantSink) abort() {
	if q.stream != nil {
		q.stream.Abort()
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// pullProgress draws one line "  42% 1.20 GB / 2.85 GB  35.1 MB/s  ETA 47s
// (3/12 files)" redrawn in place on a terminal, and plain lines (one per
// file) otherwise.
type pullProgress struct {
	w           io.Writer
	tty, quiet  bool
	mu          sync.Mutex
	total, got  int64
	files, done int
	began, last time.Time
	drawn       bool
}

func newPullProgress(w io.Writer, tty, quiet bool) *pullProgress {
	return &pullProgress{w: w, tty: tty, quiet: quiet, began: time.Now()}
}

func (p *pullProgress) Plan(files []hub.File, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files, p.total = len(files), bytes
	if !p.quiet && !p.tty && len(files) > 0 {
		fmt.Fprintf(p.w, "fetching %d file(s), %s\n", len(files), humanBytes(bytes))
	}
}

func (p *pullProgress) Add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got += n
	if p.tty && time.Since(p.last) > 100*time.Millisecond {
		p.draw()
	}
}

func (p *pullProgress) Done(f hub.File, reused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if p.quiet {
		return
	}
	if p.tty {
		p.draw()
		return
	}
	how := "fetched"
	if reused {
		how = "cached"
	}
	fmt.Fprintf(p.w, "%s %s (%s) [%d/%d]\n", how, f.Name, humanBytes(f.Size), p.done, p.files)
}

func (p *pullProgress) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet {
		return
	}
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, "clef: note:", s)
	if p.tty {
		p.draw()
	}
}

func (p *pullProgress) draw() {
	if p.quiet {
		return
	}
	p.last = time.Now()
	el := time.Since(p.began).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.got) / el
	}
	eta := "?"
	if rate > 0 && p.total >= p.got {
		eta = time.Duration(float64(p.total-p.got) / rate * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(p.got) / float64(p.total)
	}
	fmt.Fprintf(p.w, "\r\033[K%5.1f%% %s / %s  %s/s  ETA %s  (%d/%d files)", pct, humanBytes(p.got), humanBytes(p.total), humanBytes(int64(rate)), eta, p.done, p.files)
	p.drawn = true
}

func (p *pullProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn && !p.quiet {
		p.draw()
		fmt.Fprintln(p.w)
	}
}
