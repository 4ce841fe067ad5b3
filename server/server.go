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
// cancellation reach the engine through its context, which stops within a
// chunk of work (see engine.Engine.Decide); a model that can prepare
// requests (Preparer) has them validated and tokenized on their own
// goroutines, and refused at once (413) when its measured speed says they
// cannot finish before the deadline. The model is loaded at start, warmed
// up with one decision before /health turns 200, unloaded after an idle
// timeout and reloaded on demand. Shutdown answers queued requests 503 at
// once, lets the decision in flight finish until its context ends, then
// cancels it and answers it 503 too.
//
// The server never fetches a URL: media come as data URLs or base64 only.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
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

// Preparer is implemented by models that can do a request's host-side work
// (validation, tokenization, record encoding: seconds for a state of tens
// of megabytes; media decoding: seconds for a video) before it is queued,
// on the request's own goroutine, and bound its compute time from their own
// measured speed. The worker then runs only the compute (DecidePrepared).
type Preparer interface {
	Model
	// Prepare readies req; its errors are refusals of the request, as
	// Decide's are. ctx is the request's: when it ends, work that can stop
	// (the video decoders) stops.
	Prepare(ctx context.Context, req *api.Request) (Prepared, error)
	// DecidePrepared answers a request Prepare readied (on this model or
	// an earlier load of it).
	DecidePrepared(ctx context.Context, p Prepared) (*Decision, error)
}

// Prepared is a request a Preparer readied.
type Prepared interface {
	// Tokens is the record's length.
	Tokens() int
	// Estimate bounds the decision's compute time from below (see
	// engine.Engine.Estimate), with the measurement it rests on in words;
	// ok is false when the model cannot tell.
	Estimate() (d time.Duration, basis string, ok bool)
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
	// AllowHosts are Host values served besides loopback names and
	// addresses and the listen address (name or name:port; --allow-host).
	AllowHosts []string
	// CORSOrigins are the web origins (scheme://host[:port]) that get CORS
	// headers and preflight answers (--cors-origin); none by default.
	CORSOrigins []string
	// Strict applies the hosted Workers AI checks and body-size rule on
	// /v1/systemone too (--strict).
	Strict bool
	// BodyBudgetBytes bounds the bytes of all request bodies held at once
	// (default DefaultBodyBudgetBytes, at least MaxBodyBytes); past it a
	// request waits briefly, then gets 503 with Retry-After.
	BodyBudgetBytes int64
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

	// stopCtx ends (cause errStopping) when Shutdown gives up waiting:
	// every job's context derives from it (jobContext). stopping is set
	// when Shutdown starts: jobs not yet running are answered 503.
	stopCtx  context.Context
	stopNow  context.CancelCauseFunc
	stopping atomic.Bool
	// prepLarge admits one preparation of a large state at a time.
	prepLarge chan struct{}
	// busy is the decision the worker runs now (nil when idle), for /health.
	busy atomic.Pointer[busyWork]
	// stuckAfter is how long the worker may run work nobody waits for
	// before /health reports it (defaultStuckAfter; tests shorten it).
	stuckAfter time.Duration

	edge *edge // Host, Origin, content-type and body checks (guard.go)
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
	if cfg.BodyBudgetBytes == 0 {
		cfg.BodyBudgetBytes = max(DefaultBodyBudgetBytes, cfg.MaxBodyBytes)
	}
	if cfg.BodyBudgetBytes < cfg.MaxBodyBytes {
		return nil, fmt.Errorf("server: body budget of %d bytes is smaller than the largest body (%d bytes)", cfg.BodyBudgetBytes, cfg.MaxBodyBytes)
	}
	edge, err := newEdge(cfg)
	if err != nil {
		return nil, err
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
		stuckAfter:  defaultStuckAfter,
		prepLarge:   make(chan struct{}, 1),
		workerDone:  make(chan struct{}),
		shutdownReq: make(chan struct{}),
		edge:        edge,
	}
	s.stopCtx, s.stopNow = context.WithCancelCause(context.Background())
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

// shutdownGrace bounds how long Shutdown waits, once its context is done,
// for the cancelled decision to stop and for handlers to write their answers.
const shutdownGrace = 5 * time.Second

// errStopping answers the decisions that shutdown does not run: those
// queued (at once) and the one in flight when Shutdown's context ends.
var errStopping = &errNotReady{"server is shutting down"}

// Shutdown stops accepting requests and answers the queued ones 503 with
// Retry-After at once; the decision in flight may finish until ctx ends,
// when it is cancelled and answered 503 too. Then it unloads the model and
// waits (at most shutdownGrace past ctx) for the handlers to write their
// answers. It returns nil once every admitted request was answered, and an
// error only when the worker did not stop (a model that ignores its
// context) or the HTTP server failed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.state = status.StateStopping
	srv := s.httpSrv
	s.mu.Unlock()
	s.stopping.Store(true)
	s.Start() // a never-started worker still has to close the model
	s.closeQueue()
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	httpDone := make(chan error, 1)
	if srv != nil {
		go func() { httpDone <- srv.Shutdown(httpCtx) }() // stops accepting; waits for the handlers
	} else {
		httpDone <- nil
	}
	select {
	case <-s.workerDone:
	case <-ctx.Done():
		if b := s.busy.Load(); b != nil {
			s.log.Warn("shutdown timeout: cancelling the decision in flight", "id", b.id, "running_ms", ms(time.Since(b.start)))
		}
		s.stopNow(errStopping)
		select {
		case <-s.workerDone:
		case <-time.After(shutdownGrace):
			if srv != nil {
				srv.Close()
			}
			return fmt.Errorf("server: the worker did not stop within %v of cancelling its decision", shutdownGrace)
		}
	}
	// Every admitted decision has its answer; let the handlers write it.
	select {
	case err := <-httpDone:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-httpDone:
		return err
	case <-time.After(shutdownGrace):
	}
	stopHTTP() // what is left is reading a body: no request to answer yet
	srv.Close()
	<-httpDone
	return nil
}

// closeQueue refuses further jobs and answers the queued ones 503.
func (s *Server) closeQueue() {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for drained := false; !drained; {
		select {
		case j := <-s.queue:
			s.depth.Add(-1)
			j.done <- jobResult{err: errStopping, wait: time.Since(j.enq)}
		default:
			drained = true
		}
	}
	close(s.queue)
}

// jobContext is a decision's context: parent (the client's) with the
// request deadline, cancelled with cause errStopping when shutdown gives up
// waiting for it.
func (s *Server) jobContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancelTimeout := context.WithTimeout(parent, s.cfg.RequestTimeout)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.stopCtx, func() { cancel(errStopping) })
	return ctx, func() {
		stop()
		cancel(nil)
		cancelTimeout()
	}
}

// jobError is the error a handler answers for a job that ended with err:
// 503 for one cancelled by shutdown, err otherwise.
func (s *Server) jobError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errStopping) {
		return errStopping
	}
	return err
}

// prepare readies j on the handler's goroutine when the loaded model is a
// Preparer (see there), and refuses it (413) when the model's measured
// speed says it cannot finish in the time left before its deadline.
func (s *Server) prepare(j *job) error {
	s.mu.Lock()
	m := s.model
	s.mu.Unlock()
	pm, ok := m.(Preparer)
	if !ok {
		return nil // not loaded, or cannot: the worker does it all
	}
	if valueBytes(j.req.State, largeState) >= largeState {
		// Tokenizing a large state holds a few times its size: one at a
		// time, as when the worker did it.
		select {
		case s.prepLarge <- struct{}{}:
			defer func() { <-s.prepLarge }()
		case <-j.ctx.Done():
			return j.ctx.Err()
		}
	}
	p, err := pm.Prepare(j.ctx, j.req)
	if err != nil {
		if cerr := j.ctx.Err(); cerr != nil {
			return cerr // the request ended: what stopped the work says nothing about the request
		}
		return err
	}
	j.prep = p
	if err := j.ctx.Err(); err != nil {
		return err
	}
	dl, _ := j.ctx.Deadline()
	if d, basis, ok := p.Estimate(); ok && d > time.Until(dl) {
		return &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLong, Message: fmt.Sprintf(
			"the record's %d tokens need at least %v of compute at this server's measured speed (%s), past its %v request timeout: send a shorter state, or raise --request-timeout",
			p.Tokens(), d.Round(time.Millisecond), basis, s.cfg.RequestTimeout)}
	}
	return nil
}

// largeState is the size from which states are prepared one at a time.
const largeState = 1 << 20

// valueBytes is about the bytes of v's text (its strings, keys and
// numbers), counted up to limit.
func valueBytes(v *pyjson.Value, limit int) int {
	if v == nil {
		return 0
	}
	n := len(v.Str) + 8
	for _, it := range v.Items {
		if n >= limit {
			return n
		}
		n += valueBytes(it, limit-n)
	}
	for i, k := range v.Keys {
		if n >= limit {
			return n
		}
		n += len(k) + valueBytes(v.Vals[i], limit-n)
	}
	return n
}

// overBudget refuses a prepared job whose estimated compute time is past
// the time left before its deadline (it waited in the queue): 504 now
// rather than at the deadline.
func overBudget(j *job) error {
	if j.prep == nil {
		return nil
	}
	dl, ok := j.ctx.Deadline()
	if !ok {
		return nil
	}
	d, basis, ok := j.prep.Estimate()
	if left := time.Until(dl); ok && d > left {
		return &httpError{Status: http.StatusGatewayTimeout, Code: codeTimeout, Message: fmt.Sprintf(
			"the decision would not finish before the request deadline: its %d tokens need at least %v (%s), %v was left after %v in the queue",
			j.prep.Tokens(), d.Round(time.Millisecond), basis, max(0, left).Round(time.Millisecond), time.Since(j.enq).Round(time.Millisecond))}
	}
	return nil
}

// busyWork is the work the worker runs now: when it started, and when the
// last of its contexts ended (0 while one is live), for /health and the
// log of cancelled work.
type busyWork struct {
	id    string
	start time.Time
	live  atomic.Int64
	ended atomic.Int64 // unix nanoseconds
	stops []func() bool
}

// setBusy marks the worker busy with jobs until the returned function is
// called.
func (s *Server) setBusy(jobs []*job) (*busyWork, func()) {
	b := &busyWork{id: jobs[0].id, start: time.Now()}
	b.live.Store(int64(len(jobs)))
	for _, j := range jobs {
		b.stops = append(b.stops, context.AfterFunc(j.ctx, func() {
			if b.live.Add(-1) == 0 {
				b.ended.Store(time.Now().UnixNano())
			}
		}))
	}
	s.busy.Store(b)
	return b, func() {
		for _, stop := range b.stops {
			stop()
		}
		s.busy.CompareAndSwap(b, nil)
	}
}

// defaultStuckAfter is how long the worker may keep running work that
// nobody waits for any more (its deadline passed, its client left) before
// /health reports it: the engine stops within a chunk of work, far less
// than this.
const defaultStuckAfter = time.Second

// stuck reports for how long the worker has been running work past the
// end of every context it serves (0: not stuck).
func (s *Server) stuck() time.Duration {
	b := s.busy.Load()
	if b == nil {
		return 0
	}
	if ended := b.ended.Load(); ended != 0 {
		if d := time.Since(time.Unix(0, ended)); d > s.stuckAfter {
			return d
		}
	}
	return 0
}

// logStopped logs a decision that ended after its context did: how long
// the engine ran it, and how long it kept running after the cancel.
func (s *Server) logStopped(j *job, b *busyWork, run time.Duration) {
	why := "deadline"
	switch c := context.Cause(j.ctx); {
	case errors.Is(c, errStopping):
		why = "shutdown"
	case errors.Is(c, context.Canceled):
		why = "client gone"
	}
	attrs := []any{"id", j.id, "why", why, "engine_ms", ms(run)}
	if ended := b.ended.Load(); ended != 0 {
		attrs = append(attrs, "after_cancel_ms", ms(time.Since(time.Unix(0, ended))))
	}
	s.log.Info("decision cancelled", attrs...)
}

// job is one decision waiting for the worker.
type job struct {
	ctx  context.Context
	req  *api.Request
	id   string   // the request id, for the log
	prep Prepared // from prepare; nil when the worker does it all
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
	if s.stopping.Load() {
		for _, j := range batch {
			j.done <- jobResult{err: errStopping, wait: time.Since(j.enq)}
		}
		return
	}
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
			if s.stopping.Load() {
				j.done <- jobResult{err: errStopping, wait: t.Sub(j.enq)}
				continue
			}
			if err := overBudget(j); err != nil {
				j.done <- jobResult{err: err, wait: t.Sub(j.enq)}
				continue
			}
			b, idle := s.setBusy([]*job{j})
			dec, err := s.decide(j.ctx, m, j)
			run := time.Since(t)
			idle()
			if err != nil && j.ctx.Err() != nil {
				s.logStopped(j, b, run)
			}
			j.done <- jobResult{dec: dec, err: err, wait: t.Sub(j.enq), run: run}
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
	_, idle := s.setBusy(jobs)
	defer idle()
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

// decide calls the model (with the job's prepared request when there is
// one), turning a panic into an error so that one bad request cannot take
// the daemon down.
func (s *Server) decide(ctx context.Context, m Model, j *job) (dec *Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panicked()
			err = &panicError{value: p}
		}
	}()
	if pm, ok := m.(Preparer); ok && j.prep != nil {
		return pm.DecidePrepared(ctx, j.prep)
	}
	return m.Decide(ctx, j.req)
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

// writeHealth answers /health: 200 {"status":"ok"} when the model is
// loaded and warmed up and the worker is not stuck; else 503 with the state
// ("starting", "loading", "unloaded", "failed", "stopping", or "degraded"
// for a worker still running a decision stuckAfter past the end of its
// context, with stuck_seconds) and a fixed reason. The model name and a
// load error, which may hold file paths, come only to a request that
// carries the token (when one is set): anyone may ask /health whether to
// send work, nothing more.
func (s *Server) writeHealth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	state, loaded, loadErr := s.state, s.model != nil, s.loadErr
	s.mu.Unlock()
	type health struct {
		Status string  `json:"status"`
		Model  string  `json:"model,omitempty"`
		Reason string  `json:"reason,omitempty"`
		Error  string  `json:"error,omitempty"`
		Stuck  float64 `json:"stuck_seconds,omitempty"`
	}
	h := health{Status: "ok"}
	code := http.StatusOK
	if state != status.StateReady || !loaded {
		code = http.StatusServiceUnavailable
		h.Status = state
		switch state {
		case status.StateStarting, status.StateLoading:
			h.Reason = "model is loading"
			w.Header().Set("Retry-After", "5")
		case status.StateUnloaded:
			h.Reason = "model unloaded after the idle timeout; the next decision reloads it"
		case status.StateFailed:
			h.Reason = "model failed to load"
			if loadErr != nil {
				h.Error = loadErr.Error()
			}
		case status.StateStopping:
			h.Reason = "server is shutting down"
		default:
			h.Reason = "model not loaded"
		}
	} else if d := s.stuck(); d > 0 {
		code = http.StatusServiceUnavailable
		h.Status = "degraded"
		h.Reason = "the worker is still running a decision whose deadline passed or whose client left"
		h.Stuck = math.Round(d.Seconds()*10) / 10
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(s.stuckAfter.Seconds())))))
	}
	if s.cfg.Token != "" && s.authorized(r) {
		h.Model = s.cfg.ModelName
	} else {
		h.Error = ""
	}
	body, _ := json.Marshal(h)
	writeJSON(w, code, body)
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
