package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hugeBody is a decision whose state fills the tiny model's whole token
// budget (64,000 tokens: minutes of compute on the CPU backend).
func hugeBody() string {
	return `{"model":"clef-omni","state":"` + strings.Repeat("hello world foo bar ", 256<<10/20) +
		`","questions":{"q":{"type":"noul","instructions":"x"}}}`
}

// A decision past its deadline stops within a chunk of work: the worker is
// free for the next request at once (it was held for minutes: a 256 KB
// state with a 5 s timeout made the next 43 good requests 504), the log
// says how long the engine ran the cancelled work, and a record that the
// engine's measured speed says cannot finish is refused at once with 413
// and the estimate instead of being run into its deadline.
func TestCancelledDecisionFreesTheWorker(t *testing.T) {
	var logs syncBuffer
	s, base := tinyServer(t, Config{RequestTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if r := post(t, base+soPath, hugeBody()); r.status != http.StatusGatewayTimeout {
		t.Fatalf("huge record: %d %s", r.status, r.body)
	}
	// The next good requests are answered: the worker dropped the huge one.
	for i := 0; i < 3; i++ {
		if r := post(t, base+soPath, goodBody); r.status != 200 {
			t.Fatalf("good request %d after a timed-out one: %d %s", i, r.status, r.body)
		}
	}
	if b := s.busy.Load(); b != nil {
		t.Errorf("worker still busy with %s", b.id)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "decision cancelled") })
	line := logs.String()[strings.Index(logs.String(), "decision cancelled"):]
	line = line[:strings.IndexByte(line, '\n')]
	for _, want := range []string{"why=deadline", "engine_ms=", "after_cancel_ms="} {
		if !strings.Contains(line, want) {
			t.Errorf("cancelled work logged without %s: %s", want, line)
		}
	}
	// The engine measured that it cannot do this record in time: the
	// next one is refused before it takes the worker.
	r := post(t, base+soPath, hugeBody())
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(string(r.body), "measured speed") || !strings.Contains(string(r.body), "64000 tokens") {
		t.Fatalf("huge record after the engine measured it: %d %s", r.status, r.body)
	}
	t.Logf("refused: %s\n%s", r.body, line)
	if r := post(t, base+soPath, goodBody); r.status != 200 {
		t.Fatalf("good request after a refusal: %d", r.status)
	}
}

// stubborn is a model that ignores its context on the state "stubborn"
// until released: a worker stuck past its deadline.
type stubborn struct {
	*fakeModel
	started chan struct{}
	release chan struct{}
}

func (m *stubborn) Decide(ctx context.Context, req *api.Request) (*Decision, error) {
	if req.State != nil && req.State.Kind == pyjson.String && req.State.Str == "stubborn" {
		m.started <- struct{}{}
		<-m.release
	}
	return m.fakeModel.Decide(ctx, req)
}

// /health reports a worker still running a decision whose deadline passed:
// 503 "degraded" with how long, until the worker is free again.
func TestHealthReportsStuckWorker(t *testing.T) {
	m := &stubborn{fakeModel: newFake(), started: make(chan struct{}, 1), release: make(chan struct{})}
	s, ts := startServer(t, Config{RequestTimeout: 50 * time.Millisecond, Load: func(context.Context, *Prefixes) (Model, error) { return m, nil }})
	s.stuckAfter = 10 * time.Millisecond
	got := make(chan result, 1)
	go func() {
		got <- post(t, ts.URL+soPath, strings.Replace(goodBody, `"state":"s"`, `"state":"stubborn"`, 1))
	}()
	<-m.started
	if r := <-got; r.status != http.StatusGatewayTimeout {
		t.Fatalf("stuck decision: %d %s", r.status, r.body)
	}
	var h struct {
		Status string  `json:"status"`
		Stuck  float64 `json:"stuck_seconds"`
	}
	waitFor(t, func() bool {
		r := get(t, ts.URL+"/health")
		json.Unmarshal(r.body, &h)
		return r.status == http.StatusServiceUnavailable && h.Status == "degraded" && r.header.Get("Retry-After") != ""
	})
	waitFor(t, func() bool {
		json.Unmarshal(get(t, ts.URL+"/health").body, &h)
		return h.Stuck > 0
	})
	close(m.release)
	waitFor(t, func() bool { return get(t, ts.URL+"/health").status == 200 })
}

// /health without the token says whether to send work, not which model is
// loaded from where or why a load failed; with the token it says it all.
func TestHealthHidesDetailsWithoutToken(t *testing.T) {
	f := newFake()
	fail := true
	var mu sync.Mutex
	s, err := New(Config{Logger: quietLogger(), Token: "s3cret", ModelName: "secret-model", ModelPath: "/home/someone/models/x",
		Load: func(ctx context.Context, c *Prefixes) (Model, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return nil, &net.OpError{Op: "open", Err: errorString("/home/someone/models/x/config.json: permission denied")}
			}
			return f.loader(nil)(ctx, c)
		}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	ts := newTestServer(t, s)
	waitFor(t, func() bool { return strings.Contains(string(get(t, ts+"/health").body), "failed") })
	r := get(t, ts+"/health")
	if r.status != 503 || strings.Contains(string(r.body), "/home/someone") || strings.Contains(string(r.body), "secret-model") {
		t.Fatalf("health without the token shows details: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest(http.MethodGet, ts+"/health", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if r := do(t, req); !strings.Contains(string(r.body), "permission denied") || !strings.Contains(string(r.body), "secret-model") {
		t.Fatalf("health with the token hides the details: %d %s", r.status, r.body)
	}
	wrong, _ := http.NewRequest(http.MethodGet, ts+"/health", nil)
	wrong.Header.Set("Authorization", "Bearer nope")
	if r := do(t, wrong); strings.Contains(string(r.body), "permission denied") {
		t.Fatalf("health with a wrong token shows the details: %s", r.body)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// newTestServer serves s on loopback until the test ends.
func newTestServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}

// Shutdown answers every admitted request: the queued ones 503 with
// Retry-After at once, the one in flight 503 once the shutdown timeout
// cancels it; then it returns nil (clef serve exits 0). It used to leave
// them without an answer and fail.
func TestShutdownAnswersQueuedAndInFlight(t *testing.T) {
	f := newFake()
	s, err := New(Config{Logger: quietLogger(), Load: f.loader(nil), MaxBatch: 1, RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	waitReady(t, base)
	block := strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1)
	inFlight := make(chan result, 1)
	go func() { inFlight <- post(t, base+soPath, block) }()
	<-f.started
	const queued = 3
	answers := make(chan result, queued)
	for i := 0; i < queued; i++ {
		go func() { answers <- post(t, base+soPath, goodBody) }()
	}
	waitFor(t, func() bool { return s.depth.Load() == queued })

	ctx, timeout := context.WithCancel(context.Background())
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	// The queued requests are answered while the decision in flight runs.
	for i := 0; i < queued; i++ {
		select {
		case r := <-answers:
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
				t.Errorf("queued request at shutdown: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a queued request got no answer at shutdown")
		}
	}
	select {
	case r := <-inFlight:
		t.Fatalf("the decision in flight was answered before the shutdown timeout: %d", r.status)
	case err := <-shut:
		t.Fatalf("Shutdown returned before its timeout with a decision in flight: %v", err)
	default:
	}
	timeout() // the shutdown timeout runs out
	r := <-inFlight
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("in-flight decision at the shutdown timeout: %d %s", r.status, r.body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !f.sawCancel.Load() {
		t.Error("the decision in flight was not cancelled")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if !f.closed.Load() {
		t.Error("model not closed")
	}
}
