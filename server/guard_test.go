package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/menubar"
	"github.com/clefrt/clef/server/status"
)

// hostOf is the host:port of a test server.
func hostOf(ts *httptest.Server) string { return ts.Listener.Addr().String() }

// send makes one request with the given headers (Host among them) and
// returns its answer.
func send(t testing.TB, method, url, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

// errorCode reads the code and message of an error answer in either protocol.
func errorCode(t testing.TB, wai bool, r result) (int, string) {
	t.Helper()
	if wai {
		var env struct {
			Success bool
			Errors  []struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal(r.body, &env); err != nil || env.Success || len(env.Errors) != 1 {
			t.Fatalf("not a Workers AI error envelope (%v): %s", err, r.body)
		}
		return env.Errors[0].Code, env.Errors[0].Message
	}
	var e systemOneError
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not a SystemOne error (%v): %s", err, r.body)
	}
	return e.Error.Code, e.Error.Message
}

func noCORS(t testing.TB, what string, h http.Header) {
	t.Helper()
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Errorf("%s: CORS header %s: %s without --cors-origin", what, k, h.Get(k))
		}
	}
}

// Defect 2 (DNS rebinding): only loopback names and addresses, the listen
// address and --allow-host names are served; any other Host is refused in
// the route's envelope, on every route.
func TestHostAllowList(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil), AllowHosts: []string{"clef.internal", "box.lan:8089"}})
	_, port, _ := net.SplitHostPort(hostOf(ts))
	for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example", "localhost.evil.example",
		"clef.internal.evil.example", "box.lan", "box.lan:9999", "10.1.2.3:" + port, "[fe80::1]:" + port} {
		for _, c := range []struct {
			method, path string
			wai          bool
		}{{"POST", soPath, false}, {"POST", waiPath, true}, {"POST", acctWAI, true}, {"GET", "/health", false}, {"GET", status.Path, false},
			{"GET", "/v1/models", false}, {"GET", "/metrics", false}, {"POST", status.ShutdownPath, false}} {
			r := send(t, c.method, ts.URL+c.path, goodBody, "Host", host)
			if r.status != http.StatusMisdirectedRequest {
				t.Fatalf("Host %s %s %s: %d %s", host, c.method, c.path, r.status, r.body)
			}
			if _, msg := errorCode(t, c.wai, r); !strings.Contains(msg, "--allow-host") {
				t.Errorf("Host %s: message %q does not say how to allow it", host, msg)
			}
		}
	}
	for _, host := range []string{hostOf(ts), "localhost", "localhost:" + port, "LOCALHOST:" + port, "127.0.0.1", "127.8.9.10:" + port,
		"[::1]:" + port, "[::1]", "clef.internal", "clef.internal:1234", "box.lan:8089"} {
		if r := send(t, "POST", ts.URL+soPath, goodBody, "Host", host); r.status != 200 {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
		if r := send(t, "POST", ts.URL+waiPath, goodBody, "Host", host); r.status != 200 {
			t.Errorf("Host %s (Workers AI): %d %s", host, r.status, r.body)
		}
	}
}

// The listen address itself is served, and a daemon bound beyond loopback
// serves IP literals (they cannot come from DNS rebinding) but no names.
func TestHostListenAddress(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil), Addr: "0.0.0.0:8089", Token: "tk"})
	auth := "Bearer tk"
	for _, host := range []string{"0.0.0.0:8089", "192.168.1.20:8089", "[2001:db8::1]:8089", "127.0.0.1:8089"} {
		if r := send(t, "POST", ts.URL+soPath, goodBody, "Host", host, "Authorization", auth); r.status != 200 {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
	}
	if r := send(t, "POST", ts.URL+soPath, goodBody, "Host", "myhost.lan:8089", "Authorization", auth); r.status != http.StatusMisdirectedRequest {
		t.Errorf("name on an all-interfaces bind: %d %s", r.status, r.body)
	}
}

// Defect 2 (CSRF): decision routes take application/json (any charset) or
// no content type from a non-browser client; the types a browser may send
// cross-site without a preflight are 415.
func TestContentTypeCSRF(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "text/html", "application/xml", "", "nonsense/"} {
		for _, p := range []string{soPath, waiPath} {
			hdr := []string{"Content-Type", ct}
			if ct == "" { // no type from a browser (fetch with a Blob body)
				hdr = []string{"Origin", ts.URL, "Sec-Fetch-Site", "same-origin"}
			}
			r := send(t, "POST", ts.URL+p, goodBody, hdr...)
			if r.status != http.StatusUnsupportedMediaType {
				t.Fatalf("%s with %q: %d %s", p, hdr, r.status, r.body)
			}
			if _, msg := errorCode(t, p == waiPath, r); !strings.Contains(msg, "application/json") {
				t.Errorf("415 message %q does not name application/json", msg)
			}
		}
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8", "application/vnd.api+json"} {
		if r := send(t, "POST", ts.URL+soPath, goodBody, "Content-Type", ct); r.status != 200 {
			t.Errorf("%q: %d %s", ct, r.status, r.body)
		}
	}
	// No content type and no browser signal: curl -T, the Go client, scripts.
	if r := send(t, "POST", ts.URL+soPath, goodBody); r.status != 200 {
		t.Errorf("no content type: %d %s", r.status, r.body)
	}
	if r := send(t, "POST", ts.URL+soPath, goodBody, "Sec-Fetch-Site", "none"); r.status != 200 {
		t.Errorf("user-typed request (Sec-Fetch-Site none): %d %s", r.status, r.body)
	}
}

// Defect 2 (CSRF): a request carrying an Origin other than the daemon's own
// is 403 on every route, and no route sends CORS headers by default.
func TestForeignOriginRefused(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	_, port, _ := net.SplitHostPort(hostOf(ts))
	for _, origin := range []string{"https://evil.example", "null", "http://localhost:3000", "http://127.0.0.1:" + port + ".evil.example",
		"http://127.0.0.1", "file://", "http://[::1]:1"} {
		for _, c := range []struct {
			method, path string
			wai          bool
		}{{"POST", soPath, false}, {"POST", waiPath, true}, {"GET", status.Path, false}, {"GET", "/health", false}, {"POST", status.ShutdownPath, false}} {
			r := send(t, c.method, ts.URL+c.path, goodBody, "Origin", origin, "Content-Type", "application/json")
			if r.status != http.StatusForbidden {
				t.Fatalf("Origin %s on %s: %d %s", origin, c.path, r.status, r.body)
			}
			errorCode(t, c.wai, r)
			noCORS(t, "Origin "+origin, r.header)
		}
		// A preflight gets nothing that would let the browser go on.
		r := send(t, "OPTIONS", ts.URL+soPath, "", "Origin", origin, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type")
		if r.status/100 == 2 {
			t.Errorf("preflight from %s: %d", origin, r.status)
		}
		noCORS(t, "preflight from "+origin, r.header)
	}
	for _, origin := range []string{ts.URL, "http://localhost:" + port} {
		if r := send(t, "POST", ts.URL+soPath, goodBody, "Origin", origin, "Content-Type", "application/json", "Host", strings.TrimPrefix(origin, "http://")); r.status != 200 {
			t.Errorf("same origin %s: %d %s", origin, r.status, r.body)
		}
	}
	r := send(t, "POST", ts.URL+soPath, goodBody)
	noCORS(t, "plain request", r.header)
}

// With --cors-origin, those origins (and only those) get CORS headers and a
// proper preflight; others stay refused.
func TestCORSConfigured(t *testing.T) {
	f := newFake()
	const app = "http://app.example:3000"
	_, ts := startServer(t, Config{Load: f.loader(nil), CORSOrigins: []string{app, "https://ui.example/"}})
	r := send(t, "OPTIONS", ts.URL+waiPath, "", "Origin", app, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "Content-Type, Authorization")
	if r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(r.header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(strings.ToLower(r.header.Get("Access-Control-Allow-Headers")), "content-type") ||
		!strings.Contains(strings.ToLower(r.header.Get("Access-Control-Allow-Headers")), "authorization") ||
		r.header.Get("Access-Control-Max-Age") == "" || !strings.Contains(r.header.Get("Vary"), "Origin") {
		t.Fatalf("preflight: %d %v", r.status, r.header)
	}
	if r.header.Get("Access-Control-Allow-Credentials") != "" {
		t.Error("credentials allowed")
	}
	r = send(t, "OPTIONS", ts.URL+waiPath, "", "Origin", app, "Access-Control-Request-Method", "DELETE")
	if r.status != http.StatusForbidden || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight for DELETE: %d %v", r.status, r.header)
	}
	r = send(t, "OPTIONS", ts.URL+waiPath, "", "Origin", app, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "x-evil")
	if r.status != http.StatusForbidden || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight for an unknown header: %d %v", r.status, r.header)
	}
	r = send(t, "POST", ts.URL+waiPath, goodBody, "Origin", app, "Content-Type", "application/json")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != app || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "cf-ai-req-id") {
		t.Errorf("CORS request: %d %v", r.status, r.header)
	}
	r = send(t, "GET", ts.URL+"/v1/models", "", "Origin", "https://ui.example")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "https://ui.example" {
		t.Errorf("second origin: %d %v", r.status, r.header)
	}
	// Still JSON only: a configured origin cannot post text/plain either.
	if r := send(t, "POST", ts.URL+soPath, goodBody, "Origin", app, "Content-Type", "text/plain"); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain from a CORS origin: %d", r.status)
	}
	// Without a token, shutdown stays same-origin only, CORS or not.
	if r := send(t, "POST", ts.URL+status.ShutdownPath, "", "Origin", app, "Content-Type", "application/json"); r.status != http.StatusForbidden {
		t.Errorf("shutdown from a CORS origin without a token: %d %s", r.status, r.body)
	}
	r = send(t, "POST", ts.URL+soPath, goodBody, "Origin", "http://other.example", "Content-Type", "application/json")
	if r.status != http.StatusForbidden {
		t.Errorf("other origin: %d", r.status)
	}
	noCORS(t, "other origin", r.header)
	for _, bad := range [][]string{{"*"}, {"app.example"}, {"http://app.example/path"}, {"ftp://x"}} {
		if _, err := New(Config{Load: f.loader(nil), CORSOrigins: bad}); err == nil {
			t.Errorf("CORS origin %q accepted", bad)
		}
	}
	if _, err := New(Config{Load: f.loader(nil), AllowHosts: []string{"http://x/"}}); err == nil {
		t.Error("allow-host URL accepted")
	}
}

// Defect 2: a browser page cannot shut the tokenless daemon down (the
// issue's text/plain POST, and fetch metadata without an Origin); with a
// token, shutdown needs it.
func TestShutdownCSRF(t *testing.T) {
	f := newFake()
	s, ts := startServer(t, Config{Load: f.loader(nil)})
	for _, hdr := range [][]string{
		{"Content-Type", "text/plain", "Origin", "https://evil.example"},
		{"Content-Type", "text/plain"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "null"},
		{"Content-Type", "application/x-www-form-urlencoded"},
	} {
		r := send(t, "POST", ts.URL+status.ShutdownPath, "bye", hdr...)
		if r.status != http.StatusForbidden && r.status != http.StatusUnsupportedMediaType {
			t.Errorf("shutdown with %q: %d %s", hdr, r.status, r.body)
		}
	}
	select {
	case <-s.ShutdownRequested():
		t.Fatal("a cross-site request shut the daemon down")
	default:
	}
	if r := send(t, "POST", ts.URL+status.ShutdownPath, "", "Sec-Fetch-Site", "same-origin", "Origin", ts.URL); r.status != 202 {
		t.Fatalf("same-origin shutdown: %d %s", r.status, r.body)
	}
	<-s.ShutdownRequested()

	f2 := newFake()
	s2, ts2 := startServer(t, Config{Load: f2.loader(nil), Token: "tk"})
	if r := send(t, "POST", ts2.URL+status.ShutdownPath, ""); r.status != 401 {
		t.Errorf("shutdown without the token: %d", r.status)
	}
	if r := send(t, "POST", ts2.URL+status.ShutdownPath, "", "Authorization", "Bearer tk", "Origin", "https://evil.example"); r.status != 403 {
		t.Errorf("shutdown with the token from a foreign origin: %d", r.status)
	}
	select {
	case <-s2.ShutdownRequested():
		t.Fatal("shut down without the token")
	default:
	}
	if r := send(t, "POST", ts2.URL+status.ShutdownPath, "", "Authorization", "Bearer tk"); r.status != 202 {
		t.Errorf("shutdown with the token: %d %s", r.status, r.body)
	}
}

// The clients that exist keep working: the menu bar's and clef ps's client
// (Go, no Origin, no content type, shutdown with an empty body), with and
// without a token, at 127.0.0.1 and at localhost.
func TestMenubarClientAgainstDaemon(t *testing.T) {
	for _, token := range []string{"", "tk"} {
		f := newFake()
		s, ts := startServer(t, Config{Load: f.loader(nil), Token: token})
		_, port, _ := net.SplitHostPort(hostOf(ts))
		ctx := context.Background()
		for _, addr := range []string{hostOf(ts), "localhost:" + port, ts.URL} {
			ps, err := menubar.NewClient(addr, token).PS(ctx)
			if err != nil || len(ps.Models) != 1 || ps.Models[0].State != status.StateReady {
				t.Fatalf("token %q addr %s: %v %+v", token, addr, err, ps)
			}
		}
		if err := menubar.NewClient("localhost:"+port, token).Shutdown(ctx); err != nil {
			t.Fatalf("shutdown (token %q): %v", token, err)
		}
		<-s.ShutdownRequested()
	}
}

// rawExchange writes req on a new loopback connection and returns all the
// server sends back until it closes or goes quiet for wait.
func rawExchange(t testing.TB, addr, req string, closeWrite bool, wait time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	var out strings.Builder
	buf := make([]byte, 4096)
	for {
		c.SetReadDeadline(time.Now().Add(wait))
		n, err := c.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.String()
		}
	}
}

// Defect 3: a body past the limit is refused on its Content-Length, before
// any byte of it is read, so Expect: 100-continue gets the 413 and never a
// 100 Continue (raw TCP on 127.0.0.1). On the Workers AI routes the hosted
// limit applies (defect 7).
func TestExpectContinueHugeBody(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	for _, c := range []struct {
		path   string
		length int64
		code   string
	}{{soPath, 100 << 20, `"code":5021`}, {waiPath, 100 << 20, `"code":5021`}, {acctWAI, api.MaxBodyBytes + api.MaxMediaBodyBytes + 1, `"code":5021`}} {
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", c.path, hostOf(ts), c.length)
		got := rawExchange(t, hostOf(ts), req, false, 2*time.Second)
		if strings.Contains(got, "100 Continue") {
			t.Fatalf("%s: 100 Continue sent for a body past the limit:\n%s", c.path, got)
		}
		if !strings.HasPrefix(got, "HTTP/1.1 413 ") || !strings.Contains(got, c.code) {
			t.Fatalf("%s: want 413 with %s, got:\n%s", c.path, c.code, got)
		}
	}
	// A body within the limits still gets its 100 Continue and an answer.
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n", soPath, hostOf(ts), len(goodBody))
	c, err := net.Dial("tcp", hostOf(ts))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, req)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 100 Continue") {
		t.Fatalf("small body: %q", line)
	}
	br.ReadString('\n')
	io.WriteString(c, goodBody)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("small body after 100 Continue: %v %v", err, resp)
	}
}

// Defect 3: a chunked body (no Content-Length) is read with a hard cap.
func TestChunkedBodyIsCapped(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil), MaxBodyBytes: 64 << 10})
	pad := strings.Repeat(" ", 100<<10)
	for _, p := range []string{soPath, waiPath} {
		req, _ := http.NewRequest("POST", ts.URL+p, io.MultiReader(strings.NewReader(goodBody), strings.NewReader(pad)))
		req.ContentLength = -1 // chunked
		r := do(t, req)
		if r.status != 413 {
			t.Fatalf("%s chunked past the limit: %d %s", p, r.status, r.body)
		}
		if code, msg := errorCode(t, p == waiPath, r); code != api.CodeTooLong || !strings.Contains(msg, "65536") {
			t.Errorf("%s: code %d %q", p, code, msg)
		}
	}
	req, _ := http.NewRequest("POST", ts.URL+soPath, io.MultiReader(strings.NewReader(goodBody), strings.NewReader(pad[:1000])))
	req.ContentLength = -1
	if r := do(t, req); r.status != 200 {
		t.Fatalf("chunked within the limit: %d %s", r.status, r.body)
	}
}

// Defect 3: 16 concurrent large posts allocate no more than the server-wide
// budget of body bytes: past it they are answered 503 with Retry-After
// without being read. Bodies are padded with white space so that what is
// measured is the body bytes, not their parsed form.
func TestBodyBudgetBoundsMemory(t *testing.T) {
	const (
		budget  = 12 << 20
		each    = 3 << 20
		clients = 16
	)
	f := newFake()
	s, ts := startServer(t, Config{Load: f.loader(nil), MaxBodyBytes: 4 << 20, BodyBudgetBytes: budget, QueueSize: clients})
	s.edge.budgetWait.Store(int64(50 * time.Millisecond))
	block := strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1)
	body := block[:len(block)-1] + strings.Repeat(" ", each-len(block)) + "}"
	// Expect: 100-continue, so that a refused body is never sent at all.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: clients, DisableKeepAlives: true, ExpectContinueTimeout: 10 * time.Second}}
	defer client.CloseIdleConnections()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	type answer struct {
		status     int
		retryAfter string
	}
	answers := make(chan answer, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", ts.URL+soPath, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Expect", "100-continue")
			resp, err := client.Do(req)
			if err != nil {
				answers <- answer{status: -1, retryAfter: err.Error()}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	// The admitted requests hold their bodies while the first one blocks
	// the worker; the others are refused.
	<-f.started
	got := map[int]int{}
	record := func(a answer) {
		got[a.status]++
		if a.status == 503 && a.retryAfter == "" {
			t.Error("503 without Retry-After")
		}
		if a.status < 0 {
			t.Errorf("post failed: %s", a.retryAfter)
		}
	}
	// Every post is either refused or admitted, holding its share of the
	// budget (running, queued behind the blocked one, or being prepared).
	admitted := func() int { return int(s.edge.budget.inUse() / each) }
	deadline := time.After(10 * time.Second)
	for got[503]+got[-1]+admitted() < clients {
		select {
		case a := <-answers:
			record(a)
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			close(f.release)
			t.Fatalf("answers %v, %d bodies admitted, %d queued", got, admitted(), s.depth.Load())
		}
	}
	// Let the admitted ones finish reading and reach the queue (one runs).
	for settle := time.Now().Add(3 * time.Second); 1+int(s.depth.Load()) < admitted() && time.Now().Before(settle); {
		time.Sleep(5 * time.Millisecond)
	}
	runtime.ReadMemStats(&after)
	close(f.release)
	wg.Wait()
	close(answers)
	for a := range answers {
		record(a)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("answers %v; %.1f MiB allocated while %d posts of %d MiB were in flight (budget %d MiB)",
		got, float64(alloc)/(1<<20), clients, each>>20, budget>>20)
	if got[503] == 0 || got[200] == 0 || got[200]+got[503] != clients {
		t.Errorf("answers %v: want some 200 within the budget and 503 for the rest", got)
	}
	// The bodies themselves are at most the budget; the rest is net/http's
	// buffers for 16 connections.
	if alloc > budget+3<<20 {
		t.Errorf("%.1f MiB allocated for bodies, budget %d MiB", float64(alloc)/(1<<20), budget>>20)
	}
	if n := s.edge.budget.inUse(); n != 0 {
		t.Errorf("%d bytes of budget still held", n)
	}
}

// Defect 6: a client that half-closes its side after sending the request
// (CloseWrite) gets a full answer or a closed connection, never a 200 with
// an empty body.
func TestHalfClosedClient(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	for _, state := range []string{"block", "s"} {
		b := strings.Replace(goodBody, `"state":"s"`, `"state":"`+state+`"`, 1)
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", soPath, hostOf(ts), len(b), b)
		got := rawExchange(t, hostOf(ts), req, true, 5*time.Second)
		if got == "" {
			continue // closed without an answer: fine
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
		if err != nil {
			t.Fatalf("state %s: unreadable answer %q: %v", state, got, err)
		}
		data, err := io.ReadAll(resp.Body)
		if err != nil || (resp.StatusCode == 200 && !strings.Contains(string(data), `"answers"`)) {
			t.Fatalf("state %s: %d with body %q (%v)\n%s", state, resp.StatusCode, data, err, got)
		}
		if resp.ContentLength >= 0 && int64(len(data)) != resp.ContentLength {
			t.Fatalf("state %s: short body", state)
		}
	}
}

// Defect 7: the hosted body-size rule (about 524,288 bytes → 413, code
// 5021) applies on every Workers AI route, and on /v1/systemone under
// Strict; a long state within it is still answered (truncated).
func TestHostedBodySizeRule(t *testing.T) {
	mk := func(n int) string {
		pre := `{"model":"clef-omni","state":"`
		post := `","questions":{"q":{"type":"noul","instructions":"x"}}}`
		return pre + strings.Repeat("x", n-len(pre)-len(post)) + post
	}
	over, at := mk(api.MaxBodyBytes+1), mk(api.MaxBodyBytes)
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	for _, p := range []string{waiPath, acctWAI, "/v1/acct/gw/workers-ai/@cf/cloudflare/clef-omni"} {
		r := post(t, ts.URL+p, over)
		if r.status != 413 {
			t.Fatalf("%s past the hosted limit: %d %s", p, r.status, r.body[:min(len(r.body), 300)])
		}
		if code, msg := errorCode(t, true, r); code != api.CodeTooLong || !strings.Contains(msg, "131072") {
			t.Errorf("%s: code %d %q", p, code, msg)
		}
		// chunked too
		req, _ := http.NewRequest("POST", ts.URL+p, io.MultiReader(strings.NewReader(over)))
		req.ContentLength = -1
		if r := do(t, req); r.status != 413 || !strings.Contains(string(r.body), `"code":5021`) {
			t.Errorf("%s chunked past the hosted limit: %d %s", p, r.status, r.body)
		}
		if r := post(t, ts.URL+p, at); r.status != 200 {
			t.Errorf("%s at the hosted limit: %d", p, r.status)
		}
	}
	if r := post(t, ts.URL+soPath, over); r.status != 200 {
		t.Errorf("systemone without strict: %d", r.status)
	}
	f2 := newFake()
	_, strict := startServer(t, Config{Load: f2.loader(nil), Strict: true})
	r := post(t, strict.URL+soPath, over)
	if r.status != 413 {
		t.Fatalf("systemone under strict: %d", r.status)
	}
	if code, msg := errorCode(t, false, r); code != api.CodeTooLong || !strings.Contains(msg, "131072") {
		t.Errorf("systemone under strict: code %d %q", code, msg)
	}
	if r := post(t, strict.URL+soPath, at); r.status != 200 {
		t.Errorf("systemone under strict at the limit: %d %s", r.status, r.body)
	}
	// Strict applies the hosted checks on /v1/systemone too.
	if r := post(t, strict.URL+soPath, `{"model":"clef-omni","state":1,"questions":{"a b":{"type":"noul","instructions":"x"}}}`); r.status != 422 {
		t.Errorf("systemone under strict, bad id: %d %s", r.status, r.body)
	}
	// Media are not text: a body past the limit only by its media is read
	// and answered; its text alone past the limit is a 413.
	media := func(body string, n int) string {
		return strings.TrimSuffix(body, "}") + `,"images":["data:image/png;base64,` + strings.Repeat("A", n) + `"]}`
	}
	for _, p := range []string{waiPath, acctWAI} {
		if r := post(t, ts.URL+p, media(mk(api.MaxBodyBytes-100), 4<<20)); r.status != 200 {
			t.Errorf("%s: 4 MiB of image beside text near the limit: %d %s", p, r.status, r.body[:min(len(r.body), 300)])
		}
		r := post(t, ts.URL+p, media(over, 1000))
		if code, msg := errorCode(t, true, r); r.status != 413 || code != api.CodeTooLong || !strings.Contains(msg, "bytes of text") {
			t.Errorf("%s: text past the limit beside an image: %d %d %q", p, r.status, code, msg)
		}
	}
}

// Defect 10: /v1/ps percentiles include the requests that timed out, at
// their elapsed time.
func TestPSPercentilesIncludeTimeouts(t *testing.T) {
	f := newFake()
	const timeout = 150 * time.Millisecond
	s, ts := startServer(t, Config{Load: f.loader(nil), RequestTimeout: timeout})
	for i := 0; i < 2; i++ {
		if r := post(t, ts.URL+soPath, goodBody); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	block := strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1)
	for i := 0; i < 3; i++ {
		if r := post(t, ts.URL+soPath, block); r.status != 504 {
			t.Fatalf("timeout: %d %s", r.status, r.body)
		}
	}
	ps := s.PS()
	m := ps.Models[0]
	if m.P99MS < float64(timeout.Milliseconds()) || m.P50MS < float64(timeout.Milliseconds()) {
		t.Errorf("p50 %.1f ms, p99 %.1f ms: the 3 timed-out requests of 5 (%v) are not counted", m.P50MS, m.P99MS, timeout)
	}
	// /metrics says the same through the request histogram.
	mt := string(get(t, ts.URL+"/metrics").body)
	if !strings.Contains(mt, `clef_requests_total{route="systemone",code="504"} 3`) {
		t.Errorf("504s not counted:\n%s", mt)
	}
}
