package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log sink for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The request log quotes and cuts what a client sent (a refusal that
// echoes a huge field, a long method): every line stays short, whatever
// the request held (issue 17, defect 9).
func TestRequestLogBounded(t *testing.T) {
	var logs lockedBuffer
	f := newFake()
	f.plain = true
	_, ts := startServer(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Load: f.loader(nil)})
	huge := strings.Repeat(`\u0000`, 30000) + strings.Repeat("m", 5000)
	for _, body := range []string{
		`{"model": "` + huge + `", "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}`,
		`{"model": "clef-omni", "state": "s", "questions": {"` + huge + `": 5}}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/systemone", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	req, _ := http.NewRequest(strings.Repeat("M", 20000), ts.URL+"/v1/systemone", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d log lines:\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		if len(l) > 1024 {
			t.Errorf("log line of %d bytes: %.200s", len(l), l)
		}
	}
}
