package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/server/launchagent"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// clef serve answers a decision, clef ps lists the model, and a shutdown
// request stops the command cleanly.
func TestServeCommand(t *testing.T) {
	addr := freeAddr(t)
	type res struct {
		errOut string
		err    error
	}
	done := make(chan res, 1)
	go func() {
		_, errOut, err := run(t, "", "serve", "--model", tinyRelease, "--addr", addr, "--prefix-cache-bytes", "64MiB", "--log-format", "json",
			"--allow-host", "clef.test", "--cors-origin", "http://app.test:3000")
		done <- res{errOut, err}
	}()
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := httpDo(t, "GET", base+"/health", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("clef serve never became healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := httpDo(t, "POST", base+"/v1/systemone", `{"model":"clef-omni","state":"secret state text","questions":{"q":{"type":"noul","instructions":"ok?"}}}`)
	if code != 200 || !strings.Contains(body, `"answers": {"q": {"type": "noul", "noul": `) {
		t.Fatalf("decision: %d %s", code, body)
	}
	// The edge flags: --allow-host serves that Host, others get 421;
	// --cors-origin gets CORS headers, other origins 403.
	for _, c := range []struct {
		host, origin string
		code         int
		acao         string
	}{{"clef.test", "", 200, ""}, {"evil.test", "", 421, ""}, {addr, "http://app.test:3000", 200, "http://app.test:3000"}, {addr, "http://evil.test", 403, ""}} {
		req, _ := http.NewRequest("GET", base+"/v1/models", nil)
		req.Host = c.host
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get("Access-Control-Allow-Origin") != c.acao {
			t.Errorf("Host %s Origin %q: %d %q", c.host, c.origin, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	out, _, err := run(t, "", "ps", "--addr", addr)
	if err != nil || !strings.Contains(out, "clef-omni") || !strings.Contains(out, "ready") || !strings.Contains(out, "prefix cache") {
		t.Fatalf("clef ps: %v\n%s", err, out)
	}
	if code, _ := httpDo(t, "POST", base+"/v1/shutdown", ""); code != 202 {
		t.Fatalf("shutdown: %d", code)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("serve: %v\n%s", r.err, r.errOut)
		}
		if strings.Contains(r.errOut, "secret state text") {
			t.Error("the log holds the state without --log-bodies")
		}
		for _, want := range []string{`"route":"systemone"`, `"status":200`, `"id":`, `"decide_ms":`, `"msg":"stopped"`} {
			if !strings.Contains(r.errOut, want) {
				t.Errorf("log lacks %s:\n%s", want, r.errOut)
			}
		}
		if strings.Contains(r.errOut, "without --token") {
			t.Error("loopback address drew the no-token warning")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, _, err := run(t, "", "ps", "--addr", addr); err == nil {
		t.Error("clef ps succeeded with no daemon")
	}
}

func TestServeFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--prefix-cache-bytes", "lots"},
		{"serve", "--max-body-bytes", "0"},
		{"serve", "--log-format", "xml"},
		{"serve", "--queue", "0"},
		{"serve", "--body-budget-bytes", "none"},
		{"serve", "--addr", "127.0.0.1:0", "--cors-origin", "*"},
		{"serve", "--addr", "127.0.0.1:0", "--allow-host", "http://x/"},
	} {
		_, _, err := run(t, "", args...)
		if exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "2GiB": 2 << 30, "1.5 MiB": 3 << 19, "10MB": 10e6, "7B": 7} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1XB", "GiB", "1e30"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) accepted", in)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8089": true, "localhost:1": true, "[::1]:8089": true,
		":8089": false, "0.0.0.0:8089": false, "192.168.1.2:80": false, "nonsense": false} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v", addr, got)
		}
	}
}

func TestExposureWarning(t *testing.T) {
	if w := exposureWarning("0.0.0.0:8089", ""); !strings.Contains(w, "--token") {
		t.Errorf("all interfaces without a token: %q", w)
	}
	if w := exposureWarning(":8089", ""); w == "" {
		t.Error("no warning for :8089 without a token")
	}
	for _, c := range [][2]string{{"0.0.0.0:8089", "tok"}, {"127.0.0.1:8089", ""}, {"localhost:8089", ""}} {
		if w := exposureWarning(c[0], c[1]); w != "" {
			t.Errorf("%v: unexpected warning %q", c, w)
		}
	}
}

// clef daemon install writes the LaunchAgent under $HOME; uninstall removes it.
func TestDaemonInstallUninstall(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	model, _ := filepath.Abs(tinyRelease)
	out, _, err := run(t, "", "daemon", "install", "--model", tinyRelease, "--token", "tk", "--idle-unload", "30m", "--load=false")
	if err != nil {
		t.Fatal(err)
	}
	p := launchagent.Path(home)
	if !strings.Contains(out, p) {
		t.Errorf("output %q does not name %s", out, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<string>serve</string>", "<string>" + model + "</string>", "<string>--idle-unload</string>", "<string>30m</string>", "serve.log"} {
		if !strings.Contains(string(data), s) {
			t.Errorf("plist lacks %s:\n%s", s, data)
		}
	}
	out, _, err = run(t, "", "daemon", "uninstall", "--load=false")
	if err != nil || !strings.Contains(out, "removed") {
		t.Fatalf("uninstall: %v %s", err, out)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatal("plist still there")
	}
	if _, _, err := run(t, "", "daemon", "install", "--model", "does/not/exist", "--load=false"); exitCode(err) != 2 {
		t.Errorf("missing model: exit %d", exitCode(err))
	}
	t.Setenv("CLEF_MODEL", "")
	if _, _, err := run(t, "", "daemon", "install", "--load=false"); exitCode(err) != 2 {
		t.Errorf("no model: exit %d", exitCode(err))
	}
}
