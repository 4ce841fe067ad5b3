// Package server is the clef daemon: a net/http server that speaks the
// SystemOne protocol (POST /v1/systemone) and Cloudflare's Workers AI REST
// protocol for @cf/cloudflare/clef-omni (POST /ai/run/@cf/cloudflare/clef-omni
// and /client/v4/accounts/{account}/ai/run/@cf/cloudflare/clef-omni, in the
// {result, success, errors, messages} envelope), so that existing clients
// work by changing their base URL.
//
// One model load is shared by every request. Requests are parsed and
// validated concurrently on their own goroutines; decisions go through a
// bounded queue drained by one worker, which runs the requests that arrived
// together back to back without re-entering the scheduler (a full queue is a
// 429 with Retry-After). Each request's deadline and its client's
// cancellation reach the engine through its context. The model is loaded at
// start, warmed up with one decision before /health turns 200, unloaded after
// an idle timeout and reloaded on demand. Shutdown finishes in-flight work.
//
// The server never fetches a URL: media come as data URLs or base64 only.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/server/status"
)

// Defaults of Config.
const (
	DefaultAddr           = "127.0.0.1:8089"
	DefaultModelName      = "clef-omni"
	DefaultQueueSize      = 64
	DefaultMaxBatch       = 16
	DefaultMaxBodyBytes   = 64 << 20
	DefaultRequestTimeout = 2 * time.Minute
	// DefaultPrefixCacheBytes fits a 36 GB Mac next to a 4-bit model
	// (~20 GB of weights, ~1 GB of activations at 64K tokens): 2 GiB holds
	// the prefix key/values of about 10K tokens of state at float16.
	DefaultPrefixCacheBytes = 2 << 30
	// MaxQueueSize bounds Config.QueueSize (the queue is allocated up front).
	MaxQueueSize = 1 << 16
)

// Decision is one answered request.
type Decision struct {
	// Body is the SystemOne response JSON, as the reference writes it.
	Body []byte
	// InputTokens is the response's usage.input_tokens.
	InputTokens int
	// Stages are the engine's per-stage timings, for the log.
	Stages []Stage
	// CachedTokens counts the input tokens served from the prefix cache.
	CachedTokens int
}

// Stage is one timed step of a decision.
type Stage struct {
	Name string
	Dur  time.Duration
}

// Model is a loaded model as the server uses it.
type Model interface {
	// Decide answers one request that passed validation. Refusals of the
	// request are *api.Error; ctx carries the deadline and client cancel.
	Decide(ctx context.Context, req *api.Request) (*Decision, error)
	// Close releases the model.
	Close() error
}

// BatchModel is implemented by models that answer several requests faster
// together (records packed into one forward) than one by one. The worker
// hands it the requests that arrived together; answers and errors come
// back in request order, one of the two per request.
type BatchModel interface {
	Model
	DecideBatch(ctxs []context.Context, reqs []*api.Request) ([]*Decision, []error)
}

// Resident is implemented by models that know how many bytes they hold.
type Resident interface{ ResidentBytes() int64 }

// Prefixes is the server's prefix cache of the engine's prefixes.
type Prefixes = PrefixCache[*engine.Prefix]

// Loader loads the model. The prefix cache is the server's: a model that can
// reuse prefix key/values stores them there.
type Loader func(ctx context.Context, cache *Prefixes) (Model, error)

// Config configures a Server.
type Config struct {
	// Addr is where Serve listens (default DefaultAddr, loopback).
	Addr string
	// Token, when set, is the bearer token every route but /health requires.
	Token string
	// ModelName is the served model's name (GET /v1/models; default clef-omni).
	ModelName string
	// ModelPath is shown by clef ps.
	ModelPath string
	// Load loads the model; required.
	Load Loader
	// IdleUnload, when positive, unloads the model after that long without
	// requests; the next request reloads it.
	IdleUnload time.Duration
	// QueueSize bounds the decisions waiting for the worker.
	QueueSize int
	// MaxBatch bounds the decisions the worker runs back to back per turn.
	MaxBatch int
	// MaxBodyBytes bounds a request body (413 past it).
	MaxBodyBytes int64
	// RequestTimeout is each decision's deadline (504 past it).
	RequestTimeout time.Duration
	// PrefixCacheBytes bounds the prefix key/value cache; 0 disables it.
	PrefixCacheBytes int64
	// WarmUp is the body of the decision run after each load, before the
	// model counts as ready; nil uses a small built-in request.
	WarmUp []byte
	// LogBodies logs request bodies (state contents); off by default.
	LogBodies bool
	// Logger receives the request log (default: slog.Default()).
	Logger *slog.Logger
	// Version is reported by clef ps.
	Version string
}

// Server is the daemon. Create it with New, start it with Start, serve with
// Serve or Handler, stop it with Shutdown.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	cache   *Prefixes
	mux     *http.ServeMux
	started time.Time

	queueMu sync.RWMutex
	queue   chan *job
	closed  bool
	depth   atomic.Int64

	mu         sync.Mutex
	state      string
	loadErr    error
	failedAt   time.Time
	loadRetry  time.Duration // a failed load is retried by the first request after this long
	model      Model
	everReady  bool
	loadedAt   time.Time
	loadDur    time.Duration
	loads      int
	lastUsed   time.Time
	requests   atomic.Int64
	errorsN    atomic.Int64
	inflight   atomic.Int64
	workerDone chan struct{}
	startOnce  sync.Once

	shutdownOnce sync.Once
	shutdownReq  chan struct{}
	httpSrv      *http.Server
}

// New checks cfg, fills in defaults and returns a server that is not yet
// loading anything.
func New(cfg Config) (*Server, error) {
	if cfg.Load == nil {
		return nil, errors.New("server: no model loader")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.ModelName == "" {
		cfg.ModelName = DefaultModelName
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.QueueSize > MaxQueueSize {
		return nil, fmt.Errorf("server: queue size %d is past the limit of %d", cfg.QueueSize, MaxQueueSize)
	}
	if cfg.PrefixCacheBytes < 0 {
		return nil, fmt.Errorf("server: prefix cache bytes must not be negative, got %d", cfg.PrefixCacheBytes)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WarmUp == nil {
		cfg.WarmUp = []byte(warmUpBody)
	}
	s := &Server{
		cfg:         cfg,
		log:         cfg.Logger,
		metrics:     newMetrics(),
		cache:       NewPrefixCache[*engine.Prefix](cfg.PrefixCacheBytes),
		started:     time.Now(),
		queue:       make(chan *job, cfg.QueueSize),
		state:       status.StateStarting,
		loadRetry:   30 * time.Second,
		workerDone:  make(chan struct{}),
		shutdownReq: make(chan struct{}),
	}
	s.routes()
	return s, nil
}

// warmUpBody is the decision run after each load.
const warmUpBody = `{"model":"clef-omni","state":"warm-up","questions":{"ready":{"type":"noul","instructions":"Is the model ready?"}}}`

// Start begins loading the model and starts the worker. It returns at once;
// /health turns 200 when the model is loaded and warmed up.
func (s *Server) Start() {
	s.startOnce.Do(func() { go s.worker() })
}

// Handler returns the daemon's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// PrefixCache returns the server's prefix cache.
func (s *Server) PrefixCache() *Prefixes { return s.cache }

// Serve starts the server (if not started) and serves HTTP on ln until
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.Start()
	s.mu.Lock()
	s.httpSrv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       5 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv := s.httpSrv
	s.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ShutdownRequested is closed when a client asked for shutdown (POST /v1/shutdown).
func (s *Server) ShutdownRequested() <-chan struct{} { return s.shutdownReq }

// Shutdown stops accepting requests, lets in-flight and queued decisions
// finish (until ctx ends), then unloads the model.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.state = status.StateStopping
	srv := s.httpSrv
	s.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx) // waits for handlers, which wait for their decisions
	}
	s.queueMu.Lock()
	if !s.closed {
		s.closed = true
		close(s.queue)
	}
	s.queueMu.Unlock()
	s.Start() // a never-started worker still has to close the model
	select {
	case <-s.workerDone:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

// job is one decision waiting for the worker.
type job struct {
	ctx  context.Context
	req  *api.Request
	enq  time.Time
	done chan jobResult // buffered: the worker never blocks on it
}

type jobResult struct {
	dec  *Decision
	err  error
	wait time.Duration // time in the queue
	run  time.Duration // time in Decide
}

var (
	errQueueFull = errors.New("queue full")
	errClosing   = errors.New("server is shutting down")
)

// enqueue hands j to the worker without blocking.
func (s *Server) enqueue(j *job) error {
	s.queueMu.RLock()
	defer s.queueMu.RUnlock()
	if s.closed {
		return errClosing
	}
	s.depth.Add(1) // before the send: the worker may take it at once
	select {
	case s.queue <- j:
		return nil
	default:
		s.depth.Add(-1)
		return errQueueFull
	}
}

// worker owns the model: it loads it, drains the queue in batches and
// unloads it when idle. It is the only goroutine that calls Decide, so one
// forward runs at a time and the requests that arrived together run back
// to back.
func (s *Server) worker() {
	defer close(s.workerDone)
	s.ensureLoaded()
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if s.cfg.IdleUnload > 0 {
		idleTimer = time.NewTimer(s.cfg.IdleUnload)
		idle = idleTimer.C
	}
	for {
		select {
		case j, ok := <-s.queue:
			if !ok {
				s.unload("shutdown")
				return
			}
			batch := []*job{j}
		drain:
			for len(batch) < s.cfg.MaxBatch {
				select {
				case j, ok := <-s.queue:
					if !ok {
						break drain
					}
					batch = append(batch, j)
				default:
					break drain
				}
			}
			s.depth.Add(-int64(len(batch)))
			s.runBatch(batch)
			if idleTimer != nil {
				idleTimer.Reset(s.cfg.IdleUnload)
			}
		case <-idle:
			s.mu.Lock()
			quiet := time.Since(s.lastUsed) >= s.cfg.IdleUnload && s.model != nil
			s.mu.Unlock()
			if quiet && len(s.queue) == 0 {
				s.unload("idle")
			}
			idleTimer.Reset(s.cfg.IdleUnload)
		}
	}
}

// runBatch runs the batch's decisions back to back.
func (s *Server) runBatch(batch []*job) {
	s.metrics.batch(len(batch))
	if err := s.ensureLoaded(); err != nil {
		for _, j := range batch {
			j.done <- jobResult{err: err, wait: time.Since(j.enq)}
		}
		return
	}
	s.mu.Lock()
	m := s.model
	s.mu.Unlock()
	live := batch[:0:0]
	for _, j := range batch {
		wait := time.Since(j.enq)
		s.metrics.waited(wait)
		if err := j.ctx.Err(); err != nil { // gave up while queued
			j.done <- jobResult{err: err, wait: wait}
			continue
		}
		live = append(live, j)
	}
	if bm, ok := m.(BatchModel); ok && len(live) > 1 {
		s.decideBatch(bm, live)
	} else {
		for _, j := range live {
			t := time.Now()
			dec, err := s.decide(j.ctx, m, j.req)
			j.done <- jobResult{dec: dec, err: err, wait: t.Sub(j.enq), run: time.Since(t)}
		}
	}
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// decideBatch hands the live jobs to a model that answers them together.
func (s *Server) decideBatch(bm BatchModel, jobs []*job) {
	ctxs := make([]context.Context, len(jobs))
	reqs := make([]*api.Request, len(jobs))
	for i, j := range jobs {
		ctxs[i], reqs[i] = j.ctx, j.req
	}
	t := time.Now()
	decs, errs := func() (decs []*Decision, errs []error) {
		defer func() {
			if p := recover(); p != nil {
				s.metrics.panicked()
				decs, errs = nil, nil
				for range jobs {
					errs = append(errs, &panicError{value: p})
				}
			}
		}()
		return bm.DecideBatch(ctxs, reqs)
	}()
	run := time.Since(t)
	for i, j := range jobs {
		res := jobResult{wait: t.Sub(j.enq), run: run}
		switch {
		case i < len(errs) && errs[i] != nil:
			res.err = errs[i]
		case i < len(decs) && decs[i] != nil:
			res.dec = decs[i]
		default:
			res.err = fmt.Errorf("batch model returned no answer for request %d of %d", i, len(jobs))
		}
		j.done <- res
	}
}

// decide calls the model, turning a panic into an error so that one bad
// request cannot take the daemon down.
func (s *Server) decide(ctx context.Context, m Model, req *api.Request) (dec *Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panicked()
			err = &panicError{value: p}
		}
	}()
	return m.Decide(ctx, req)
}

type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// errNotReady is the 503 of a model that cannot serve.
type errNotReady struct{ reason string }

func (e *errNotReady) Error() string { return e.reason }

// ensureLoaded loads and warms up the model when it is not loaded. Only
// the worker calls it.
func (s *Server) ensureLoaded() error {
	s.mu.Lock()
	if s.model != nil {
		s.mu.Unlock()
		return nil
	}
	if s.state == status.StateFailed && time.Since(s.failedAt) < s.loadRetry {
		err := s.loadErr
		s.mu.Unlock()
		return &errNotReady{"model failed to load: " + err.Error()}
	}
	if s.state != status.StateStopping {
		s.state = status.StateLoading
	}
	s.mu.Unlock()

	t := time.Now()
	s.log.Info("loading model", "model", s.cfg.ModelName, "path", s.cfg.ModelPath)
	m, err := s.load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.state, s.loadErr, s.failedAt = status.StateFailed, err, time.Now()
		s.log.Error("model load failed", "err", err)
		return &errNotReady{"model failed to load: " + err.Error()}
	}
	s.model, s.loadedAt, s.loadDur, s.lastUsed, s.loadErr = m, time.Now(), time.Since(t), time.Now(), nil
	s.loads++
	s.everReady = true
	if s.state != status.StateStopping {
		s.state = status.StateReady
	}
	s.metrics.loaded()
	s.log.Info("model ready", "model", s.cfg.ModelName, "load_ms", s.loadDur.Milliseconds())
	return nil
}

// load runs the loader and the warm-up decision, recovering panics.
func (s *Server) load() (m Model, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panicked()
			err = &panicError{value: p}
			if m != nil {
				m.Close()
				m = nil
			}
		}
	}()
	m, err = s.cfg.Load(context.Background(), s.cache)
	if err != nil {
		return nil, err
	}
	req, err := api.ParseRequest(s.cfg.WarmUp)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		_, err = m.Decide(ctx, req)
		cancel()
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("warm-up decision: %w", err)
	}
	return m, nil
}

// unload closes the model and drops its cached prefixes.
func (s *Server) unload(why string) {
	s.mu.Lock()
	m := s.model
	s.model = nil
	if s.state != status.StateStopping && s.state != status.StateFailed {
		s.state = status.StateUnloaded
	}
	s.mu.Unlock()
	if m == nil {
		return
	}
	s.cache.Clear()
	if err := m.Close(); err != nil {
		s.log.Warn("closing model", "err", err)
	}
	if why == "idle" {
		s.metrics.unloaded()
	}
	s.log.Info("model unloaded", "why", why)
}

// admit tells whether decisions are accepted now: not before the first
// load finished, not after a failed load, not while shutting down.
func (s *Server) admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == status.StateStopping:
		return &errNotReady{"server is shutting down"}
	case s.state == status.StateFailed && time.Since(s.failedAt) < s.loadRetry:
		return &errNotReady{"model failed to load: " + s.loadErr.Error() + " (retried by a request after " + s.loadRetry.String() + ")"}
	case s.state == status.StateFailed:
		return nil // let a request retry the load
	case !s.everReady:
		return &errNotReady{"model is loading"}
	}
	return nil
}

// residentBytes is the model's memory, or the process's when the model
// does not say.
func (s *Server) residentBytes() int64 {
	s.mu.Lock()
	m := s.model
	s.mu.Unlock()
	if r, ok := m.(Resident); ok {
		return r.ResidentBytes()
	}
	if m == nil {
		return 0
	}
	return processRSS()
}

// PS describes the daemon for clef ps and the menu bar.
func (s *Server) PS() status.PS {
	s.mu.Lock()
	st := status.Model{
		Name:     s.cfg.ModelName,
		Path:     s.cfg.ModelPath,
		State:    s.state,
		Loads:    s.loads,
		Requests: s.requests.Load(),
		Errors:   s.errorsN.Load(),
		InFlight: s.inflight.Load(),
	}
	if s.loadErr != nil {
		st.Error = s.loadErr.Error()
	}
	if s.model != nil {
		at := s.loadedAt
		st.LoadedAt = &at
		st.LoadSeconds = s.loadDur.Seconds()
	}
	if !s.lastUsed.IsZero() {
		st.IdleS = time.Since(s.lastUsed).Seconds()
	}
	s.mu.Unlock()
	st.ResidentBytes = s.residentBytes()
	q := s.metrics.quantiles(0.5, 0.99)
	st.P50MS, st.P99MS = q[0], q[1]
	ps := status.PS{
		Daemon: status.Daemon{PID: os.Getpid(), Version: s.cfg.Version, Addr: s.cfg.Addr,
			StartedAt: s.started, UptimeS: time.Since(s.started).Seconds()},
		Models: []status.Model{st},
		Queue:  status.Queue{Depth: int(s.depth.Load()), Capacity: s.cfg.QueueSize, MaxBatch: s.cfg.MaxBatch},
	}
	if s.cache.Enabled() {
		c := s.cache.Status()
		ps.PrefixCache = &c
	}
	return ps
}
