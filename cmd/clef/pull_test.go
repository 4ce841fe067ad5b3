package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/pyjson"
	"github.com/clefrt/clef/hub"
	"github.com/clefrt/clef/hub/hubtest"
)

const tinyBF16Release = "../../testdata/clef-tiny/release-bf16"

const (
	commitA = "0db1cd2607d76a7bdb2a382f659e7b313079f84b"
	commitB = "2222222222222222222222222222222222222222"
)

// hubEnv points the environment at a fake Hub and an empty HF_HOME, and
// returns HF_HOME.
func hubEnv(t *testing.T, endpoint string) string {
	home := t.TempDir()
	for k, v := range map[string]string{"HF_HOME": home, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": "", "HF_TOKEN": "",
		"HF_TOKEN_PATH": "", "HF_HUB_OFFLINE": "", "CLEF_MODEL": ""} {
		t.Setenv(k, v)
	}
	return home
}

func fakeHub(t *testing.T, repos map[string]*hubtest.Repo) *hubtest.Hub {
	h := hubtest.New(repos)
	t.Cleanup(h.Close)
	return h
}

func releaseRepo(t *testing.T, dir string) *hubtest.Repo {
	r, err := hubtest.ReleaseRepo(dir, commitA, map[string]hubtest.File{"README.md": {Data: []byte("# card\n")}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPullThenDecideOffline: clef pull ORG/NAME from a fake Hub, then,
// offline with the Hub gone, the name resolves through the cache and clef
// decide on it reproduces the goldens. (decide.go does not call modelPath
// yet: the test resolves the name with modelPath and gives decide the path.)
func TestPullThenDecideOffline(t *testing.T) {
	h := fakeHub(t, map[string]*hubtest.Repo{"org/tiny": releaseRepo(t, tinyRelease)})
	home := hubEnv(t, h.Hub.URL)
	out, errOut, err := run(t, "", "pull", "org/tiny", "--jobs", "2")
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, errOut)
	}
	snap := filepath.Join(home, "hub", "models--org--tiny", "snapshots", commitA)
	for _, s := range []string{"commit " + commitA, "left out 1 file(s)", "in " + snap, "use it: clef decide --model org/tiny"} {
		if !strings.Contains(out, s) {
			t.Errorf("pull output lacks %q:\n%s", s, out)
		}
	}
	if !strings.Contains(errOut, "fetched model-00001-of-00002.safetensors") {
		t.Errorf("no plain progress lines off a terminal:\n%s", errOut)
	}
	h.Close()
	t.Setenv("HF_HUB_OFFLINE", "1")
	p, err := modelPath("org/tiny")
	if err != nil || p != snap {
		t.Fatalf("modelPath = %q, %v; want %s", p, err, snap)
	}
	if p2, err := modelPath("org/tiny@main"); err != nil || p2 != snap {
		t.Fatalf("org/tiny@main: %q %v", p2, err)
	}
	n := 0
	for _, g := range goldens(t) {
		if len(g.Media) > 0 || n == 3 {
			continue
		}
		n++
		out, _, err := run(t, string(g.Request), "decide", "--model", p, "--max-length", itoa(g.MaxLength))
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		v, _ := pyjson.Decode(g.Response)
		if want := pyjson.Dumps(v, pyjson.Default) + "\n"; out != want {
			t.Errorf("%s:\n got %s\nwant %s", g.Name, out, want)
		}
	}
	// Pulling again offline says it is there.
	out, _, err = run(t, "", "pull", "org/tiny")
	if err != nil || !strings.Contains(out, "offline") {
		t.Fatalf("offline pull: %v\n%s", err, out)
	}
}

// TestModelPath: paths stay paths; a model name that is not cached says
// how to get it.
func TestModelPath(t *testing.T) {
	hubEnv(t, "http://127.0.0.1:1")
	for _, v := range []string{"", tinyRelease, "./no/such/dir", "/abs/missing/x.gguf", "a/b/c"} {
		if p, err := modelPath(v); err != nil || p != v {
			t.Errorf("modelPath(%q) = %q, %v", v, p, err)
		}
	}
	if isHubName(tinyRelease) || isHubName("") || !isHubName("Cloudflare/clef-omni@v2:q4_k_m") || isHubName("./a/b") {
		t.Error("isHubName")
	}
	_, err := modelPath("Cloudflare/clef-omni")
	if err == nil || !strings.Contains(err.Error(), "run: clef pull Cloudflare/clef-omni") {
		t.Fatalf("missing model: %v", err)
	}
	_, err = modelPath("Cloudflare/clef-omni@v2")
	if err == nil || !strings.Contains(err.Error(), "run: clef pull Cloudflare/clef-omni --revision v2") {
		t.Fatalf("missing revision: %v", err)
	}
}

// TestPullQuantize: --quantize converts shard by shard into the quantized
// directory; the shards' blobs are gone, the snapshot keeps the
// configuration only, the name resolves to the GGUF, and the files are
// those clef quantize writes from the whole release.
func TestPullQuantize(t *testing.T) {
	h := fakeHub(t, map[string]*hubtest.Repo{"org/tinyq": releaseRepo(t, tinyBF16Release)})
	home := hubEnv(t, h.Hub.URL)
	out, errOut, err := run(t, "", "pull", "org/tinyq", "--quantize", "q8_0", "--quiet")
	if err != nil {
		t.Fatalf("pull --quantize: %v\n%s", err, errOut)
	}
	qdir := filepath.Join(home, "clef", "quantized", "org--tinyq", commitA)
	gguf := filepath.Join(qdir, "q8_0.gguf")
	if !strings.Contains(out, "use it: clef decide --model org/tinyq:q8_0") {
		t.Errorf("output:\n%s", out)
	}
	repoDir := filepath.Join(home, "hub", "models--org--tinyq")
	shards, _ := filepath.Glob(filepath.Join(repoDir, "snapshots", commitA, "model-*.safetensors"))
	if len(shards) != 0 {
		t.Errorf("shards linked in the snapshot: %v", shards)
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	for _, b := range blobs {
		if st, _ := b.Info(); st.Size() > 300000 {
			t.Errorf("blob %s of %d bytes kept (a shard)", b.Name(), st.Size())
		}
	}
	// The headers were read with Range requests before the shards.
	ranges := 0
	for _, r := range h.Requests() {
		if r.Server == "cdn" && r.Range == "bytes=0-7" {
			ranges++
		}
	}
	if ranges != 2 {
		t.Errorf("%d header reads, want 2", ranges)
	}
	ref := filepath.Join(t.TempDir(), "q8_0.gguf")
	ft, _ := convert.ParseFileType("q8_0")
	if _, err := convert.Quantize(tinyBF16Release, convert.Options{Type: ft, Out: ref, Name: "tinyq", Threads: 2}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{gguf, ref}, {strings.TrimSuffix(gguf, ".gguf") + ".head.gguf", strings.TrimSuffix(ref, ".gguf") + ".head.gguf"}} {
		a, errA := os.ReadFile(p[0])
		b, _ := os.ReadFile(p[1])
		if errA != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from clef quantize's output (%v)", filepath.Base(p[0]), errA)
		}
	}
	t.Setenv("HF_HUB_OFFLINE", "1")
	for _, name := range []string{"org/tinyq", "org/tinyq:q8_0"} {
		if p, err := modelPath(name); err != nil || p != gguf {
			t.Errorf("modelPath(%s) = %q, %v", name, p, err)
		}
	}
	if _, err := modelPath("org/tinyq:q4_k_m"); err == nil || !strings.Contains(err.Error(), "--quantize q4_k_m") {
		t.Errorf("missing quantization: %v", err)
	}
	g := goldens(t)[0]
	if _, _, err := run(t, string(g.Request), "decide", "--model", gguf); err != nil {
		t.Fatalf("decide on the pulled GGUF: %v", err)
	}
	out, _, err = run(t, "", "list")
	if err != nil || !strings.Contains(out, "org/tinyq:q8_0") || !strings.Contains(out, "(no weights)") {
		t.Errorf("list: %v\n%s", err, out)
	}
}

// TestListAndRm: two revisions sharing blobs; rm of one keeps the blobs
// the other links to; rm of the model removes it all.
func TestListAndRm(t *testing.T) {
	repo := releaseRepo(t, tinyRelease)
	b := map[string]hubtest.File{}
	for n, f := range repo.Commits[commitA] {
		b[n] = f
	}
	cfg := append([]byte(nil), b["config.json"].Data...)
	b["config.json"] = hubtest.File{Data: append(cfg, '\n')}
	repo.Commits[commitB] = b
	repo.Refs["v2"] = commitB
	h := fakeHub(t, map[string]*hubtest.Repo{"org/tiny": repo})
	home := hubEnv(t, h.Hub.URL)
	for _, args := range [][]string{{"pull", "org/tiny", "--quiet"}, {"pull", "org/tiny@v2", "--quiet"}} {
		if _, errOut, err := run(t, "", args...); err != nil {
			t.Fatalf("%v: %v %s", args, err, errOut)
		}
	}
	out, _, err := run(t, "", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"org/tiny", "main", "v2", commitA[:12], commitB[:12]} {
		if !strings.Contains(out, s) {
			t.Errorf("list lacks %q:\n%s", s, out)
		}
	}
	repoDir := filepath.Join(home, "hub", "models--org--tiny")
	before, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if _, _, err := run(t, "", "rm", "org/tiny@v2"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(after) != len(before)-1 {
		t.Fatalf("%d blobs before, %d after rm of v2; want one fewer (its config.json)", len(before), len(after))
	}
	if _, err := os.Stat(filepath.Join(repoDir, "snapshots", commitB)); err == nil {
		t.Fatal("v2's snapshot is still there")
	}
	if _, err := os.Stat(filepath.Join(repoDir, "refs", "v2")); err == nil {
		t.Fatal("refs/v2 is still there")
	}
	// Every link of main still resolves.
	ents, _ := os.ReadDir(filepath.Join(repoDir, "snapshots", commitA))
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(repoDir, "snapshots", commitA, e.Name())); err != nil {
			t.Errorf("main's %s: %v", e.Name(), err)
		}
	}
	t.Setenv("HF_HUB_OFFLINE", "1")
	if _, err := modelPath("org/tiny@v2"); err == nil || !strings.Contains(err.Error(), "clef pull") {
		t.Fatalf("removed revision resolves: %v", err)
	}
	if _, _, err := run(t, "", "rm", "org/tiny"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(repoDir); err == nil {
		t.Fatal("model folder still there")
	}
	if _, _, err := run(t, "", "rm", "org/tiny"); err == nil || !strings.Contains(err.Error(), "not in the cache") {
		t.Fatalf("rm of a missing model: %v", err)
	}
	for _, bad := range []string{"../etc", "org/tiny:q4_k_m", "a/b/c"} {
		if _, _, err := run(t, "", "rm", bad); exitCode(err) != 2 {
			t.Errorf("rm %q: %v", bad, err)
		}
	}
}

// TestPullProgressBar: on a terminal one line is redrawn with percent,
// bytes, rate and ETA; off it, one plain line per file.
func TestPullProgressBar(t *testing.T) {
	var tty, plain bytes.Buffer
	files := []hub.File{{Name: "a.safetensors", Size: 3e6}, {Name: "b.json", Size: 1e6}}
	for _, p := range []*pullProgress{newPullProgress(&tty, true, false), newPullProgress(&plain, false, false)} {
		p.Plan(files, 4e6)
		p.last = p.last.Add(-time.Second)
		p.Add(2e6)
		p.Done(files[1], false)
		p.finish()
	}
	line := tty.String()
	for _, s := range []string{"\r\033[K", " 50.0% 2.00 MB / 4.00 MB", "/s  ETA ", "(1/2 files)"} {
		if !strings.Contains(line, s) {
			t.Errorf("terminal line %q lacks %q", line, s)
		}
	}
	if got := plain.String(); got != "fetching 2 file(s), 4.00 MB\nfetched b.json (1.00 MB) [1/2]\n" {
		t.Errorf("plain output %q", got)
	}
}
