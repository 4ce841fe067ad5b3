package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clefrt/clef/hub/hubtest"
)

const (
	tinyRelease = "../testdata/clef-tiny/release-bf16"
	commitA     = "0db1cd2607d76a7bdb2a382f659e7b313079f84b"
	commitB     = "1111111111111111111111111111111111111111"
)

// extras are files of the repository that the runtime does not need.
var extras = map[string]hubtest.File{
	"README.md":             {Data: []byte("# tiny\n")},
	"joint_schema_model.py": {Data: []byte("print('not for clef')\n")},
	".gitattributes":        {Data: []byte("*.safetensors filter=lfs\n")},
}

// sleeps records the waits of a client instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return nil
}

func newFake(t *testing.T, repos map[string]*hubtest.Repo) *hubtest.Hub {
	t.Helper()
	if repos == nil {
		r, err := hubtest.ReleaseRepo(tinyRelease, commitA, extras)
		if err != nil {
			t.Fatal(err)
		}
		repos = map[string]*hubtest.Repo{"org/tiny": r}
	}
	h := hubtest.New(repos)
	t.Cleanup(h.Close)
	return h
}

func newClient(h *hubtest.Hub, s *sleeps) *Client {
	return &Client{Endpoint: h.Hub.URL, HTTP: h.Hub.Client(), UserAgent: "test", MaxAttempts: 4, MaxWait: time.Minute, Sleep: s.sleep}
}

func newCache(t *testing.T) *Cache {
	d := t.TempDir()
	return &Cache{Dir: filepath.Join(d, "hub"), QuantDir: filepath.Join(d, "clef", "quantized")}
}

// releaseFiles lists the tiny release with the hash the Hub names each by.
func releaseFiles(t *testing.T) map[string]string {
	ents, err := os.ReadDir(tinyRelease)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(tinyRelease, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".safetensors") {
			out[e.Name()] = hubtest.SHA256(b)
		} else {
			out[e.Name()] = hubtest.GitSHA1(b)
		}
	}
	return out
}

// TestPullCacheLayout checks the cache file by file against the layout
// huggingface_hub documents: blobs named by sha256 (LFS) or git sha1,
// snapshot entries that are relative symlinks ../../blobs/ETAG,
// refs/main holding the commit without a newline, nothing else.
func TestPullCacheLayout(t *testing.T) {
	h := newFake(t, nil)
	h.Token = "hf_secret"
	c := newClient(h, &sleeps{})
	c.Token = h.Token
	cache := newCache(t)
	res, err := c.Pull(context.Background(), cache, "org/tiny", PullOptions{Jobs: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != commitA || res.Excluded != len(extras) || len(res.Speech) != 0 {
		t.Fatalf("commit %s, excluded %d, speech %v", res.Commit, res.Excluded, res.Speech)
	}
	want := releaseFiles(t)
	repoDir := filepath.Join(cache.Dir, "models--org--tiny")
	// Top level: blobs, refs, snapshots only.
	var top []string
	ents, _ := os.ReadDir(repoDir)
	for _, e := range ents {
		top = append(top, e.Name())
	}
	if !slices.Equal(top, []string{"blobs", "refs", "snapshots"}) {
		t.Fatalf("repo folder holds %v", top)
	}
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != commitA {
		t.Fatalf("refs/main = %q, %v", ref, err)
	}
	snap := filepath.Join(repoDir, "snapshots", commitA)
	ents, _ = os.ReadDir(snap)
	if len(ents) != len(want) {
		t.Fatalf("snapshot holds %d files, want %d", len(ents), len(want))
	}
	var wantBlobs []string
	for name, etag := range want {
		p := filepath.Join(snap, name)
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatalf("%s: not a symlink: %v", name, err)
		}
		if target != "../../blobs/"+etag {
			t.Errorf("%s -> %s, want ../../blobs/%s", name, target, etag)
		}
		got, err := os.ReadFile(p)
		orig, _ := os.ReadFile(filepath.Join(tinyRelease, name))
		if err != nil || string(got) != string(orig) {
			t.Errorf("%s: contents differ from the release (%v)", name, err)
		}
		wantBlobs = append(wantBlobs, etag)
	}
	sort.Strings(wantBlobs)
	var blobs []string
	ents, _ = os.ReadDir(filepath.Join(repoDir, "blobs"))
	for _, e := range ents {
		blobs = append(blobs, e.Name())
		if st, _ := e.Info(); st.Mode()&0o222 == 0 || !st.Mode().IsRegular() {
			t.Errorf("blob %s: mode %v", e.Name(), st.Mode())
		}
	}
	if !slices.Equal(blobs, wantBlobs) {
		t.Fatalf("blobs %v\nwant %v", blobs, wantBlobs)
	}
	// The CDN never saw the token; the Hub did.
	sawHub := false
	for _, r := range h.Requests() {
		if r.Server == "cdn" && r.Auth {
			t.Errorf("the token was sent to the CDN: %s", r.Path)
		}
		sawHub = sawHub || r.Server == "hub" && r.Auth
	}
	if !sawHub {
		t.Error("the token was never sent to the Hub")
	}
	// A second pull transfers nothing.
	res2, err := c.Pull(context.Background(), cache, "org/tiny", PullOptions{})
	if err != nil || res2.Transferred != 0 || res2.Reused != len(want) {
		t.Fatalf("second pull: %+v, %v", res2, err)
	}
	// Resolve finds it by name, offline.
	r, err := cache.Resolve(Ref{Repo: "org/tiny"})
	if err != nil || r.Snapshot != snap || !r.Weights {
		t.Fatalf("Resolve: %+v, %v", r, err)
	}
}

// TestPullResumesCutTransfer cuts an LFS transfer mid-file: the retry asks
// for the rest with a Range header and the CDN serves only the rest.
func TestPullResumesCutTransfer(t *testing.T) {
	h := newFake(t, nil)
	const shard = "model-00001-of-00002.safetensors"
	const cut = 100000
	h.CutAfter[shard] = cut
	c := newClient(h, &sleeps{})
	cache := newCache(t)
	res, err := c.Pull(context.Background(), cache, "org/tiny", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	size := fileSize(filepath.Join(tinyRelease, shard))
	var ranges []string
	for _, r := range h.Requests() {
		if r.Server == "cdn" && strings.Contains(r.Path, releaseFiles(t)[shard]) {
			ranges = append(ranges, r.Range)
		}
	}
	if !slices.Equal(ranges, []string{"", fmt.Sprintf("bytes=%d-", cut)}) {
		t.Fatalf("CDN requests for the shard had ranges %q, want none then bytes=%d-", ranges, cut)
	}
	var total int64
	for _, f := range res.Files {
		total += f.Size
	}
	if res.Transferred != total {
		t.Fatalf("transferred %d bytes, want %d (the cut file is resumed, not restarted; the shard is %d)", res.Transferred, total, size)
	}
	got, _ := os.ReadFile(filepath.Join(res.Snapshot, shard))
	orig, _ := os.ReadFile(filepath.Join(tinyRelease, shard))
	if string(got) != string(orig) {
		t.Fatal("resumed shard differs from the release")
	}
}

// TestPullResumesEarlierPartial resumes a .incomplete blob left by an
// earlier run (clef's or huggingface_hub's).
func TestPullResumesEarlierPartial(t *testing.T) {
	h := newFake(t, nil)
	const shard = "model-00002-of-00002.safetensors"
	cache := newCache(t)
	orig, _ := os.ReadFile(filepath.Join(tinyRelease, shard))
	etag := releaseFiles(t)[shard]
	part := cache.BlobPath("org/tiny", etag) + ".incomplete"
	os.MkdirAll(filepath.Dir(part), 0o755)
	if err := os.WriteFile(part, orig[:12345], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/tiny", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range h.Requests() {
		if r.Server == "cdn" && strings.Contains(r.Path, etag) && r.Range != "bytes=12345-" {
			t.Fatalf("shard requested with range %q, want bytes=12345-", r.Range)
		}
	}
	got, _ := os.ReadFile(cache.BlobPath("org/tiny", etag))
	if string(got) != string(orig) {
		t.Fatal("blob differs")
	}
	if _, err := os.Stat(part); !errors.Is(err, os.ErrNotExist) {
		t.Fatal(".incomplete left behind")
	}
}

// TestPullRefusesBadChecksum serves one shard with a byte changed: the
// pull fails, nothing is in snapshots, the bad bytes are not kept.
func TestPullRefusesBadChecksum(t *testing.T) {
	h := newFake(t, nil)
	const shard = "model-00002-of-00002.safetensors"
	h.Corrupt[shard] = true
	cache := newCache(t)
	_, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/tiny", PullOptions{})
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), shard) {
		t.Fatalf("err = %v, want a checksum error naming %s", err, shard)
	}
	if ents, _ := os.ReadDir(filepath.Join(cache.RepoDir("org/tiny"), "snapshots")); len(ents) != 0 {
		t.Fatalf("snapshots holds %d entries after a failed pull", len(ents))
	}
	if _, err := os.Stat(filepath.Join(cache.RepoDir("org/tiny"), "refs", "main")); err == nil {
		t.Fatal("refs/main written after a failed pull")
	}
	etag := releaseFiles(t)[shard]
	for _, p := range []string{cache.BlobPath("org/tiny", etag), cache.BlobPath("org/tiny", etag) + ".incomplete"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s kept", filepath.Base(p))
		}
	}
	// A non-LFS file is checked by its git blob sha1.
	h2 := newFake(t, nil)
	h2.Corrupt["tokenizer.json"] = true
	_, err = newClient(h2, &sleeps{}).Pull(context.Background(), newCache(t), "org/tiny", PullOptions{})
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "git blob sha1") {
		t.Fatalf("corrupt tokenizer.json: %v", err)
	}
}

// TestPullGated checks the answers for a gated repository: 401 without a
// token and 403 with a wrong one, each saying what to do, never printing
// the token; the right token gets it.
func TestPullGated(t *testing.T) {
	repo, _ := hubtest.ReleaseRepo(tinyRelease, commitA, nil)
	repo.Gated = true
	h2 := newFake(t, map[string]*hubtest.Repo{"org/gated": repo})
	h2.Token = "hf_right"
	c := newClient(h2, &sleeps{})
	_, err := c.Pull(context.Background(), newCache(t), "org/gated", PullOptions{})
	if !IsAuth(err) {
		t.Fatalf("no token: %v", err)
	}
	for _, s := range []string{"401", "accept its terms on " + h2.Hub.URL + "/org/gated", "HF_TOKEN", "huggingface-cli login"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("no-token message %q lacks %q", err, s)
		}
	}
	c.Token = "hf_wrong_secret"
	_, err = c.Pull(context.Background(), newCache(t), "org/gated", PullOptions{})
	if !IsAuth(err) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "accept the model's terms") {
		t.Fatalf("wrong token: %v", err)
	}
	if strings.Contains(err.Error(), "hf_wrong_secret") {
		t.Fatal("the token is in the error message")
	}
	c.Token = "hf_right"
	if _, err := c.Pull(context.Background(), newCache(t), "org/gated", PullOptions{}); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

// TestPullNotFound: an unknown repository or revision is a 404 naming it.
func TestPullNotFound(t *testing.T) {
	h := newFake(t, nil)
	c := newClient(h, &sleeps{})
	_, err := c.Pull(context.Background(), newCache(t), "org/nope", PullOptions{})
	if !IsNotFound(err) || !strings.Contains(err.Error(), "org/nope: not found") {
		t.Fatalf("unknown repo: %v", err)
	}
	_, err = c.Pull(context.Background(), newCache(t), "org/tiny", PullOptions{Revision: "v9"})
	if !IsNotFound(err) || !strings.Contains(err.Error(), "org/tiny@v9: revision not found") {
		t.Fatalf("unknown revision: %v", err)
	}
}

// TestPullRetries: 429 with Retry-After waits what it says, then
// succeeds; 503 backs off 1 s, 2 s; a Hub that keeps failing is given up
// after MaxAttempts.
func TestPullRetries(t *testing.T) {
	h := newFake(t, nil)
	h.Limit, h.RetryAfter = 1, "7"
	s := &sleeps{}
	if _, err := newClient(h, s).Pull(context.Background(), newCache(t), "org/tiny", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.d, []time.Duration{7 * time.Second}) {
		t.Fatalf("waits %v, want [7s] (Retry-After)", s.d)
	}
	h.Fail5xx = 2
	s = &sleeps{}
	if _, err := newClient(h, s).Pull(context.Background(), newCache(t), "org/tiny", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.d, []time.Duration{time.Second, 2 * time.Second}) {
		t.Fatalf("waits %v, want [1s 2s] (backoff)", s.d)
	}
	h.Limit, h.RetryAfter = 100, "1"
	s = &sleeps{}
	_, err := newClient(h, s).Pull(context.Background(), newCache(t), "org/tiny", PullOptions{})
	var he *Error
	if !errors.As(err, &he) || he.Status != 429 || len(s.d) != 3 {
		t.Fatalf("endless 429: %v after %d waits, want a 429 error after 3", err, len(s.d))
	}
	// A Retry-After longer than MaxWait fails at once.
	h.Limit, h.RetryAfter = 1, "3600"
	_, err = newClient(h, &sleeps{}).Pull(context.Background(), newCache(t), "org/tiny", PullOptions{})
	if err == nil || !strings.Contains(err.Error(), "retry after 1h0m0s") {
		t.Fatalf("long Retry-After: %v", err)
	}
}

// TestPullSkipsSpeechShards: a shard holding only talker.* / code2wav.*
// tensors is left out unless AllFiles.
func TestPullSkipsSpeechShards(t *testing.T) {
	repo, err := hubtest.ReleaseRepo(tinyRelease, commitA, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := repo.Commits[commitA]
	var idx map[string]any
	json.Unmarshal(files[IndexFile].Data, &idx)
	wm := idx["weight_map"].(map[string]any)
	wm["talker.model.layers.0.mlp.weight"] = "model-00003-of-00003.safetensors"
	wm["code2wav.decoder.weight"] = "model-00003-of-00003.safetensors"
	b, _ := json.Marshal(idx)
	files[IndexFile] = hubtest.File{Data: b}
	files["model-00003-of-00003.safetensors"] = hubtest.File{Data: []byte("speech weights"), LFS: true}
	h := newFake(t, map[string]*hubtest.Repo{"org/speech": repo})
	c := newClient(h, &sleeps{})
	res, err := c.Pull(context.Background(), newCache(t), "org/speech", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Speech) != 1 || res.Speech[0].Name != "model-00003-of-00003.safetensors" {
		t.Fatalf("speech shards %v", res.Speech)
	}
	// The shards that mix thinker and speech tensors stay.
	if _, err := os.Stat(filepath.Join(res.Snapshot, "model-00001-of-00002.safetensors")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(res.Snapshot, "model-00003-of-00003.safetensors")); err == nil {
		t.Fatal("speech shard fetched")
	}
	res, err = c.Pull(context.Background(), newCache(t), "org/speech", PullOptions{AllFiles: true})
	if err != nil || len(res.Speech) != 0 {
		t.Fatalf("--all-files: %v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(res.Snapshot, "model-00003-of-00003.safetensors")); err != nil {
		t.Fatal("--all-files: speech shard missing")
	}
}

// TestPullInclude: --include replaces the runtime patterns.
func TestPullInclude(t *testing.T) {
	h := newFake(t, nil)
	res, err := newClient(h, &sleeps{}).Pull(context.Background(), newCache(t), "org/tiny", PullOptions{Include: []string{"*.json", "README.md"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range res.Files {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	want := []string{"README.md", "config.json", "joint_head_config.json", IndexFile, "processor_config.json", "tokenizer.json", "tokenizer_config.json"}
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
}

// TestListingNamesValidated: a listing naming a path outside the snapshot
// is refused before anything is written.
func TestListingNamesValidated(t *testing.T) {
	for _, bad := range []string{"../../../evil.json", "/etc/passwd.json", `a\..\b.json`, "a//b.json", "./x.json", "a/../../b.json"} {
		repo, _ := hubtest.ReleaseRepo(tinyRelease, commitA, nil)
		repo.Extra = []map[string]any{{"rfilename": bad, "size": 1, "blobId": strings.Repeat("a", 40)}}
		h := newFake(t, map[string]*hubtest.Repo{"org/evil": repo})
		cache := newCache(t)
		_, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/evil", PullOptions{})
		if err == nil || !strings.Contains(err.Error(), "unsafe file name") {
			t.Errorf("%q: err = %v", bad, err)
		}
		if _, err := os.Stat(cache.Dir); err == nil {
			t.Errorf("%q: the cache was written to", bad)
		}
	}
	for _, id := range []string{"../x", "a/b/c", "a--b/c", "/abs", "a/..", "org/", "org/na me", `org\name`} {
		if ValidRepo(id) == nil {
			t.Errorf("ValidRepo(%q) accepted", id)
		}
	}
	for _, rev := range []string{"../main", "a//b", "/main", "main/", ".hidden", "x.lock", "a b"} {
		if ValidRevision(rev) == nil {
			t.Errorf("ValidRevision(%q) accepted", rev)
		}
	}
	for _, rev := range []string{"main", "refs/pr/1", "v1.0", commitA} {
		if err := ValidRevision(rev); err != nil {
			t.Errorf("ValidRevision(%q): %v", rev, err)
		}
	}
}

// TestEndpointAndRedirectPolicy: plain http only on loopback, redirects
// only to https or loopback.
func TestEndpointAndRedirectPolicy(t *testing.T) {
	for ep, ok := range map[string]bool{
		"https://huggingface.co":  true,
		"https://hf-mirror.com/":  true,
		"http://127.0.0.1:8080":   true,
		"http://[::1]:1":          true,
		"http://localhost:9":      true,
		"http://huggingface.co":   false,
		"ftp://huggingface.co":    false,
		"https://user:pw@host.io": false,
		"huggingface.co":          false,
	} {
		if _, err := checkEndpoint(ep); (err == nil) != ok {
			t.Errorf("checkEndpoint(%q): %v", ep, err)
		}
	}
	// A redirect to plain http on another host is refused before any
	// request goes there.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://cdn.example.invalid/blob", http.StatusFound)
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client(), Sleep: (&sleeps{}).sleep}
	_, _, err := c.get(context.Background(), srv.URL+"/org/x/resolve/main/f", nil)
	if err == nil || !strings.Contains(err.Error(), "refusing to follow a redirect to http://cdn.example.invalid") {
		t.Fatalf("redirect to http: %v", err)
	}
}

// TestTokenFromEnv: HF_TOKEN, else the file huggingface-cli login writes.
func TestTokenFromEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	if tok, err := tokenFromEnv(); err != nil || tok != "" {
		t.Fatalf("no token: %q %v", tok, err)
	}
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_file\n"), 0o600)
	if tok, _ := tokenFromEnv(); tok != "hf_file" {
		t.Fatalf("token file: %q", tok)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if tok, _ := tokenFromEnv(); tok != "hf_env" {
		t.Fatalf("HF_TOKEN: %q", tok)
	}
}

// TestOffline: no request is made; a cached model resolves, another is
// refused.
func TestOffline(t *testing.T) {
	h := newFake(t, nil)
	c := newClient(h, &sleeps{})
	cache := newCache(t)
	if _, err := c.Pull(context.Background(), cache, "org/tiny", PullOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(h.Requests())
	c.Offline = true
	res, err := c.Pull(context.Background(), cache, "org/tiny", PullOptions{})
	if err != nil || !res.Offline || res.Commit != commitA {
		t.Fatalf("offline pull of a cached model: %+v %v", res, err)
	}
	if _, err := c.Pull(context.Background(), cache, "org/other", PullOptions{}); !errors.Is(err, ErrOffline) {
		t.Fatalf("offline pull of another: %v", err)
	}
	if len(h.Requests()) != n {
		t.Fatal("requests made offline")
	}
}

// failSink takes the shards and fails to finish, as a conversion that ran
// out of disk at the end would.
type failSink struct{ shards int }

func (s *failSink) Space([]File) (int64, string) { return 0, "" }
func (s *failSink) Begin(string, []File) error   { return nil }
func (s *failSink) Shard(File, string) error     { s.shards++; return nil }
func (s *failSink) Finish(string) error          { return errors.New("disk full") }

// TestPullSinkFinishBeforeRef: with a shard sink (clef pull --quantize),
// the revision's ref is written only after the sink finished, so a failed
// conversion leaves no name that resolves to it.
func TestPullSinkFinishBeforeRef(t *testing.T) {
	h := newFake(t, nil)
	cache := newCache(t)
	sink := &failSink{}
	_, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/tiny", PullOptions{Sink: sink})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v, want the sink's failure", err)
	}
	if sink.shards == 0 {
		t.Fatal("the sink was given no shard")
	}
	if _, err := os.Stat(filepath.Join(cache.RepoDir("org/tiny"), "refs", "main")); err == nil {
		t.Fatal("refs/main written though the sink did not finish")
	}
}
