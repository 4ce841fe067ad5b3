// Package menubar is the macOS menu-bar front of the clef daemon: a status
// item showing idle / loading / serving with the request count and p50
// latency, and a menu to start and stop the daemon, pick a model, open the
// logs, toggle launch at login and quit.
//
// It is an HTTP client of the daemon only: it never links the engine. The
// AppKit front (app_darwin.go) is built with `darwin && cgo` on macdriver;
// everywhere else Run is headless and prints the status line as it changes.
// Everything that is not AppKit lives in this file and is tested on any OS.
package menubar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/clefrt/clef/hub"
	"github.com/clefrt/clef/server/launchagent"
	"github.com/clefrt/clef/server/status"
)

// Options configure the menu bar.
type Options struct {
	// Addr is the daemon's host:port (default 127.0.0.1:8089).
	Addr string
	// Token is the daemon's bearer token, if it has one.
	Token string
	// Program is the clef binary used to start the daemon (default: this one).
	Program string
	// Model is the model the daemon is started with.
	Model string
	// ModelsDir holds one model per subdirectory; they are offered in the
	// Model menu together with Model.
	ModelsDir string
	// Hub, when set, is the Hugging Face cache (clef pull) whose models are
	// offered too, by name: ORG/NAME for a cached release, ORG/NAME:TYPE
	// for a file clef pull --quantize wrote (clef serve resolves names).
	Hub *hub.Cache
	// Home is the user's home (default os.UserHomeDir); the LaunchAgent and
	// the log file live under it.
	Home string
	// Poll is how often the daemon is asked for its status (default 2 s).
	Poll time.Duration
	// Out receives the status lines of the headless front (default stdout).
	Out io.Writer
}

func (o *Options) defaults() {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:8089"
	}
	if o.Program == "" {
		if p, err := os.Executable(); err == nil {
			o.Program = p
		}
	}
	if o.Home == "" {
		o.Home, _ = os.UserHomeDir()
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// Client talks to the daemon over HTTP.
type Client struct {
	Base  string // e.g. http://127.0.0.1:8089
	Token string
	HTTP  *http.Client
}

// NewClient returns a client of the daemon at addr (host:port or URL).
func NewClient(addr, token string) *Client {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &Client{Base: strings.TrimRight(base, "/"), Token: token, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(body))
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// PS asks the daemon for its status.
func (c *Client) PS(ctx context.Context) (*status.PS, error) {
	var ps status.PS
	if err := c.do(ctx, http.MethodGet, status.Path, &ps); err != nil {
		return nil, err
	}
	return &ps, nil
}

// Shutdown asks the daemon to finish its in-flight work and exit.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, status.ShutdownPath, nil)
}

// Summary is what the status item shows.
type Summary struct {
	State    string // "down", "idle", "loading", "serving", "failed"
	Title    string // the status item's title
	Detail   string // the first (disabled) menu line
	Running  bool   // the daemon answered
	Model    string
	Requests int64
	P50MS    float64
}

// Summarize turns a PS answer (or the error of asking) into what the menu shows.
func Summarize(ps *status.PS, err error) Summary {
	if err != nil || ps == nil {
		return Summary{State: "down", Title: "clef ○", Detail: "Daemon not running"}
	}
	s := Summary{Running: true, State: "idle"}
	var m status.Model
	if len(ps.Models) > 0 {
		m = ps.Models[0]
	}
	s.Model, s.Requests, s.P50MS = m.Name, m.Requests, m.P50MS
	switch m.State {
	case status.StateStarting, status.StateLoading:
		s.State = "loading"
	case status.StateFailed:
		s.State = "failed"
	case status.StateReady:
		if m.InFlight > 0 || ps.Queue.Depth > 0 {
			s.State = "serving"
		}
	}
	switch s.State {
	case "loading":
		s.Title = "clef ◐ loading"
		s.Detail = "Loading " + m.Name
	case "failed":
		s.Title = "clef ⚠"
		s.Detail = "Load failed: " + m.Error
	case "serving":
		s.Title = fmt.Sprintf("clef ● %d · p50 %s", m.Requests, fmtMS(m.P50MS))
		s.Detail = fmt.Sprintf("Serving %s (%d in flight, %d queued)", m.Name, m.InFlight, ps.Queue.Depth)
	default:
		s.Title = fmt.Sprintf("clef ◌ %d · p50 %s", m.Requests, fmtMS(m.P50MS))
		if m.State == status.StateUnloaded {
			s.Detail = fmt.Sprintf("Idle, %s unloaded (reloads on demand)", m.Name)
		} else {
			s.Detail = fmt.Sprintf("Idle, %s loaded (%s)", m.Name, fmtBytes(m.ResidentBytes))
		}
	}
	return s
}

func fmtMS(ms float64) string {
	if ms <= 0 {
		return "–"
	}
	if ms < 10 {
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fms", ms)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// Controller carries out the menu's actions. It is safe for concurrent use
// (menu callbacks hand their work to goroutines).
type Controller struct {
	opts   Options
	client *Client
	mu     sync.Mutex
	model  string
}

// NewController returns a controller for opts.
func NewController(opts Options) *Controller {
	opts.defaults()
	return &Controller{opts: opts, client: NewClient(opts.Addr, opts.Token), model: opts.Model}
}

// Client returns the daemon client.
func (c *Controller) Client() *Client { return c.client }

// Model returns the selected model.
func (c *Controller) Model() string { c.mu.Lock(); defer c.mu.Unlock(); return c.model }

// Models lists the selectable models: the configured one, then every
// directory under ModelsDir that holds a config.json, and every .gguf file,
// then the models of the Hub cache by name.
func (c *Controller) Models() []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	add(c.Model())
	if c.opts.ModelsDir != "" {
		ents, _ := os.ReadDir(c.opts.ModelsDir)
		var found []string
		for _, e := range ents {
			p := filepath.Join(c.opts.ModelsDir, e.Name())
			if e.IsDir() {
				if _, err := os.Stat(filepath.Join(p, "config.json")); err == nil {
					found = append(found, p)
				}
			} else if strings.HasSuffix(e.Name(), ".gguf") {
				found = append(found, p)
			}
		}
		sort.Strings(found)
		for _, p := range found {
			add(p)
		}
	}
	for _, n := range hubModels(c.opts.Hub) {
		add(n)
	}
	return out
}

// hubModels names the models of a Hub cache that can be served: a repo
// with a snapshot holding weights, and each quantized file, sorted.
func hubModels(cache *hub.Cache) []string {
	if cache == nil {
		return nil
	}
	repos, err := cache.List()
	if err != nil {
		return nil
	}
	var names []string
	for _, r := range repos {
		weights := false
		for _, rev := range r.Revisions {
			weights = weights || rev.Weights
			for _, q := range rev.Quantized {
				names = append(names, r.Repo+":"+q.Type)
			}
		}
		if weights {
			names = append(names, r.Repo)
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// LogPath is the daemon's log file.
func (c *Controller) LogPath() string { return launchagent.DefaultLogPath(c.opts.Home) }

// serveArgs are the arguments of `clef serve` for model.
func (c *Controller) serveArgs(model string) []string {
	args := []string{"serve", "--model", model, "--addr", c.opts.Addr}
	if c.opts.Token != "" {
		args = append(args, "--token", c.opts.Token)
	}
	return args
}

// Start starts the daemon on the selected model, logging to LogPath.
func (c *Controller) Start() error {
	model := c.Model()
	if model == "" {
		return errors.New("no model selected")
	}
	if c.opts.Program == "" {
		return errors.New("clef binary not found")
	}
	if err := os.MkdirAll(filepath.Dir(c.LogPath()), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.opts.Program, c.serveArgs(model)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait() // reap it when it exits
	return nil
}

// Stop asks the daemon to shut down gracefully.
func (c *Controller) Stop(ctx context.Context) error { return c.client.Shutdown(ctx) }

// SelectModel makes model the selected one; a running daemon is restarted
// on it, and an installed LaunchAgent is rewritten for it.
func (c *Controller) SelectModel(ctx context.Context, model string) error {
	c.mu.Lock()
	c.model = model
	c.mu.Unlock()
	if c.LaunchAtLogin() {
		if err := c.SetLaunchAtLogin(true); err != nil {
			return err
		}
	}
	if _, err := c.client.PS(ctx); err != nil {
		return nil // not running: nothing to restart
	}
	if err := c.Stop(ctx); err != nil {
		return err
	}
	for i := 0; i < 100; i++ { // wait until the port is free
		if _, err := c.client.PS(ctx); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c.Start()
}

// LaunchAtLogin reports whether the daemon's LaunchAgent is installed.
func (c *Controller) LaunchAtLogin() bool { return launchagent.Installed(c.opts.Home) }

// SetLaunchAtLogin installs or removes the daemon's LaunchAgent (what
// `clef daemon install` / `uninstall` do).
func (c *Controller) SetLaunchAtLogin(on bool) error {
	if !on {
		_, _, err := launchagent.Uninstall(c.opts.Home)
		return err
	}
	model := c.Model()
	if model == "" {
		return errors.New("no model selected")
	}
	_, err := launchagent.Install(c.opts.Home, launchagent.Config{
		Program: c.opts.Program, Args: c.serveArgs(model),
		LogPath: c.LogPath(), KeepAlive: true,
	})
	return err
}

// OpenLogs shows the daemon's log file (Console on macOS).
func (c *Controller) OpenLogs() error {
	if runtime.GOOS != "darwin" {
		_, err := fmt.Fprintln(c.opts.Out, "logs:", c.LogPath())
		return err
	}
	return exec.Command("open", c.LogPath()).Run()
}

// watch polls the daemon and calls show with every summary that differs
// from the previous one, until ctx ends.
func (c *Controller) watch(ctx context.Context, show func(Summary)) {
	var last Summary
	first := true
	t := time.NewTicker(c.opts.Poll)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(c.opts.Poll, 2*time.Second))
		ps, err := c.client.PS(pctx)
		cancel()
		if ctx.Err() != nil {
			return // stopping: the failed poll says nothing about the daemon
		}
		s := Summarize(ps, err)
		if first || s != last {
			show(s)
			last, first = s, false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
