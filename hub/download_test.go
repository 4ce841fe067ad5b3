package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clefrt/clef/hub/hubtest"
)

// testCtx bounds a test that would hang on a client without its guards.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestChecksumNotRetried: a Hub whose headers name another ETag than the
// listing fails the pull at once, without backoff, and keeps nothing.
func TestChecksumNotRetried(t *testing.T) {
	for _, name := range []string{"model-00002-of-00002.safetensors", "tokenizer.json"} {
		h := newFake(t, nil)
		h.BadEtag[name] = true
		s := &sleeps{}
		cache := newCache(t)
		_, err := newClient(h, s).Pull(testCtx(t), cache, "org/tiny", PullOptions{})
		if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s: err = %v, want a checksum error naming it", name, err)
		}
		if len(s.d) != 0 {
			t.Errorf("%s: %d waits before failing, want none", name, len(s.d))
		}
		etag := releaseFiles(t)[name]
		if exists(cache.BlobPath("org/tiny", etag)) || exists(cache.BlobPath("org/tiny", etag)+".incomplete") {
			t.Errorf("%s: bytes kept", name)
		}
	}
}

// TestRedirectRefusedNotRetried: a redirect to plain http fails a fetch
// at once with ErrRedirectRefused.
func TestRedirectRefusedNotRetried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://cdn.example.invalid/blob", http.StatusFound)
	}))
	defer srv.Close()
	s := &sleeps{}
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client(), MaxAttempts: 4, Sleep: s.sleep}
	f := File{Name: "config.json", Size: 3, BlobID: strings.Repeat("a", 40)}
	_, _, err := c.Fetch(testCtx(t), newCache(t), "org/x", commitA, f, nil)
	if !errors.Is(err, ErrRedirectRefused) {
		t.Fatalf("err = %v, want ErrRedirectRefused", err)
	}
	if len(s.d) != 0 {
		t.Fatalf("%d waits before failing, want none", len(s.d))
	}
}

// TestRestartsBounded: a server that cuts every transfer from byte 0 and
// answers every resume with a Content-Range from 0 makes the transfer
// start over; that is given up after MaxAttempts, with a wait before each
// new start.
func TestRestartsBounded(t *testing.T) {
	h := newFake(t, nil)
	const shard = "model-00001-of-00002.safetensors"
	h.CutAfter[shard] = 1000
	h.CutRepeat = true
	h.BadRange[shard] = true
	s := &sleeps{}
	_, err := newClient(h, s).Pull(testCtx(t), newCache(t), "org/tiny", PullOptions{})
	if err == nil || !strings.Contains(err.Error(), "giving up after 4 restarts") || !strings.Contains(err.Error(), shard) {
		t.Fatalf("err = %v, want giving up after 4 restarts of %s", err, shard)
	}
	restarts := 0
	for _, d := range s.d {
		if d > 0 {
			restarts++
		}
	}
	if restarts < 3 {
		t.Fatalf("waits %v, want one before each restart", s.d)
	}
}

// TestHTTPSRedirectToLoopbackRefused: an https endpoint's redirect to
// plain http is refused even to a loopback address; only a plain-http
// loopback endpoint (a local mirror) may redirect to loopback http.
func TestHTTPSRedirectToLoopbackRefused(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.Write([]byte("abc"))
	}))
	defer plain.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/blob", http.StatusFound)
	}))
	defer tls.Close()
	c := &Client{Endpoint: tls.URL, HTTP: tls.Client(), Sleep: (&sleeps{}).sleep}
	_, _, err := c.get(testCtx(t), tls.URL+"/org/x/resolve/main/f", nil)
	if !errors.Is(err, ErrRedirectRefused) {
		t.Fatalf("https -> http://127.0.0.1: %v, want ErrRedirectRefused", err)
	}
	mu.Lock()
	n := hits
	mu.Unlock()
	if n != 0 {
		t.Fatal("a request went to the plain-http server")
	}
	// A plain-http loopback endpoint redirecting to loopback is followed.
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/blob", http.StatusFound)
	}))
	defer redir.Close()
	c = &Client{Endpoint: redir.URL, HTTP: redir.Client()}
	resp, _, err := c.get(testCtx(t), redir.URL+"/f", nil)
	if err != nil {
		t.Fatalf("http loopback -> http loopback: %v", err)
	}
	resp.Body.Close()
}

// TestSignedQueryRedacted: a transport error on a redirected request does
// not carry the CDN URL's signed query into errors or notes.
func TestSignedQueryRedacted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there: connection refused
	const secret = "X-Amz-Signature=s3cr3t"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+dead+"/lfs/blob?"+secret+"&X-Amz-Credential=k3y#frag", http.StatusFound)
	}))
	defer srv.Close()
	var notes []string
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client(), MaxAttempts: 2, Sleep: (&sleeps{}).sleep,
		Notef: func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }}
	f := File{Name: "config.json", Size: 3, BlobID: strings.Repeat("a", 40)}
	_, _, err = c.Fetch(testCtx(t), newCache(t), "org/x", commitA, f, nil)
	if err == nil || !strings.Contains(err.Error(), dead+"/lfs/blob") {
		t.Fatalf("err = %v, want a transport error naming the CDN URL", err)
	}
	for _, s := range append(notes, err.Error()) {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, "k3y") || strings.Contains(s, "Signature") {
			t.Errorf("the signed query leaked: %s", s)
		}
	}
}

// TestHeaderTimeout: a server that never answers fails the request after
// HeaderTimeout, and it is retried.
func TestHeaderTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	s := &sleeps{}
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client(), MaxAttempts: 2, Sleep: s.sleep, HeaderTimeout: 50 * time.Millisecond}
	_, err := c.Info(testCtx(t), "org/x", "main")
	if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Fatalf("err = %v, want no answer within 50ms", err)
	}
	if len(s.d) != 1 {
		t.Fatalf("waits %v, want one retry", s.d)
	}
}

// TestIdleTimeoutResumes: a transfer whose body stops mid-file fails after
// IdleTimeout and is resumed from where it stopped.
func TestIdleTimeoutResumes(t *testing.T) {
	data := []byte(strings.Repeat("clef idle test ", 1000))
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rg := r.Header.Get("Range")
		mu.Lock()
		ranges = append(ranges, rg)
		mu.Unlock()
		start := 0
		if rg != "" {
			fmt.Sscanf(rg, "bytes=%d-", &start)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[start:])
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // stall
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client(), MaxAttempts: 3, Sleep: (&sleeps{}).sleep, IdleTimeout: 100 * time.Millisecond}
	f := File{Name: "config.json", Size: int64(len(data)), BlobID: hubtest.GitSHA1(data)}
	cache := newCache(t)
	blob, got, err := c.Fetch(testCtx(t), cache, "org/x", commitA, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(blob)
	if string(b) != string(data) || got != int64(len(data)) {
		t.Fatalf("blob of %d bytes (%d transferred), want the %d of the file", len(b), got, len(data))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranges) != 2 || ranges[1] != fmt.Sprintf("bytes=%d-", len(data)/2) {
		t.Fatalf("ranges %q, want none then the rest", ranges)
	}
	if filepath.Dir(blob) != filepath.Join(cache.RepoDir("org/x"), "blobs") {
		t.Fatalf("blob at %s", blob)
	}
}
