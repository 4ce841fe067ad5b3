package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/server"
	"github.com/clefrt/clef/server/status"
)

// The default shutdown timeout is the request timeout: a decision admitted
// before the shutdown may use all of its time (it was a fixed minute,
// shorter than the 2-minute default request timeout).
func TestServeShutdownTimeoutDefault(t *testing.T) {
	cmd, _, err := rootCmd.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	def := cmd.Flags().Lookup("shutdown-timeout").DefValue
	d, err := time.ParseDuration(def)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range []time.Duration{server.DefaultRequestTimeout, 10 * time.Minute} {
		if got := shutdownTimeout(&serveFlags{shutdownTimeout: d, requestTimeout: rt}); got < rt {
			t.Errorf("default shutdown timeout %v with --request-timeout %v: shorter than the request timeout", got, rt)
		}
	}
	if got := shutdownTimeout(&serveFlags{shutdownTimeout: time.Second, requestTimeout: time.Hour}); got != time.Second {
		t.Errorf("--shutdown-timeout 1s gives %v", got)
	}
}

// When --shutdown-timeout runs out, the decision in flight is cancelled
// and answered 503, and clef serve exits 0 (it used to exit 1 and leave
// the request without an answer).
func TestServeShutdownAnswersInFlight(t *testing.T) {
	addr := freeAddr(t)
	type res struct {
		errOut string
		err    error
	}
	done := make(chan res, 1)
	go func() {
		_, errOut, err := run(t, "", "serve", "--model", tinyRelease, "--addr", addr, "--request-timeout", "1m", "--shutdown-timeout", "200ms", "--log-format", "json")
		done <- res{errOut, err}
	}()
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for code, _ := httpDo(t, "GET", base+"/health", ""); code != 200; code, _ = httpDo(t, "GET", base+"/health", "") {
		if time.Now().After(deadline) {
			t.Fatal("clef serve never became healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A state the tiny model needs minutes for.
	huge := `{"model":"clef-omni","state":"` + strings.Repeat("hello world foo bar ", 13000) + `","questions":{"q":{"type":"noul","instructions":"x"}}}`
	type answer struct {
		code int
		body string
	}
	inFlight := make(chan answer, 1)
	go func() {
		code, body := httpDo(t, "POST", base+"/v1/systemone", huge)
		inFlight <- answer{code, body}
	}()
	for {
		_, body := httpDo(t, "GET", base+status.Path, "")
		var ps status.PS
		if json.Unmarshal([]byte(body), &ps) == nil && len(ps.Models) == 1 && ps.Models[0].InFlight == 1 && ps.Queue.Depth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the decision never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, _ := httpDo(t, "POST", base+"/v1/shutdown", ""); code != 202 {
		t.Fatalf("shutdown: %d", code)
	}
	select {
	case a := <-inFlight:
		if a.code != 503 || !strings.Contains(a.body, "shutting down") {
			t.Errorf("decision in flight at the shutdown timeout: %d %s", a.code, a.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the decision in flight got no answer")
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("serve exited with %v\n%s", r.err, r.errOut)
		}
		for _, want := range []string{`"msg":"decision cancelled"`, `"why":"shutdown"`, `"engine_ms":`, `"msg":"stopped"`} {
			if !strings.Contains(r.errOut, want) {
				t.Errorf("log lacks %s:\n%s", want, r.errOut)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}
