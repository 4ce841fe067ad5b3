package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/server"
)

// serveFlags are clef serve's flags.
type serveFlags struct {
	model            string
	addr             string
	token            string
	idleUnload       time.Duration
	prefixCacheBytes string
	queue            int
	maxBatch         int
	maxBodyBytes     string
	requestTimeout   time.Duration
	shutdownTimeout  time.Duration
	logBodies        bool
	logFormat        string
	verbose          bool
	backend          string
	threads          int
	maxLength        int
	name             string
	allowHosts       []string
	corsOrigins      []string
	strict           bool
	bodyBudget       string
	ffmpeg           string
}

func init() {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the decision daemon (SystemOne and Workers AI over HTTP)",
		Long: `Run the local decision daemon. It loads the model once, warms it up, and serves:

  POST /v1/systemone                                   SystemOne request and response
  POST /ai/run/@cf/cloudflare/clef-omni                Workers AI body in the {result, success, errors, messages} envelope
  POST /client/v4/accounts/{account}/ai/run/@cf/cloudflare/clef-omni
  GET  /v1/models, /health, /metrics (Prometheus), /v1/ps (clef ps)

so an existing SystemOne or Workers AI client works by changing its base URL.
It listens on loopback only unless --addr says otherwise; a non-loopback
address without --token draws a warning. Web pages cannot use it: only Host
values naming the daemon are served (--allow-host for more), requests from
another origin are refused (--cors-origin to allow one), decision routes
take Content-Type: application/json (or none, from non-browser clients),
and bodies are bounded (--max-body-bytes each, --body-budget-bytes in all).
Logs carry request ids and timings,
never state contents unless --log-bodies. SIGINT/SIGTERM answer queued
requests 503 at once, let the decision in flight finish for up to
--shutdown-timeout, then cancel it (503 too) and exit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "model: a Clef-Omni release directory or a GGUF file from clef quantize (default $CLEF_MODEL, else the embedded synthetic tiny model)")
	fl.StringVar(&f.addr, "addr", server.DefaultAddr, "listen address (host:port); loopback unless you say otherwise")
	fl.StringVar(&f.token, "token", "", "bearer token every route but /health requires (default $CLEF_TOKEN)")
	fl.DurationVar(&f.idleUnload, "idle-unload", 0, "unload the model after this long without requests and reload on demand (0: never)")
	fl.StringVar(&f.prefixCacheBytes, "prefix-cache-bytes", "2GiB", "bound of the prefix key/value cache (bytes, or with KiB/MiB/GiB); 0 disables it")
	fl.IntVar(&f.queue, "queue", server.DefaultQueueSize, "decisions that may wait; past it requests get 429 with Retry-After")
	fl.IntVar(&f.maxBatch, "max-batch", server.DefaultMaxBatch, "decisions run back to back per scheduler turn")
	fl.StringVar(&f.maxBodyBytes, "max-body-bytes", "64MiB", "largest request body (413 past it)")
	fl.DurationVar(&f.requestTimeout, "request-timeout", server.DefaultRequestTimeout, "deadline of one decision, queueing included (504 past it)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 0, "how long shutdown lets the decision in flight run before cancelling it and answering 503 (0: as long as --request-timeout)")
	fl.BoolVar(&f.logBodies, "log-bodies", false, "log request bodies (they hold state contents)")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "also log /health, /metrics and /v1/ps requests")
	fl.StringVar(&f.backend, "backend", "", "compute backend (cpu, metal); default: the best available")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fl.IntVar(&f.maxLength, "max-length", engine.DefaultMaxLength, "token budget of a record; only the state is truncated to fit")
	fl.StringVar(&f.name, "name", server.DefaultModelName, "served model name (GET /v1/models)")
	fl.StringArrayVar(&f.allowHosts, "allow-host", nil, "also serve this Host (name or name:port; repeatable); loopback names and addresses and the --addr host are always served, any other Host gets 421 (DNS rebinding)")
	fl.StringArrayVar(&f.corsOrigins, "cors-origin", nil, "web origin (scheme://host[:port]) allowed to call the daemon from a browser, with CORS headers (repeatable); none by default")
	fl.BoolVar(&f.strict, "strict", false, "apply the hosted Workers AI checks and body-size rule (524,288 bytes) on /v1/systemone too")
	fl.StringVar(&f.bodyBudget, "body-budget-bytes", "256MiB", "bytes of all request bodies held at once (at least --max-body-bytes); past it requests wait briefly, then get 503 with Retry-After")
	fl.StringVar(&f.ffmpeg, "ffmpeg", "", ffmpegHelp+" (422 saying what to install)")
	rootCmd.AddCommand(cmd)
}

func runServe(cmd *cobra.Command, f *serveFlags) error {
	errOut := cmd.ErrOrStderr()
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	var h slog.Handler
	switch f.logFormat {
	case "text":
		h = slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(errOut, &slog.HandlerOptions{Level: level})
	default:
		return &exitError{2, fmt.Errorf("--log-format must be text or json, got %q", f.logFormat)}
	}
	log := slog.New(h)
	cacheBytes, err := parseBytes(f.prefixCacheBytes)
	if err != nil {
		return &exitError{2, fmt.Errorf("--prefix-cache-bytes: %w", err)}
	}
	bodyBytes, err := parseBytes(f.maxBodyBytes)
	if err != nil || bodyBytes <= 0 {
		return &exitError{2, fmt.Errorf("--max-body-bytes: must be a positive size, got %q", f.maxBodyBytes)}
	}
	budgetBytes, err := parseBytes(f.bodyBudget)
	if err != nil || budgetBytes <= 0 {
		return &exitError{2, fmt.Errorf("--body-budget-bytes: must be a positive size, got %q", f.bodyBudget)}
	}
	budgetBytes = max(budgetBytes, bodyBytes)
	if f.idleUnload < 0 || f.shutdownTimeout < 0 || f.requestTimeout <= 0 || f.queue <= 0 || f.maxBatch <= 0 {
		return &exitError{2, errors.New("--idle-unload and --shutdown-timeout must be ≥ 0; --request-timeout, --queue and --max-batch must be positive")}
	}
	token := f.token
	if token == "" {
		token = os.Getenv("CLEF_TOKEN")
	}
	if w := exposureWarning(f.addr, token); w != "" {
		log.Warn(w)
	}

	path, synthetic, cleanup, err := resolveModel(f.model)
	if err != nil {
		return err
	}
	defer cleanup()
	if synthetic {
		log.Warn(tinymodel.Warning)
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		Addr:             ln.Addr().String(),
		Token:            token,
		ModelName:        f.name,
		ModelPath:        path,
		Load:             server.EngineLoader(path, engine.Options{Backend: f.backend, Threads: f.threads, MaxLength: f.maxLength, Strict: f.strict, FFmpeg: f.ffmpeg}),
		IdleUnload:       f.idleUnload,
		QueueSize:        f.queue,
		MaxBatch:         f.maxBatch,
		MaxBodyBytes:     bodyBytes,
		RequestTimeout:   f.requestTimeout,
		PrefixCacheBytes: cacheBytes,
		LogBodies:        f.logBodies,
		Logger:           log,
		Version:          version,
		AllowHosts:       append(addrName(f.addr), f.allowHosts...),
		CORSOrigins:      f.corsOrigins,
		Strict:           f.strict,
		BodyBudgetBytes:  budgetBytes,
	})
	if err != nil {
		ln.Close()
		return &exitError{2, err}
	}
	logVideo(log, f.ffmpeg)
	log.Info("clef serve listening", "addr", "http://"+ln.Addr().String(), "model", path, "idle_unload", f.idleUnload,
		"prefix_cache_bytes", cacheBytes, "queue", f.queue, "auth", token != "")
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	select {
	case err := <-serveErr:
		return err
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case <-srv.ShutdownRequested():
		log.Info("shutting down", "reason", "requested over HTTP")
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout(f))
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// logVideo says at start whether videos can be decoded: the ffmpeg found,
// or why there is none (videos are then refused with a 422 saying what to
// install; everything else is served).
func logVideo(log *slog.Logger, ffmpeg string) {
	t, err := video.Find(ffmpeg)
	if err != nil {
		log.Warn("videos will be refused (422) until ffmpeg is found: "+err.Error(), "ffmpeg", ffmpeg)
		return
	}
	log.Info("videos are decoded with ffmpeg", "ffmpeg", t.FFmpeg, "ffprobe", t.FFprobe)
}

// shutdownTimeout is how long shutdown lets the decision in flight run:
// --shutdown-timeout, by default the request timeout (a decision admitted
// before the shutdown may use all of it).
func shutdownTimeout(f *serveFlags) time.Duration {
	if f.shutdownTimeout > 0 {
		return f.shutdownTimeout
	}
	return f.requestTimeout
}

// exposureWarning is the warning for an address beyond loopback served
// without a token, "" otherwise.
func exposureWarning(addr, token string) string {
	if loopbackAddr(addr) || token != "" {
		return ""
	}
	return "listening beyond loopback without --token: anyone who can reach " + addr + " can use the model; set --token"
}

// addrName is the host of --addr when it is a name (the listener knows
// only its address), to be served as a Host.
func addrName(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return nil
	}
	return []string{host}
}

// loopbackAddr reports whether addr (host:port) listens on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseBytes reads a size: a byte count, or a number with a unit
// (KB, MB, GB decimal; KiB, MiB, GiB binary).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	return int64(n * float64(mult)), nil
}
