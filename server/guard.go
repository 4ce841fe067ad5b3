package server

// The HTTP edge: which requests are served at all, and how their bodies are
// read. A local daemon without a token is reachable by every web page the
// user's browser opens, so it serves only Host values that name it (DNS
// rebinding), refuses cross-site requests (Origin, fetch metadata) and the
// content types a page may post cross-site without a preflight (CSRF), and
// sends CORS headers only for origins the user named. Bodies are refused on
// their Content-Length before a byte is read (no 100 Continue), read with a
// hard cap, and bounded together by a server-wide budget of bytes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/internal/untrusted"
)

// DefaultBodyBudgetBytes bounds the bytes of all request bodies held at once
// (Config.BodyBudgetBytes); it is raised to MaxBodyBytes when that is larger.
const DefaultBodyBudgetBytes = 256 << 20

// defaultBudgetWait is how long a body waits for room in the budget before
// its request is answered 503 with Retry-After.
const defaultBudgetWait = time.Second

// corsAllowHeaders are the request headers a configured origin may send.
var corsAllowHeaders = []string{"Content-Type", "Authorization", "X-Request-Id"}

// edge holds the checks of every request before its handler runs.
type edge struct {
	listenHost     string // host of Config.Addr, lower-case, without brackets
	beyondLoopback bool   // listening beyond loopback: IP-literal Hosts are served too
	allowHosts     []hostPort
	corsOrigins    map[string]bool // normalised scheme://host[:port]
	budget         *byteBudget
	budgetWait     atomic.Int64 // time.Duration
}

type hostPort struct{ host, port string } // port "" matches any

func newEdge(cfg Config) (*edge, error) {
	e := &edge{corsOrigins: map[string]bool{}}
	host, _ := splitHost(cfg.Addr)
	e.listenHost = host
	if ip := net.ParseIP(host); ip != nil {
		e.beyondLoopback = !ip.IsLoopback()
	} else {
		e.beyondLoopback = host != "localhost"
	}
	for _, h := range cfg.AllowHosts {
		h = strings.TrimSpace(h)
		if h == "" || strings.ContainsAny(h, "/@?# ") {
			return nil, fmt.Errorf("server: allowed host %s must be a host name or address, optionally with :port", untrusted.Quote(h))
		}
		host, port := splitHost(h)
		if host == "" {
			return nil, fmt.Errorf("server: allowed host %s has no host", untrusted.Quote(h))
		}
		if port != "" {
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				return nil, fmt.Errorf("server: allowed host %s has a bad port", untrusted.Quote(h))
			}
		}
		e.allowHosts = append(e.allowHosts, hostPort{host, port})
	}
	for _, o := range cfg.CORSOrigins {
		n, ok := normalOrigin(strings.TrimSuffix(strings.TrimSpace(o), "/"))
		if !ok {
			return nil, fmt.Errorf("server: CORS origin %s must be scheme://host[:port] (http or https, no path; \"*\" is not allowed)", untrusted.Quote(o))
		}
		e.corsOrigins[n] = true
	}
	e.budget = &byteBudget{max: cfg.BodyBudgetBytes, wake: make(chan struct{})}
	e.budgetWait.Store(int64(defaultBudgetWait))
	return e, nil
}

// splitHost splits host[:port] (brackets around IPv6 allowed) into a
// lower-case host without brackets or trailing dot, and the port.
func splitHost(hp string) (host, port string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		host, port = h, p
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

// hostAllowed tells whether a request's Host names this daemon: a loopback
// name or address, the listen address, an --allow-host entry, or (when
// listening beyond loopback) an IP literal, which DNS rebinding cannot
// produce. An empty Host (HTTP/1.0) is served.
func (e *edge) hostAllowed(hp string) bool {
	if hp == "" {
		return true
	}
	host, port := splitHost(hp)
	if host == "localhost" || host == e.listenHost {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || e.beyondLoopback) {
		return true
	}
	for _, a := range e.allowHosts {
		if a.host == host && (a.port == "" || a.port == port) {
			return true
		}
	}
	return false
}

// normalOrigin normalises an origin (scheme://host[:port], default port
// left out) and reports whether it is one.
func normalOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	host, port := splitHost(u.Host)
	if host == "" || port == defaultPort(u.Scheme) {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return u.Scheme + "://" + host + ":" + port, true
	}
	return u.Scheme + "://" + host, true
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// sameOrigin tells whether origin is the daemon itself as the request
// reached it: the origin's host and port are the request's Host.
func sameOrigin(origin, reqHost string) bool {
	n, ok := normalOrigin(origin)
	if !ok || reqHost == "" {
		return false
	}
	u, _ := url.Parse(n)
	oh, op := splitHost(u.Host)
	rh, rp := splitHost(reqHost)
	if op == "" {
		op = defaultPort(u.Scheme)
	}
	if rp == "" {
		rp = defaultPort(u.Scheme)
	}
	return oh == rh && op == rp
}

// corsOrigin tells whether the request comes from a configured CORS origin.
func (e *edge) corsOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || len(e.corsOrigins) == 0 {
		return false
	}
	n, ok := normalOrigin(o)
	return ok && e.corsOrigins[n]
}

// crossSite tells whether the browser's fetch metadata says the request
// comes from another site or another origin of this one.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	return false
}

// fromBrowser tells whether a request carries a browser's marks: an Origin,
// or fetch metadata other than a request the user typed.
func fromBrowser(r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		return true
	}
	s := r.Header.Get("Sec-Fetch-Site")
	return s != "" && s != "none"
}

// check runs the edge checks of a request to a route answering method;
// it writes the refusal or the preflight answer and reports whether the
// handler may run.
func (s *Server) check(w http.ResponseWriter, r *http.Request, p protocol, method string, id string) bool {
	e := s.edge
	if !e.hostAllowed(r.Host) {
		writeError(w, p, &httpError{Status: http.StatusMisdirectedRequest, Code: codeForbidden,
			Message: fmt.Sprintf("Host %s is not served here (only loopback names and addresses and the listen address are, against DNS rebinding); start clef serve with --allow-host %s to serve it",
				untrusted.Quote(r.Host), hostOnlyShort(r.Host))}, id)
		return false
	}
	cors := e.corsOrigin(r)
	if len(e.corsOrigins) > 0 {
		w.Header().Add("Vary", "Origin")
	}
	if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		s.preflight(w, r, p, method, cors, id)
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && !cors && !sameOrigin(o, r.Host) {
		writeError(w, p, &httpError{Status: http.StatusForbidden, Code: codeForbidden,
			Message: fmt.Sprintf("cross-origin request from Origin %s refused; start clef serve with --cors-origin to allow a web page to call the daemon", untrusted.Quote(o))}, id)
		return false
	}
	if crossSite(r) && !cors {
		writeError(w, p, &httpError{Status: http.StatusForbidden, Code: codeForbidden,
			Message: "cross-site request refused (Sec-Fetch-Site: " + untrusted.Quote(r.Header.Get("Sec-Fetch-Site")) + ")"}, id)
		return false
	}
	if cors {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, cf-ai-req-id, Retry-After")
	}
	return true
}

// checkContentType refuses a POST whose body a browser could send
// cross-site without a preflight: only application/json (any parameters)
// or a +json type, or no type at all from a client that is not a browser
// (or with no body).
func checkContentType(r *http.Request) *httpError {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if fromBrowser(r) && r.ContentLength != 0 {
			return &httpError{Status: http.StatusUnsupportedMediaType, Code: api.CodeNotJSON,
				Message: "a request from a browser must say Content-Type: application/json"}
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return nil
	}
	return &httpError{Status: http.StatusUnsupportedMediaType, Code: api.CodeNotJSON,
		Message: fmt.Sprintf("Content-Type %s is not accepted: send Content-Type: application/json (curl: -H 'Content-Type: application/json', or --json)", untrusted.Quote(ct))}
}

// preflight answers a CORS preflight: 204 with the allowances for a
// configured origin asking for the route's method and known headers, 403
// otherwise, without CORS headers.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request, p protocol, method string, cors bool, id string) {
	refuse := func(msg string) {
		writeError(w, p, &httpError{Status: http.StatusForbidden, Code: codeForbidden, Message: msg}, id)
	}
	if !cors {
		refuse(fmt.Sprintf("cross-origin request from Origin %s refused; start clef serve with --cors-origin to allow a web page to call the daemon", untrusted.Quote(r.Header.Get("Origin"))))
		return
	}
	want := r.Header.Get("Access-Control-Request-Method")
	if method == "" || (want != method && !(method == http.MethodGet && want == http.MethodHead)) {
		refuse(fmt.Sprintf("method %s is not served here", untrusted.Quote(want)))
		return
	}
	for _, f := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, a := range corsAllowHeaders {
			ok = ok || strings.EqualFold(f, a)
		}
		if !ok {
			refuse(fmt.Sprintf("request header %s is not allowed", untrusted.Quote(f)))
			return
		}
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
	h.Set("Access-Control-Allow-Methods", method)
	h.Set("Access-Control-Allow-Headers", strings.Join(corsAllowHeaders, ", "))
	h.Set("Access-Control-Max-Age", "600")
	h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
	w.WriteHeader(http.StatusNoContent)
}

// shutdownAllowed is the same-origin check of /v1/shutdown on a daemon
// without a token: from loopback, with no foreign Origin (a --cors-origin
// one included) and no cross-site fetch metadata.
func shutdownAllowed(r *http.Request) string {
	if !isLoopback(r.RemoteAddr) {
		return "shutdown is only allowed from loopback or with the bearer token"
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return "shutdown is not allowed from another origin without the bearer token"
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "shutdown is not allowed from another site without the bearer token"
	}
	return ""
}

// hostOnlyShort is the host of a Host value, for a hint, shell-safe.
func hostOnlyShort(hp string) string {
	h, _ := splitHost(hp)
	if len(h) > 100 || strings.Trim(h, "abcdefghijklmnopqrstuvwxyz0123456789.-:") != "" {
		return "NAME"
	}
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// byteBudget is a semaphore of bytes: the bodies of all requests held at
// once stay within max.
type byteBudget struct {
	mu   sync.Mutex
	max  int64
	used int64
	peak int64         // most used since the last return of memory to the OS
	wake chan struct{} // closed and replaced on every release

	freeing  atomic.Bool
	lastFree atomic.Int64 // unix nanoseconds
}

// acquire takes n bytes, waiting up to wait (or ctx) for room.
func (b *byteBudget) acquire(ctx context.Context, n int64, wait time.Duration) bool {
	var timer <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.peak = max(b.peak, b.used)
			b.mu.Unlock()
			return true
		}
		wake := b.wake
		b.mu.Unlock()
		if timer == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wake:
		case <-timer:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// freeOSAfter is the peak use of the budget past which memory is handed
// back to the OS once no body is held, at most every freeOSEvery.
const (
	freeOSAfter = 64 << 20
	freeOSEvery = 10 * time.Second
)

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	idle := b.used == 0 && b.peak >= freeOSAfter
	if idle {
		b.peak = 0
	}
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
	// After a burst of large bodies, return their memory to the OS now
	// rather than at the scavenger's pace, so RSS falls back near its
	// baseline.
	if idle && time.Since(time.Unix(0, b.lastFree.Load())) >= freeOSEvery && b.freeing.CompareAndSwap(false, true) {
		b.lastFree.Store(time.Now().UnixNano())
		go func() {
			defer b.freeing.Store(false)
			debug.FreeOSMemory()
		}()
	}
}

func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// readBody reads a request body for protocol p within its limits: the
// per-body limit (--max-body-bytes; on the Workers AI routes and under
// Strict also the hosted 524,288 bytes), refused on Content-Length before
// any byte is read, else on the bytes read; and the server-wide budget,
// held until release is called (after the answer). A nil error comes with
// a release to call.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, p protocol) (body []byte, release func(), he *httpError) {
	limit := s.cfg.MaxBodyBytes
	hosted := (p == workersAI || s.cfg.Strict) && limit >= api.MaxBodyBytes
	if hosted {
		// The text is checked against the hosted limit once parsed
		// (Server.parse); the media may add their own allowance.
		limit = min(limit, api.MaxBodyBytes+api.MaxMediaBodyBytes)
	}
	tooLarge := func(n int64) *httpError {
		e := &httpError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLong}
		switch {
		case hosted && limit == api.MaxBodyBytes+api.MaxMediaBodyBytes:
			// Past what text and media may take together: say both.
			e.Message = fmt.Sprintf("request too large: more than %d bytes; the hosted route reads %d bytes of text (about %d tokens) "+
				"plus media within their decoded limits (%d MiB of images; %d MiB of audio and videos together)",
				limit, api.MaxBodyBytes, api.MaxBodyBytes/4, api.MaxImagesBytes>>20, api.MaxAVBytes>>20)
		case hosted && n > 0:
			e.Message = fmt.Sprintf("request too large: %d bytes is about %d tokens, more than %d", n, n/4, api.MaxBodyBytes/4)
		case hosted:
			e.Message = fmt.Sprintf("request too large: more than %d bytes is more than %d tokens", api.MaxBodyBytes, api.MaxBodyBytes/4)
		default:
			e.Message = fmt.Sprintf("request body is larger than %d bytes", limit)
		}
		return e
	}
	// Before reading: net/http sends 100 Continue on the first read only.
	if r.ContentLength > limit {
		return nil, nil, tooLarge(r.ContentLength)
	}
	b := s.edge.budget
	var held int64
	release = func() {
		if held > 0 {
			b.release(held)
			held = 0
		}
	}
	wait := time.Duration(s.edge.budgetWait.Load())
	grab := func(n int64) *httpError {
		if n <= 0 {
			return nil
		}
		if !b.acquire(r.Context(), n, wait) {
			return &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, RetryAfter: s.retryAfter(),
				Message: fmt.Sprintf("too many request bodies are being read at once (%d bytes in all at most); retry shortly", b.max)}
		}
		held += n
		return nil
	}
	fail := func(e *httpError) ([]byte, func(), *httpError) {
		release()
		return nil, nil, e
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	readErr := func(err error) *httpError {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge(-1)
		}
		return &httpError{Status: http.StatusBadRequest, Code: api.CodeNotJSON, Message: "reading the request body: " + err.Error()}
	}
	if r.ContentLength >= 0 {
		if e := grab(r.ContentLength); e != nil {
			return fail(e)
		}
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(rd, body); err != nil {
			return fail(readErr(err))
		}
		return body, release, nil
	}
	// No Content-Length (chunked): grow by doubling up to limit, each
	// buffer paid for before it is allocated; one more byte past limit is
	// a 413.
	for {
		if len(body) == cap(body) {
			if int64(len(body)) >= limit {
				var probe [1]byte
				n, err := rd.Read(probe[:])
				switch {
				case n == 0 && err == io.EOF:
					return body, release, nil
				case n > 0:
					return fail(tooLarge(-1))
				case err != nil:
					return fail(readErr(err))
				}
				continue
			}
			size := min(max(2*int64(cap(body)), 16<<10), limit)
			if e := grab(size - int64(cap(body))); e != nil {
				return fail(e)
			}
			nb := make([]byte, len(body), size)
			copy(nb, body)
			body = nb
		}
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			return body, release, nil
		}
		if err != nil {
			return fail(readErr(err))
		}
	}
}
