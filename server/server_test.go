package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/server/status"
)

const (
	soPath  = "/v1/systemone"
	waiPath = "/ai/run/@cf/cloudflare/clef-omni"
	acctWAI = "/client/v4/accounts/0123abcd/ai/run/@cf/cloudflare/clef-omni"
)

const goodBody = `{"model":"clef-omni","state":"s","questions":{"is_spam":{"type":"noul","instructions":"Spam?"},` +
	`"topic":{"type":"choice","instructions":"Topic?","criteria":{"refund":"money back","billing":"invoices","other":null}},` +
	`"tone":{"type":"score","instructions":"Tone?","criteria":["bad","ok",{"level":"good"}]}}}`

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer runs a server over httptest and waits until it is ready.
func startServer(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	waitReady(t, ts.URL)
	return s, ts
}

func waitReady(t testing.TB, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("server never became ready")
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func post(t testing.TB, url, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

func do(t testing.TB, req *http.Request) result {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, b}
}

func get(t testing.TB, url string) result {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return do(t, req)
}

// checkWorkersAIResponse checks a Workers AI answer: the envelope, and on
// success a result that validates against the published output schema.
func checkWorkersAIResponse(t testing.TB, out schema, r result) {
	t.Helper()
	var env struct {
		Result  json.RawMessage `json:"result"`
		Success *bool           `json:"success"`
		Errors  []struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
		Messages []any `json:"messages"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Success == nil || env.Errors == nil || env.Messages == nil {
		t.Fatalf("not a Workers AI envelope (%v): %s", err, r.body)
	}
	if *env.Success != (r.status == http.StatusOK) {
		t.Fatalf("success=%v with status %d: %s", *env.Success, r.status, r.body)
	}
	if !*env.Success {
		if len(env.Errors) == 0 || env.Errors[0].Code == 0 || env.Errors[0].Message == "" || string(env.Result) != "null" {
			t.Fatalf("failure envelope without a coded error: %s", r.body)
		}
		return
	}
	v, err := decodeJSON(env.Result)
	if err != nil {
		t.Fatalf("result: %v", err)
	}
	if msg := validate(out, v, ""); msg != "" {
		t.Fatalf("result does not validate against the output schema: %s\n%s", msg, env.Result)
	}
}

func TestRoutesAnswer(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	_, out := workersAISchemas(t)

	r := post(t, ts.URL+soPath, goodBody)
	if r.status != http.StatusOK {
		t.Fatalf("systemone: %d %s", r.status, r.body)
	}
	var so map[string]any
	if err := json.Unmarshal(r.body, &so); err != nil || so["model"] != "clef-omni" || so["answers"] == nil {
		t.Fatalf("systemone body: %s", r.body)
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id")
	}
	for _, p := range []string{waiPath, acctWAI, "/v1/acct/gw/workers-ai/@cf/cloudflare/clef-omni"} {
		r := post(t, ts.URL+p, goodBody, "Authorization", "Bearer cloudflare-token-ignored-without---token")
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
		checkWorkersAIResponse(t, out, r)
		if r.header.Get("cf-ai-req-id") == "" {
			t.Error("no cf-ai-req-id")
		}
		// The result is the SystemOne body, byte for byte.
		want := post(t, ts.URL+soPath, goodBody).body
		if !bytes.Contains(r.body, bytes.TrimSpace(want)) {
			t.Errorf("Workers AI result differs from the SystemOne body:\n%s\n%s", r.body, want)
		}
	}
	m := get(t, ts.URL+"/v1/models")
	if m.status != 200 || !strings.Contains(string(m.body), `"id":"clef-omni"`) || !strings.Contains(string(m.body), `"object":"list"`) {
		t.Errorf("/v1/models: %d %s", m.status, m.body)
	}
	h := get(t, ts.URL+"/health")
	if h.status != 200 || !strings.Contains(string(h.body), `"status":"ok"`) {
		t.Errorf("/health: %d %s", h.status, h.body)
	}
	var ps status.PS
	p := get(t, ts.URL+status.Path)
	if err := json.Unmarshal(p.body, &ps); err != nil || len(ps.Models) != 1 || ps.Models[0].Requests < 6 || ps.Models[0].State != status.StateReady {
		t.Errorf("/v1/ps: %s", p.body)
	}
	mt := get(t, ts.URL+"/metrics")
	for _, want := range []string{
		`clef_requests_total{route="systemone",code="200"}`,
		`clef_requests_total{route="workers_ai",code="200"} 3`,
		`clef_request_duration_seconds_bucket{route="systemone",le="+Inf"}`,
		"clef_input_tokens_total ", "clef_queue_depth 0", "clef_batch_size_count ", "clef_resident_bytes ",
		"clef_model_loaded 1", "clef_prefix_cache_max_bytes 0",
	} {
		if !strings.Contains(string(mt.body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if ct := mt.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("/metrics content type %q", ct)
	}
	checkPrometheusText(t, string(mt.body))
}

// Every malformed request gets its status, its Workers AI code and a
// message naming what is wrong; none reaches the model.
func TestMalformedRequests(t *testing.T) {
	f := newFake()
	s, ts := startServer(t, Config{Load: f.loader(nil), MaxBodyBytes: 4096})
	_, out := workersAISchemas(t)
	f.mu.Lock()
	callsBefore := f.calls
	f.mu.Unlock()
	q := `"questions":{"q":{"type":"noul","instructions":"ok?"}}`
	cases := []struct {
		name, path, method, body string
		status, code             int
		msg                      string
	}{
		{"not json", soPath, "POST", `{"model":`, 400, 6003, "not valid JSON"},
		{"not json wai", waiPath, "POST", `nope`, 400, 6003, "not valid JSON"},
		{"array body", soPath, "POST", `[1,2]`, 400, 6003, "JSON object"},
		{"empty body", soPath, "POST", ``, 400, 6003, "JSON"},
		{"no state", soPath, "POST", `{"model":"m",` + q + `}`, 422, 5012, "model and state are required"},
		{"model not string", soPath, "POST", `{"model":3,"state":1,` + q + `}`, 422, 5012, "model and state are required"},
		{"no questions", soPath, "POST", `{"model":"m","state":1}`, 400, 5006, "at least one question"},
		{"empty questions", soPath, "POST", `{"model":"m","state":1,"questions":{}}`, 400, 5006, "at least one question"},
		{"bad type", soPath, "POST", `{"model":"m","state":1,"questions":{"q":{"type":"yesno","instructions":"x"}}}`, 400, 5006, "type must be noul, choice, or score"},
		{"empty criteria", soPath, "POST", `{"model":"m","state":1,"questions":{"q":{"type":"choice","instructions":"x","criteria":{}}}}`, 422, 5012, "criteria must not be empty"},
		{"three videos", waiPath, "POST", `{"model":"clef-omni","state":1,` + q + `,"videos":["data:video/mp4;base64,AAAA","data:video/mp4;base64,AAAA","data:video/mp4;base64,AAAA"]}`, 422, 5012, "videos: at most 2 items, got 3"},
		{"video not a video url", waiPath, "POST", `{"model":"clef-omni","state":1,` + q + `,"videos":["data:image/png;base64,AAAA"]}`, 422, 5012, "videos[0]: must be a data:video/"},
		{"video wrong content type", waiPath, "POST", `{"model":"clef-omni","state":1,` + q + `,"videos":[{"content_type":"audio/wav","base64":"AAAA"}]}`, 422, 5012, "videos[0].content_type: must be video/*"},
		{"remote image url", waiPath, "POST", `{"model":"clef-omni","state":1,` + q + `,"images":["https://example.com/a.png"]}`, 422, 5012, "remote URLs are not accepted"},
		{"five images", waiPath, "POST", `{"model":"clef-omni","state":1,` + q + `,"images":["data:,","data:,","data:,","data:,","data:,"]}`, 422, 5012, "images"},
		{"wai wrong model", waiPath, "POST", `{"model":"clef-flash","state":1,` + q + `}`, 422, 5012, `model: must be "clef-omni"`},
		{"wai missing model", acctWAI, "POST", `{"state":1,` + q + `}`, 422, 5012, "model: required"},
		{"wai 65 questions", waiPath, "POST", manyQuestions(65), 422, 5012, "at most 64 questions"},
		{"wai bad id", waiPath, "POST", `{"model":"clef-omni","state":1,"questions":{"a b":{"type":"noul","instructions":"x"}}}`, 422, 5012, `id "a b"`},
		{"wai empty instructions", waiPath, "POST", `{"model":"clef-omni","state":1,"questions":{"q":{"type":"noul","instructions":""}}}`, 422, 5012, "instructions: must not be empty"},
		{"wai 11 levels", waiPath, "POST", `{"model":"clef-omni","state":1,"questions":{"q":{"type":"score","instructions":"x","criteria":[1,2,3,4,5,6,7,8,9,10,11]}}}`, 422, 5012, "2 to 10 levels"},
		{"wai other model route", "/ai/run/@cf/cloudflare/clef-flash", "POST", goodBody, 400, 7000, "No route for that URI"},
		{"wai unknown path", "/client/v4/accounts/x/ai/models", "POST", goodBody, 400, 7000, "No route for that URI"},
		{"unknown path", "/v2/decide", "POST", goodBody, 404, 7000, "no route for /v2/decide"},
		{"get systemone", soPath, "GET", ``, 405, 7000, "GET is not allowed here; use POST"},
		{"body too large", soPath, "POST", `{"model":"m","state":"` + strings.Repeat("x", 5000) + `",` + q + `}`, 413, 5021, "larger than 4096 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
			r := do(t, req)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			wai := strings.HasPrefix(c.path, "/ai/") || strings.HasPrefix(c.path, "/client/v4/")
			var code int
			var msg string
			if wai {
				checkWorkersAIResponse(t, out, r)
				var env struct {
					Errors []struct {
						Code    int
						Message string
					}
				}
				json.Unmarshal(r.body, &env)
				code, msg = env.Errors[0].Code, env.Errors[0].Message
			} else {
				var e systemOneError
				if err := json.Unmarshal(r.body, &e); err != nil {
					t.Fatalf("error body: %v: %s", err, r.body)
				}
				code, msg = e.Error.Code, e.Error.Message
			}
			if code != c.code || !strings.Contains(msg, c.msg) {
				t.Errorf("code %d message %q, want %d containing %q", code, msg, c.code, c.msg)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != callsBefore {
		t.Errorf("%d malformed requests reached the model", f.calls-callsBefore)
	}
	if got := s.metrics.counts(); got != 0 {
		t.Errorf("%d decisions counted", got)
	}
}

// A member the published schema allows but the API does not use is answered
// on the Workers AI route (the schema accepts the request), and the envelope's
// messages name it: never silently ignored. --strict (ValidateHosted) still
// refuses it.
func TestWorkersAIUnknownFieldIsAnsweredAndReported(t *testing.T) {
	f := newFake()
	f.plain = true
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	body := `{"model":"clef-omni","state":1,"questions":{"q":{"type":"noul","instructions":"x","weight":2}},"temperature":0}`
	req, _ := http.NewRequest("POST", ts.URL+"/ai/run/@cf/cloudflare/clef-omni", strings.NewReader(body))
	r := do(t, req)
	if r.status != 200 {
		t.Fatalf("status %d, want 200: %s", r.status, r.body)
	}
	var env struct {
		Success  bool
		Messages []string
	}
	if err := json.Unmarshal(r.body, &env); err != nil || !env.Success {
		t.Fatalf("envelope: %v: %s", err, r.body)
	}
	want := []string{"temperature", "questions.q.weight"}
	if len(env.Messages) != len(want) {
		t.Fatalf("messages %q, want one per ignored field %q", env.Messages, want)
	}
	for i, w := range want {
		if !strings.Contains(env.Messages[i], "ignored unknown field "+w) {
			t.Errorf("message %d = %q, want it to name %q", i, env.Messages[i], w)
		}
	}
	rq, err := api.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := rq.ValidateHosted(); err == nil || !strings.Contains(err.Error(), "temperature: unknown field") {
		t.Errorf("strict hosted validation: %v, want the unknown field refused", err)
	}
}

// A long state is truncated, not refused, on both routes: the published
// schema says "Long text state is truncated to fit the model's token
// limit". On the Workers AI routes the hosted gateway's (body bytes)/4
// estimate still applies past 524,288 bytes (TestHostedBodySizeRule);
// /v1/systemone takes up to --max-body-bytes unless --strict.
func TestLongStateIsAnswered(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	big := `{"model":"clef-omni","state":"` + strings.Repeat("x", 500_000) + `","questions":{"q":{"type":"noul","instructions":"x"}}}`
	bigger := `{"model":"clef-omni","state":"` + strings.Repeat("x", 600_000) + `","questions":{"q":{"type":"noul","instructions":"x"}}}`
	for _, c := range []struct{ path, body string }{{waiPath, big}, {soPath, big}, {soPath, bigger}} {
		if r := post(t, ts.URL+c.path, c.body); r.status != 200 {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body[:min(len(r.body), 300)])
		}
	}
}

func manyQuestions(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"clef-omni","state":1,"questions":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"q` + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":{"type":"noul","instructions":"x"}`)
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestAuth(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil), Token: "s3cret"})
	if r := post(t, ts.URL+soPath, goodBody); r.status != 401 {
		t.Fatalf("no token: %d", r.status)
	}
	if r := post(t, ts.URL+waiPath, goodBody, "Authorization", "Bearer wrong"); r.status != 401 || !strings.Contains(string(r.body), "10000") {
		t.Fatalf("wrong token: %d %s", r.status, r.body)
	}
	if r := post(t, ts.URL+soPath, goodBody, "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("right token: %d %s", r.status, r.body)
	}
	if r := post(t, ts.URL+soPath, goodBody, "Authorization", "bearer s3cret"); r.status != 200 {
		t.Fatalf("lower-case scheme: %d", r.status)
	}
	if r := get(t, ts.URL+"/metrics"); r.status != 401 {
		t.Fatalf("metrics without token: %d", r.status)
	}
	if r := get(t, ts.URL+"/health"); r.status != 200 {
		t.Fatalf("health must not need the token: %d", r.status)
	}
}

// /health is 503 with the reason until the model is loaded and warmed up.
func TestHealthWhileLoading(t *testing.T) {
	f := newFake()
	gate := make(chan struct{})
	var warmed atomic.Bool
	cfg := Config{Logger: quietLogger(), Load: func(ctx context.Context, c *Prefixes) (Model, error) {
		<-gate
		return &warmupSpy{fakeModel: f, warmed: &warmed}, nil
	}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Shutdown(context.Background())
	r := get(t, ts.URL+"/health")
	if r.status != 503 || !strings.Contains(string(r.body), "model is loading") || r.header.Get("Retry-After") == "" {
		t.Fatalf("while loading: %d %s", r.status, r.body)
	}
	if r := post(t, ts.URL+soPath, goodBody); r.status != 503 || !strings.Contains(string(r.body), "loading") {
		t.Fatalf("decision while loading: %d %s", r.status, r.body)
	}
	if r := post(t, ts.URL+waiPath, goodBody); r.status != 503 || !strings.Contains(string(r.body), `"success":false`) {
		t.Fatalf("workers AI while loading: %d %s", r.status, r.body)
	}
	close(gate)
	waitReady(t, ts.URL)
	if !warmed.Load() {
		t.Fatal("ready before the warm-up decision ran")
	}
}

type warmupSpy struct {
	*fakeModel
	warmed *atomic.Bool
}

func (w *warmupSpy) Decide(ctx context.Context, req *api.Request) (*Decision, error) {
	w.warmed.Store(true)
	return w.fakeModel.Decide(ctx, req)
}

func TestLoadFailure(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	f := newFake()
	s, err := New(Config{Logger: quietLogger(), Load: func(ctx context.Context, c *Prefixes) (Model, error) {
		if fail.Load() {
			return nil, io.ErrUnexpectedEOF
		}
		return f.loader(nil)(ctx, c)
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.loadRetry = 100 * time.Millisecond
	s.Start()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Shutdown(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for s.PS().Models[0].State != status.StateFailed && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// /health says the load failed, not why (the error may hold paths):
	// that is for clef ps and the log.
	r := get(t, ts.URL+"/health")
	if r.status != 503 || !strings.Contains(string(r.body), `"status":"failed"`) || strings.Contains(string(r.body), "unexpected EOF") {
		t.Fatalf("health after failed load: %d %s", r.status, r.body)
	}
	if r := get(t, ts.URL+status.Path); !strings.Contains(string(r.body), "unexpected EOF") {
		t.Fatalf("ps after failed load does not say why: %s", r.body)
	}
	if r := post(t, ts.URL+soPath, goodBody); r.status != 503 || !strings.Contains(string(r.body), "failed to load") {
		t.Fatalf("decision after failed load: %d %s", r.status, r.body)
	}
	// Once the cause is gone, a request after the retry delay loads the model.
	fail.Store(false)
	time.Sleep(150 * time.Millisecond)
	if r := post(t, ts.URL+soPath, goodBody); r.status != 200 {
		t.Fatalf("decision after the retry delay: %d %s", r.status, r.body)
	}
	if r := get(t, ts.URL+"/health"); r.status != 200 {
		t.Fatalf("health after a successful retry: %d %s", r.status, r.body)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	f := newFake()
	s, ts := startServer(t, Config{Load: f.loader(nil)})
	r := post(t, ts.URL+soPath, strings.Replace(goodBody, `"state":"s"`, `"state":"panic"`, 1))
	id := r.header.Get("X-Request-Id")
	if r.status != 500 || id == "" || !strings.Contains(string(r.body), id) {
		t.Fatalf("panic: %d %s (id %s)", r.status, r.body, id)
	}
	if r := post(t, ts.URL+soPath, goodBody); r.status != 200 {
		t.Fatalf("after a panic: %d", r.status)
	}
	if !strings.Contains(string(get(t, ts.URL+"/metrics").body), "clef_panics_total 1") {
		t.Error("panic not counted")
	}
	_ = s
}

// A full queue answers 429 with Retry-After; one forward runs at a time.
func TestQueueFull(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil), QueueSize: 2, MaxBatch: 1})
	block := strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1)
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	wg.Add(1)
	go func() { defer wg.Done(); codes <- post(t, ts.URL+soPath, block).status }()
	<-f.started // the worker holds one; now fill the queue
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); codes <- post(t, ts.URL+soPath, goodBody).status }()
	}
	waitFor(t, func() bool { return strings.Contains(string(get(t, ts.URL+"/metrics").body), "clef_queue_depth 2") })
	r := post(t, ts.URL+waiPath, goodBody)
	if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "3040") {
		t.Fatalf("full queue: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	close(f.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("queued request got %d", c)
		}
	}
	if f.peak != 1 {
		t.Errorf("%d decisions ran at once", f.peak)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The request deadline reaches the model, which stops; the client gets 504.
func TestDeadlinePropagates(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil), RequestTimeout: 100 * time.Millisecond})
	r := post(t, ts.URL+soPath, strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1))
	if r.status != 504 {
		t.Fatalf("deadline: %d %s", r.status, r.body)
	}
	waitFor(t, f.sawCancel.Load)
	if r := post(t, ts.URL+soPath, goodBody); r.status != 200 {
		t.Fatalf("after a timeout: %d", r.status)
	}
}

// A client that goes away cancels its decision in the model.
func TestClientCancelPropagates(t *testing.T) {
	f := newFake()
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+soPath, strings.NewReader(strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1)))
	done := make(chan error, 1)
	go func() {
		_, err := http.DefaultClient.Do(req)
		done <- err
	}()
	<-f.started
	cancel()
	if err := <-done; err == nil {
		t.Fatal("request finished despite cancel")
	}
	waitFor(t, f.sawCancel.Load)
}

// Requests that arrive together run back to back in one scheduler turn.
func TestBatching(t *testing.T) {
	f := newFake()
	s, ts := startServer(t, Config{Load: f.loader(nil), MaxBatch: 8})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		post(t, ts.URL+soPath, strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1))
	}()
	<-f.started
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); post(t, ts.URL+soPath, goodBody) }()
	}
	waitFor(t, func() bool { return s.depth.Load() == 6 })
	close(f.release)
	wg.Wait()
	mt := string(get(t, ts.URL+"/metrics").body)
	if !strings.Contains(mt, `clef_batch_size_bucket{le="8"}`) || !strings.Contains(mt, "clef_batch_size_sum ") {
		t.Fatal(mt)
	}
	// The six queued requests went in one turn: batch sizes 1 (warm-up
	// turn not counted), 1 (the blocker) and 6.
	s.metrics.mu.Lock()
	sum := s.metrics.batchSizes.sum
	n := s.metrics.batchSizes.n
	s.metrics.mu.Unlock()
	if n != 2 || sum != 7 {
		t.Errorf("batches: %d turns, %v decisions; want 2 turns of 1 and 6", n, sum)
	}
}

// The model is unloaded after the idle timeout and reloaded on demand.
func TestIdleUnloadAndReload(t *testing.T) {
	f := newFake()
	var loads atomic.Int32
	s, ts := startServer(t, Config{Load: f.loader(&loads), IdleUnload: 50 * time.Millisecond})
	if r := post(t, ts.URL+soPath, goodBody); r.status != 200 {
		t.Fatal(r.status)
	}
	waitFor(t, func() bool { return s.PS().Models[0].State == status.StateUnloaded })
	if !f.closed.Load() {
		t.Fatal("model not closed on idle unload")
	}
	if r := get(t, ts.URL+"/health"); r.status != 503 || !strings.Contains(string(r.body), "idle") {
		t.Fatalf("health while unloaded: %d %s", r.status, r.body)
	}
	if r := post(t, ts.URL+soPath, goodBody); r.status != 200 {
		t.Fatalf("reload on demand: %d %s", r.status, r.body)
	}
	if loads.Load() != 2 {
		t.Fatalf("%d loads, want 2", loads.Load())
	}
	if ps := s.PS(); ps.Models[0].Loads != 2 || ps.Models[0].State != status.StateReady {
		t.Fatalf("ps after reload: %+v", ps.Models[0])
	}
}

// Shutdown lets the in-flight decision finish, then closes the model.
func TestGracefulShutdown(t *testing.T) {
	f := newFake()
	s, err := New(Config{Logger: quietLogger(), Load: f.loader(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	base := "http://" + ln.Addr().String()
	waitReady(t, base)
	got := make(chan result, 1)
	go func() { got <- post(t, base+soPath, strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1)) }()
	<-f.started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-shut:
		t.Fatal("Shutdown returned with a decision in flight")
	default:
	}
	close(f.release)
	if r := <-got; r.status != 200 {
		t.Fatalf("in-flight decision: %d %s", r.status, r.body)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if !f.closed.Load() {
		t.Fatal("model not closed")
	}
}

func TestShutdownRoute(t *testing.T) {
	f := newFake()
	s, ts := startServer(t, Config{Load: f.loader(nil)})
	if r := post(t, ts.URL+status.ShutdownPath, ""); r.status != 202 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	select {
	case <-s.ShutdownRequested():
	case <-time.After(time.Second):
		t.Fatal("shutdown not requested")
	}
}

var (
	promSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*",?)*\})? (-?[0-9.]+(e[-+]?[0-9]+)?|\+Inf|NaN)$`)
	promType   = regexp.MustCompile(`^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$`)
)

// checkPrometheusText checks the exposition format: every sample line is
// well formed and belongs to a family declared once with # TYPE.
func checkPrometheusText(t *testing.T, text string) {
	t.Helper()
	types := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		if m := promType.FindStringSubmatch(line); m != nil {
			if _, dup := types[m[1]]; dup {
				t.Errorf("family %s declared twice", m[1])
			}
			types[m[1]] = m[2]
			continue
		}
		m := promSample.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("malformed metrics line %q", line)
			continue
		}
		name := m[1]
		family := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base := strings.TrimSuffix(name, suf); base != name && types[base] == "histogram" {
				family = base
			}
		}
		if _, ok := types[family]; !ok {
			t.Errorf("sample %s has no # TYPE", name)
		}
	}
}

// batchFake answers together what arrives together.
type batchFake struct {
	*fakeModel
	mu      sync.Mutex
	batches []int
}

func (b *batchFake) DecideBatch(ctxs []context.Context, reqs []*api.Request) ([]*Decision, []error) {
	b.mu.Lock()
	b.batches = append(b.batches, len(reqs))
	b.mu.Unlock()
	decs := make([]*Decision, len(reqs))
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		decs[i], errs[i] = b.fakeModel.Decide(ctxs[i], r)
	}
	return decs, errs
}

// A model that packs records gets the requests that arrived together in one call.
func TestBatchModel(t *testing.T) {
	f := newFake()
	bf := &batchFake{fakeModel: f}
	_, ts := startServer(t, Config{MaxBatch: 8, Load: func(context.Context, *Prefixes) (Model, error) { return bf, nil }})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		post(t, ts.URL+soPath, strings.Replace(goodBody, `"state":"s"`, `"state":"block"`, 1))
	}()
	<-f.started
	codes := make(chan int, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := goodBody
			if i == 0 {
				body = strings.Replace(goodBody, `"is_spam"`, `"is-spam"`, 1)
			}
			codes <- post(t, ts.URL+soPath, body).status
		}(i)
	}
	waitFor(t, func() bool { return strings.Contains(string(get(t, ts.URL+"/metrics").body), "clef_queue_depth 5") })
	close(f.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("batched request got %d", c)
		}
	}
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if len(bf.batches) != 1 || bf.batches[0] != 5 {
		t.Errorf("DecideBatch calls %v, want one of 5", bf.batches)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	f := newFake()
	for _, cfg := range []Config{
		{},
		{Load: f.loader(nil), QueueSize: MaxQueueSize + 1},
		{Load: f.loader(nil), PrefixCacheBytes: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
