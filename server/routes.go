package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
	"github.com/clefrt/clef/internal/untrusted"
	"github.com/clefrt/clef/server/status"
)

// Workers AI model route served, as it appears after /ai/run/.
const workersAIModel = "@cf/cloudflare/clef-omni"

// workersAIModelName is what a Workers AI body's "model" must say (after
// trimming white space, as the schema's pattern ^\s*clef-omni\s*$ allows).
const workersAIModelName = "clef-omni"

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.Handle("/v1/systemone", s.wrap("systemone", systemOne, http.MethodPost, s.handleDecide(systemOne)))
	s.mux.Handle("/ai/run/{model...}", s.wrap("workers_ai", workersAI, http.MethodPost, s.handleDecide(workersAI)))
	s.mux.Handle("/client/v4/accounts/{account}/ai/run/{model...}", s.wrap("workers_ai", workersAI, http.MethodPost, s.handleDecide(workersAI)))
	// AI Gateway's Workers AI provider path, for clients configured with a gateway id.
	s.mux.Handle("/v1/{account}/{gateway}/workers-ai/{model...}", s.wrap("workers_ai", workersAI, http.MethodPost, s.handleDecide(workersAI)))
	s.mux.Handle("/ai/", s.wrap("not_found", workersAI, "", s.handleNoRoute(workersAI)))
	s.mux.Handle("/client/v4/", s.wrap("not_found", workersAI, "", s.handleNoRoute(workersAI)))
	s.mux.Handle("/v1/models", s.wrap("models", systemOne, http.MethodGet, s.handleModels))
	s.mux.Handle("/health", s.wrap("health", systemOne, http.MethodGet, s.handleHealth))
	s.mux.Handle("/healthz", s.wrap("health", systemOne, http.MethodGet, s.handleHealth))
	s.mux.Handle("/metrics", s.wrap("metrics", systemOne, http.MethodGet, s.handleMetrics))
	s.mux.Handle(status.Path, s.wrap("ps", systemOne, http.MethodGet, s.handlePS))
	s.mux.Handle(status.ShutdownPath, s.wrap("shutdown", systemOne, http.MethodPost, s.handleShutdown))
	s.mux.Handle("/", s.wrap("not_found", systemOne, "", s.handleNoRoute(systemOne)))
}

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// logMaxRunes bounds what the request log keeps of a refusal or an error:
// they may echo what the client sent (internal/untrusted cuts and escapes).
const logMaxRunes = 200

// reqInfo carries a request's id and the timings its handler learned.
type reqInfo struct {
	id    string
	attrs []slog.Attr
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, ri *reqInfo)

// wrap adds what every route shares: request id, method and bearer-token
// checks, panic recovery, metrics and the request log.
func (s *Server) wrap(route string, p protocol, method string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &reqInfo{id: requestID(r)}
		w.Header().Set("X-Request-Id", ri.id)
		if p == workersAI {
			w.Header().Set("cf-ai-req-id", ri.id)
		}
		rec := &recorder{ResponseWriter: w}
		defer func() {
			v := recover()
			abort := v == http.ErrAbortHandler
			if v != nil && !abort {
				s.metrics.panicked()
				s.log.Error("panic serving request", "id", ri.id, "route", route, "panic", untrusted.Clip(fmt.Sprint(v), logMaxRunes))
				if rec.status == 0 {
					writeError(rec, p, &httpError{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error"}, ri.id)
				}
			}
			code := rec.status
			if code == 0 || abort {
				code = 499 // nothing written: the client went away
			}
			d := time.Since(start)
			s.metrics.request(route, code, d)
			level := slog.LevelInfo
			if route == "health" || route == "metrics" || route == "ps" {
				level = slog.LevelDebug
			}
			attrs := append([]slog.Attr{slog.String("id", ri.id), slog.String("route", route), slog.String("method", untrusted.Clip(r.Method, 16)),
				slog.Int("status", code), slog.Float64("ms", float64(d.Microseconds())/1000)}, ri.attrs...)
			s.log.LogAttrs(context.Background(), level, "request", attrs...)
			if abort {
				panic(v) // net/http closes the connection without an answer
			}
		}()
		if !s.check(rec, r, p, method, ri.id) {
			return
		}
		if route != "health" && !s.authorized(r) {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="clef"`)
			writeError(rec, p, &httpError{Status: http.StatusUnauthorized, Code: codeUnauthorized, Message: "missing or invalid bearer token"}, ri.id)
			return
		}
		if method != "" && r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			rec.Header().Set("Allow", method)
			writeError(rec, p, &httpError{Status: http.StatusMethodNotAllowed, Code: codeNoRoute, Message: r.Method + " is not allowed here; use " + method}, ri.id)
			return
		}
		if method == http.MethodPost {
			if he := checkContentType(r); he != nil {
				writeError(rec, p, he, ri.id)
				return
			}
		}
		h(rec, r, ri)
		if rec.status == 0 {
			// Never an empty 200: a client that went away (or half-closed
			// its side, which net/http cannot tell apart) gets its
			// connection closed; a handler that wrote nothing is a bug.
			if r.Context().Err() != nil {
				panic(http.ErrAbortHandler)
			}
			writeError(rec, p, &httpError{Status: http.StatusInternalServerError, Code: api.CodeInternal, Message: "no answer"}, ri.id)
		}
	})
}

// requestID is the client's X-Request-Id when it is a sane token, else a new one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") == "" {
		return id
	}
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// authorized compares the bearer token in constant time (hashes of equal
// length, so not even the token's length leaks).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	want := sha256.Sum256([]byte(s.cfg.Token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func (s *Server) handleNoRoute(p protocol) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
		if p == workersAI {
			writeError(w, p, &httpError{Status: http.StatusBadRequest, Code: codeNoRoute, Message: "No route for that URI"}, ri.id)
			return
		}
		writeError(w, p, &httpError{Status: http.StatusNotFound, Code: codeNoRoute, Message: "no route for " + r.URL.Path}, ri.id)
	}
}

// handleDecide serves a decision route in protocol p.
func (s *Server) handleDecide(p protocol) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
		if p == workersAI && r.PathValue("model") != workersAIModel {
			writeError(w, p, &httpError{Status: http.StatusBadRequest, Code: codeNoRoute, Message: "No route for that URI"}, ri.id)
			return
		}
		body, release, he := s.readBody(w, r, p)
		if he != nil {
			ri.attrs = append(ri.attrs, slog.String("refused", untrusted.Clip(he.Message, logMaxRunes)))
			writeError(w, p, he, ri.id)
			return
		}
		defer release() // the body's budget is held until the answer
		if s.cfg.LogBodies {
			ri.attrs = append(ri.attrs, slog.String("body", string(body)))
		}
		ri.attrs = append(ri.attrs, slog.Int("body_bytes", len(body)))
		req, ignored, err := s.parse(p, body)
		if err != nil {
			he, _ := toHTTPError(err)
			ri.attrs = append(ri.attrs, slog.String("refused", untrusted.Clip(he.Message, logMaxRunes)))
			writeError(w, p, he, ri.id)
			return
		}
		dec, err := s.submit(r.Context(), req, ri)
		if err != nil {
			he, internal := toHTTPError(err)
			if internal {
				s.log.Error("decision failed", "id", ri.id, "err", untrusted.Error(err))
			} else {
				ri.attrs = append(ri.attrs, slog.String("refused", untrusted.Clip(he.Message, logMaxRunes)))
			}
			if he.Status == http.StatusTooManyRequests || he.Status >= 500 {
				s.errorsN.Add(1)
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // client gone: nothing to write
			}
			writeError(w, p, he, ri.id)
			return
		}
		if p == workersAI {
			// The result is written byte for byte as the model rendered it.
			out := append([]byte(`{"result":`), bytes.TrimSpace(dec.Body)...)
			out = append(out, `,"success":true,"errors":[],"messages":`...)
			out = append(out, ignoredMessages(ignored)...)
			out = append(out, '}')
			writeJSON(w, http.StatusOK, out)
			return
		}
		writeJSON(w, http.StatusOK, bytes.TrimSpace(dec.Body))
	}
}

// parse decodes and validates a body for protocol p: the reference's checks
// on SystemOne, the hosted API's on Workers AI (at most 4 images, 4 clips and
// 2 videos within their decoded sizes). The media themselves (images, audio,
// videos) are decoded by the model, which refuses what it cannot read with a
// 422 naming the item. On Workers AI, members that the published schema
// allows but the API does not use are answered, not refused, and returned in
// ignored so the envelope's messages can say so.
func (s *Server) parse(p protocol, body []byte) (req *api.Request, ignored []string, err error) {
	req, err = api.ParseRequest(body)
	if err != nil {
		return nil, nil, err
	}
	// The hosted API estimates (body bytes)/4 tokens; pictures and sound
	// are not text (readBody read them within their own allowance).
	if hosted := p == workersAI || s.cfg.Strict; hosted && s.cfg.MaxBodyBytes >= api.MaxBodyBytes {
		if n := req.TextBodyBytes(len(body)); n > api.MaxBodyBytes {
			return nil, nil, &api.Error{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLong,
				Message: fmt.Sprintf("request too large: %d bytes of text is about %d tokens, more than %d", n, n/4, api.MaxBodyBytes/4)}
		}
	}
	switch {
	case p == workersAI && !s.cfg.Strict:
		if err := checkWorkersAIModel(req); err != nil {
			return nil, nil, err
		}
		ignored, err = req.ValidateHostedLenient() // Validate, then the hosted limits
	case p == workersAI:
		if err := checkWorkersAIModel(req); err != nil {
			return nil, nil, err
		}
		err = req.ValidateHosted()
	case s.cfg.Strict:
		err = req.ValidateHosted()
	default:
		err = req.Validate()
	}
	if err != nil {
		return nil, nil, err
	}
	return req, ignored, nil
}

// ignoredMessages renders the envelope's messages for ignored members: a
// JSON array of strings, [] when there are none.
func ignoredMessages(ignored []string) []byte {
	msgs := make([]string, len(ignored))
	for i, f := range ignored {
		msgs[i] = "ignored unknown field " + f + ": it is not part of the clef-omni API"
	}
	b, _ := json.Marshal(msgs)
	return b
}

// checkWorkersAIModel applies the route's model check: the body's model
// must be clef-omni, as the schema's pattern says and the hosted API checks.
func checkWorkersAIModel(req *api.Request) error {
	m := req.Doc.Get("model")
	switch {
	case m == nil:
		return &httpError{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: "model",
			Message: `model: required; use "clef-omni" on @cf/cloudflare/clef-omni`}
	case m.Kind != pyjson.String || strings.TrimSpace(m.Str) != workersAIModelName:
		return &httpError{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: "model",
			Message: `model: must be "clef-omni" to match the route @cf/cloudflare/clef-omni`}
	}
	return nil
}

// submit queues a validated request and waits for its decision, its
// deadline or its client's cancel.
func (s *Server) submit(parent context.Context, req *api.Request, ri *reqInfo) (*Decision, error) {
	if err := s.admit(); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := s.jobContext(parent)
	defer cancel()
	j := &job{ctx: ctx, req: req, id: ri.id, done: make(chan jobResult, 1)}
	if err := s.prepare(j); err != nil { // tokenized here, not on the worker
		return nil, s.jobError(ctx, err)
	}
	j.enq = time.Now()
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	if err := s.enqueue(j); err != nil {
		if errors.Is(err, errQueueFull) {
			return nil, &httpError{Status: http.StatusTooManyRequests, Code: api.CodeUnavailable,
				Message: "Capacity temporarily exceeded: the decision queue is full", RetryAfter: s.retryAfter()}
		}
		return nil, err
	}
	var res jobResult
	select {
	case res = <-j.done:
	case <-ctx.Done():
		// The worker skips or aborts it; answer now.
		res = jobResult{err: ctx.Err(), wait: time.Since(j.enq)}
	}
	ri.attrs = append(ri.attrs, slog.Float64("queue_ms", ms(res.wait)), slog.Float64("decide_ms", ms(res.run)))
	if res.err != nil {
		if errors.Is(res.err, context.DeadlineExceeded) {
			s.metrics.timedOut(time.Since(start)) // in the percentiles, at its deadline
		}
		return nil, s.jobError(ctx, res.err)
	}
	s.requests.Add(1)
	s.metrics.decision(res.dec.InputTokens, res.run, time.Since(start))
	ri.attrs = append(ri.attrs, slog.Int("input_tokens", res.dec.InputTokens))
	if res.dec.CachedTokens > 0 {
		ri.attrs = append(ri.attrs, slog.Int("cached_prefix_tokens", res.dec.CachedTokens))
	}
	for _, st := range res.dec.Stages {
		ri.attrs = append(ri.attrs, slog.Float64(st.Name+"_ms", ms(st.Dur)))
	}
	return res.dec, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// retryAfter estimates, in whole seconds, when the queue will have room.
func (s *Server) retryAfter() int {
	p50 := s.metrics.serviceQuantile(0.5) / 1000
	secs := int(math.Ceil(float64(s.depth.Load()) * p50))
	return max(1, min(secs, 60))
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
	ps := s.PS()
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		State   string `json:"state"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, m := range ps.Models {
		out.Data = append(out.Data, model{ID: m.Name, Object: "model", Created: s.started.Unix(), OwnedBy: "clef", State: m.State})
	}
	body, _ := json.Marshal(out)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
	s.writeHealth(w, r)
}

func (s *Server) handlePS(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
	body, _ := json.Marshal(s.PS())
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) handleShutdown(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
	if s.cfg.Token == "" { // with a token, wrap checked it
		if msg := shutdownAllowed(r); msg != "" {
			writeError(w, systemOne, &httpError{Status: http.StatusForbidden, Code: codeForbidden, Message: msg}, ri.id)
			return
		}
	}
	s.shutdownOnce.Do(func() { close(s.shutdownReq) })
	writeJSON(w, http.StatusAccepted, []byte(`{"status":"shutting down"}`))
}

func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request, ri *reqInfo) {
	ps := s.PS()
	m := ps.Models[0]
	loaded := 0.0
	if m.State == status.StateReady {
		loaded = 1
	}
	gauges := []gauge{
		{name: "clef_queue_depth", help: "Decisions waiting for the worker.", value: float64(ps.Queue.Depth)},
		{name: "clef_queue_capacity", help: "Bound of the decision queue.", value: float64(ps.Queue.Capacity)},
		{name: "clef_in_flight", help: "Decisions queued or running.", value: float64(m.InFlight)},
		{name: "clef_model_loaded", help: "1 when the model is loaded and warmed up.", value: loaded},
		{name: "clef_resident_bytes", help: "Memory held by the loaded model (process RSS when the model does not say).", value: float64(m.ResidentBytes)},
		{name: "clef_process_resident_bytes", help: "Resident set size of the daemon.", value: float64(processRSS())},
		{name: "clef_uptime_seconds", help: "Seconds since the daemon started.", value: ps.Daemon.UptimeS},
		{name: "clef_request_body_bytes", help: "Bytes of request bodies held now (read or being read).", value: float64(s.edge.budget.inUse())},
		{name: "clef_request_body_budget_bytes", help: "Bound of the request body bytes held at once.", value: float64(s.edge.budget.max)},
	}
	c := s.cache.Status()
	gauges = append(gauges,
		gauge{name: "clef_prefix_cache_bytes", help: "Bytes of prefix key/values cached.", value: float64(c.Bytes)},
		gauge{name: "clef_prefix_cache_max_bytes", help: "Bound of the prefix cache.", value: float64(c.MaxBytes)},
		gauge{name: "clef_prefix_cache_entries", help: "Prefixes cached.", value: float64(c.Entries)},
		gauge{name: "clef_prefix_cache_hits_total", help: "Decisions whose prefix was cached.", typ: "counter", value: float64(c.Hits)},
		gauge{name: "clef_prefix_cache_misses_total", help: "Decisions whose prefix was computed.", typ: "counter", value: float64(c.Misses)},
		gauge{name: "clef_prefix_cache_evictions_total", help: "Prefixes evicted to stay in bounds.", typ: "counter", value: float64(c.Evictions)},
	)
	var b bytes.Buffer
	s.metrics.write(&b, gauges)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}
