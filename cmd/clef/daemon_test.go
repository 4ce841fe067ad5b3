package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/server/launchagent"
)

// clef daemon install --token T hands the token to clef serve through the
// agent's environment (CLEF_TOKEN, plist mode 0600), never through its
// arguments, which every local user sees in ps; nothing it prints shows it.
func TestDaemonInstallTokenInEnvironment(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	const token = "tok-7f3a9c1e"
	out, errOut, err := run(t, "", "daemon", "install", "--model", tinyRelease, "--token", token, "--load=false")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out+errOut, token) {
		t.Errorf("install printed the token:\n%s%s", out, errOut)
	}
	p := launchagent.Path(home)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("plist mode %v, want 0600", st.Mode().Perm())
	}
	s := string(data)
	i, j := strings.Index(s, "<key>ProgramArguments</key>"), strings.Index(s, "<key>EnvironmentVariables</key>")
	if i < 0 || j < 0 {
		t.Fatalf("plist lacks ProgramArguments or EnvironmentVariables:\n%s", s)
	}
	args := s[i : strings.Index(s[i:], "</array>")+i]
	if strings.Contains(args, token) || strings.Contains(args, "--token") {
		t.Errorf("token in the arguments:\n%s", args)
	}
	if env := s[j:]; !strings.Contains(env, "<key>CLEF_TOKEN</key>\n\t\t<string>"+token+"</string>") {
		t.Errorf("CLEF_TOKEN not in the environment:\n%s", env)
	}
	if !strings.Contains(args, filepath.Base(tinyRelease)) {
		t.Errorf("model not in the arguments:\n%s", args)
	}
}

// clef serve takes its token from CLEF_TOKEN (what the agent sets) and
// never writes it to its log.
func TestServeTokenFromEnvironment(t *testing.T) {
	const token = "tok-env-5b2d8e"
	t.Setenv("CLEF_TOKEN", token)
	addr := freeAddr(t)
	type res struct {
		errOut string
		err    error
	}
	done := make(chan res, 1)
	go func() {
		_, errOut, err := run(t, "", "serve", "--model", tinyRelease, "--addr", addr, "--prefix-cache-bytes", "0", "--verbose")
		done <- res{errOut, err}
	}()
	base := "http://" + addr
	get := func(auth string) int {
		req, _ := http.NewRequest("GET", base+"/v1/models", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(20 * time.Second)
	for get(token) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("clef serve never answered with the token from CLEF_TOKEN")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := get(""); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	req, _ := http.NewRequest("POST", base+"/v1/shutdown", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 202 {
		t.Fatalf("shutdown: %v %v", resp, err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("serve: %v", r.err)
		}
		if strings.Contains(r.errOut, token) {
			t.Errorf("the log shows the token:\n%s", r.errOut)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("clef serve did not stop")
	}
}
