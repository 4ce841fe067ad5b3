package hub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/hub/hubtest"
)

// TestPullByCommitWritesNoRef: a revision given as a commit hash gets no
// refs/ entry (huggingface_hub writes refs only for branches and tags),
// and still resolves by the hash.
func TestPullByCommitWritesNoRef(t *testing.T) {
	h := newFake(t, nil)
	cache := newCache(t)
	if _, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/tiny", PullOptions{Revision: commitA}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(cache.RepoDir("org/tiny"), "refs")); len(ents) != 0 {
		t.Fatalf("refs/ holds %d entries after a pull by commit", len(ents))
	}
	if r, err := cache.Resolve(Ref{Repo: "org/tiny", Revision: commitA}); err != nil || !r.Weights {
		t.Fatalf("Resolve by commit: %+v, %v", r, err)
	}
}

// linkSink is a shard sink during whose conversion another process pulls
// the same shards into a snapshot of its own.
type linkSink struct {
	cache *Cache
	repo  string
	seen  []File
}

func (s *linkSink) Space([]File) (int64, string) { return 0, "" }
func (s *linkSink) Begin(string, []File) error   { return nil }
func (s *linkSink) Finish(string) error          { return nil }
func (s *linkSink) Shard(f File, blob string) error {
	s.seen = append(s.seen, f)
	if len(s.seen) == 1 {
		dst := filepath.Join(s.cache.SnapshotDir(s.repo, commitB), filepath.FromSlash(f.Name))
		os.MkdirAll(filepath.Dir(dst), 0o755)
		return os.Symlink(filepath.Join("..", "..", "blobs", f.ETag()), dst)
	}
	return nil
}

// TestPullSinkKeepsLinkedBlob: after a shard is converted, its blob is
// deleted only when no snapshot links to it; one another process linked
// meanwhile stays.
func TestPullSinkKeepsLinkedBlob(t *testing.T) {
	h := newFake(t, nil)
	cache := newCache(t)
	sink := &linkSink{cache: cache, repo: "org/tiny"}
	if _, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/tiny", PullOptions{Sink: sink, Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	if len(sink.seen) < 2 {
		t.Fatalf("the sink got %d shards, want 2", len(sink.seen))
	}
	if !exists(cache.BlobPath("org/tiny", sink.seen[0].ETag())) {
		t.Error("the blob another snapshot links to was deleted")
	}
	for _, f := range sink.seen[1:] {
		if exists(cache.BlobPath("org/tiny", f.ETag())) {
			t.Errorf("%s: the converted shard's blob was kept", f.Name)
		}
	}
}

// TestSameBlobFetchedOnce: two files of a listing with the same content
// (one ETag) fetched in parallel make one transfer into one blob, which
// both names link to.
func TestSameBlobFetchedOnce(t *testing.T) {
	const shard = "model-00001-of-00002.safetensors"
	orig, err := os.ReadFile(filepath.Join(tinyRelease, shard))
	if err != nil {
		t.Fatal(err)
	}
	h := newFake(t, map[string]*hubtest.Repo{"org/tiny": mustRelease(t, map[string]hubtest.File{"copy.safetensors": {Data: orig, LFS: true}})})
	cache := newCache(t)
	res, err := newClient(h, &sleeps{}).Pull(context.Background(), cache, "org/tiny", PullOptions{Jobs: 4})
	if err != nil {
		t.Fatal(err)
	}
	oid := hubtest.SHA256(orig)
	n := 0
	for _, r := range h.Requests() {
		if r.Server == "cdn" && strings.Contains(r.Path, oid) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the shared content was transferred %d times, want once", n)
	}
	for _, name := range []string{shard, "copy.safetensors"} {
		if target, err := os.Readlink(filepath.Join(res.Snapshot, name)); err != nil || target != "../../blobs/"+oid {
			t.Errorf("%s -> %q, %v", name, target, err)
		}
	}
}

func mustRelease(t *testing.T, extra map[string]hubtest.File) *hubtest.Repo {
	t.Helper()
	r, err := hubtest.ReleaseRepo(tinyRelease, commitA, extra)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
