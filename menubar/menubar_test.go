package menubar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clefrt/clef/hub"
	"github.com/clefrt/clef/server/launchagent"
	"github.com/clefrt/clef/server/status"
)

func TestSummarize(t *testing.T) {
	ready := &status.PS{Models: []status.Model{{Name: "clef-omni", State: status.StateReady, Requests: 42, P50MS: 123.4, ResidentBytes: 3 << 30}}}
	cases := []struct {
		ps            *status.PS
		err           error
		state, title  string
		detailContain string
	}{
		{nil, errors.New("connection refused"), "down", "clef ○", "not running"},
		{&status.PS{Models: []status.Model{{Name: "clef-omni", State: status.StateLoading}}}, nil, "loading", "clef ◐ loading", "Loading clef-omni"},
		{&status.PS{Models: []status.Model{{Name: "clef-omni", State: status.StateStarting}}}, nil, "loading", "clef ◐ loading", "Loading"},
		{&status.PS{Models: []status.Model{{Name: "m", State: status.StateFailed, Error: "no such file"}}}, nil, "failed", "clef ⚠", "no such file"},
		{ready, nil, "idle", "clef ◌ 42 · p50 123ms", "3.0 GiB"},
		{&status.PS{Models: []status.Model{{Name: "m", State: status.StateReady, Requests: 7, P50MS: 4.25, InFlight: 2}}, Queue: status.Queue{Depth: 1}}, nil, "serving", "clef ● 7 · p50 4.2ms", "2 in flight, 1 queued"},
		{&status.PS{Models: []status.Model{{Name: "m", State: status.StateUnloaded, Requests: 3}}}, nil, "idle", "clef ◌ 3 · p50 –", "unloaded"},
	}
	for _, c := range cases {
		s := Summarize(c.ps, c.err)
		if s.State != c.state || s.Title != c.title || !strings.Contains(s.Detail, c.detailContain) {
			t.Errorf("Summarize → %+v, want state %s title %q detail ~%q", s, c.state, c.title, c.detailContain)
		}
	}
}

// fakeDaemon serves /v1/ps and /v1/shutdown like the daemon does.
type fakeDaemon struct {
	mu       sync.Mutex
	ps       status.PS
	shutdown int
	token    string
}

func (d *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.token != "" && r.Header.Get("Authorization") != "Bearer "+d.token {
		http.Error(w, `{"error":{"message":"missing or invalid bearer token"}}`, 401)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case r.URL.Path == status.Path && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(d.ps)
	case r.URL.Path == status.ShutdownPath && r.Method == http.MethodPost:
		d.shutdown++
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, r)
	}
}

func TestClient(t *testing.T) {
	d := &fakeDaemon{token: "tok", ps: status.PS{Models: []status.Model{{Name: "clef-omni", State: status.StateReady, Requests: 5}}}}
	ts := httptest.NewServer(d)
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	ctx := context.Background()
	if _, err := NewClient(addr, "").PS(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
	c := NewClient(addr, "tok")
	ps, err := c.PS(ctx)
	if err != nil || ps.Models[0].Requests != 5 {
		t.Fatalf("PS: %+v %v", ps, err)
	}
	if err := c.Shutdown(ctx); err != nil || d.shutdown != 1 {
		t.Fatalf("Shutdown: %v (%d)", err, d.shutdown)
	}
	if _, err := NewClient("127.0.0.1:1", "").PS(ctx); err == nil {
		t.Fatal("PS of no daemon succeeded")
	}
}

func TestControllerModelsAndLaunchAtLogin(t *testing.T) {
	home := t.TempDir()
	models := filepath.Join(home, "models")
	for _, m := range []string{"clef-omni-4bit", "clef-omni-8bit", "not-a-model"} {
		os.MkdirAll(filepath.Join(models, m), 0o755)
		if m != "not-a-model" {
			os.WriteFile(filepath.Join(models, m, "config.json"), []byte("{}"), 0o644)
		}
	}
	os.WriteFile(filepath.Join(models, "q.gguf"), nil, 0o644)
	c := NewController(Options{Home: home, ModelsDir: models, Model: "/elsewhere/clef-omni", Program: "/usr/local/bin/clef", Token: "t0k"})
	got := c.Models()
	want := []string{"/elsewhere/clef-omni", filepath.Join(models, "clef-omni-4bit"), filepath.Join(models, "clef-omni-8bit"), filepath.Join(models, "q.gguf")}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Models %q, want %q", got, want)
	}
	if c.LaunchAtLogin() {
		t.Fatal("launch at login on in an empty home")
	}
	if err := c.SetLaunchAtLogin(true); err != nil {
		t.Fatal(err)
	}
	plist, err := os.ReadFile(launchagent.Path(home))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<string>serve</string>", "<string>/elsewhere/clef-omni</string>", "<string>--token</string>", "<string>/usr/local/bin/clef</string>"} {
		if !bytes.Contains(plist, []byte(s)) {
			t.Errorf("plist lacks %s", s)
		}
	}
	// Picking another model while no daemon runs rewrites the agent for it.
	if err := c.SelectModel(context.Background(), want[1]); err != nil {
		t.Fatal(err)
	}
	plist, _ = os.ReadFile(launchagent.Path(home))
	if !bytes.Contains(plist, []byte(want[1])) || c.Model() != want[1] {
		t.Error("SelectModel did not rewrite the agent")
	}
	if err := c.SetLaunchAtLogin(false); err != nil || c.LaunchAtLogin() {
		t.Fatalf("turning launch at login off: %v", err)
	}
	if err := NewController(Options{Home: home}).Start(); err == nil {
		t.Error("Start without a model succeeded")
	}
}

// The headless front prints a line whenever the daemon's state changes.
func TestHeadlessRun(t *testing.T) {
	d := &fakeDaemon{ps: status.PS{Models: []status.Model{{Name: "clef-omni", State: status.StateLoading}}}}
	ts := httptest.NewServer(d)
	defer ts.Close()
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Addr: ts.URL, Poll: 5 * time.Millisecond, Out: &out, Home: t.TempDir()})
	}()
	waitFor(t, func() bool { return strings.Contains(out.String(), "loading") })
	d.mu.Lock()
	d.ps.Models[0].State, d.ps.Models[0].Requests = status.StateReady, 9
	d.mu.Unlock()
	waitFor(t, func() bool { return strings.Contains(out.String(), "clef ◌ 9") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("%d status lines, want 2 (one per change):\n%s", n, out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The Model menu offers what clef pull cached, by name: a release whose
// snapshot holds weights, and each quantized file; a snapshot without
// weights (a config-only pull) is not offered.
func TestControllerHubModels(t *testing.T) {
	dir := t.TempDir()
	cache := &hub.Cache{Dir: filepath.Join(dir, "hub"), QuantDir: filepath.Join(dir, "quantized")}
	snap := func(repo, commit string, files ...string) {
		d := cache.SnapshotDir(repo, commit)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			os.WriteFile(filepath.Join(d, f), []byte("x"), 0o644)
		}
		if err := cache.WriteRef(repo, "main", commit); err != nil {
			t.Fatal(err)
		}
	}
	snap("Cloudflare/clef-omni", "c1", "config.json", "model-00001-of-00002.safetensors")
	snap("mlx-community/clef-omni-4bit", "c2", "config.json", "model.safetensors")
	snap("org/config-only", "c3", "config.json", "joint_head.safetensors")
	q := cache.QuantizedDir("Cloudflare/clef-omni", "c1")
	os.MkdirAll(q, 0o755)
	os.WriteFile(filepath.Join(q, "q4_k_m.gguf"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(q, "q4_k_m.head.gguf"), []byte("x"), 0o644)
	c := NewController(Options{Home: dir, Model: "/elsewhere/clef-omni", Hub: cache})
	got := strings.Join(c.Models(), "|")
	want := "/elsewhere/clef-omni|Cloudflare/clef-omni|Cloudflare/clef-omni:q4_k_m|mlx-community/clef-omni-4bit"
	if got != want {
		t.Fatalf("Models %q, want %q", got, want)
	}
}
