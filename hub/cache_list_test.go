package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBlob writes blobs/ETAG of a repository.
func fakeBlob(t *testing.T, cache *Cache, repo, etag, data string) {
	t.Helper()
	p := cache.BlobPath(repo, etag)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeLink makes snapshots/COMMIT/NAME a relative link to blobs/ETAG, as
// huggingface_hub does.
func fakeLink(t *testing.T, cache *Cache, repo, commit, name, etag string) {
	t.Helper()
	dst := filepath.Join(cache.SnapshotDir(repo, commit), name)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "blobs", etag), dst); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestRemoveRevisionBlobs: rm of one revision deletes only the blobs its
// snapshot linked to and no other snapshot uses. A blob no snapshot links
// to yet (a pull in progress links only at the end), a partial transfer,
// a blob another snapshot shares, and a blob whose lock a download holds
// all stay.
func TestRemoveRevisionBlobs(t *testing.T) {
	const repo = "org/tiny"
	cache := newCache(t)
	etag := func(c byte) string { return strings.Repeat(string(c), 64) }
	shared, own, pulling, locked := etag('a'), etag('b'), etag('c'), etag('d')
	fakeBlob(t, cache, repo, shared, "shared")
	fakeBlob(t, cache, repo, own, "own blob")
	fakeBlob(t, cache, repo, pulling, "fetched, not linked yet")
	fakeBlob(t, cache, repo, locked, "locked")
	fakeBlob(t, cache, repo, etag('e')+".incomplete", "part")
	fakeLink(t, cache, repo, commitA, "config.json", shared)
	fakeLink(t, cache, repo, commitB, "config.json", shared)
	fakeLink(t, cache, repo, commitB, "model.safetensors", own)
	fakeLink(t, cache, repo, commitB, "sub/extra.safetensors", locked)
	if err := cache.WriteRef(repo, "v2", commitB); err != nil {
		t.Fatal(err)
	}
	if err := cache.WriteRef(repo, "main", commitA); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockBlob(t.Context(), cache, repo, locked, nil)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := cache.Remove(Ref{Repo: repo, Revision: "v2"}, false)
	unlock()
	if err != nil {
		t.Fatal(err)
	}
	if freed != int64(len("own blob")) {
		t.Errorf("freed %d bytes, want %d (the removed revision's own blob)", freed, len("own blob"))
	}
	if exists(cache.BlobPath(repo, own)) {
		t.Error("the removed revision's own blob is still there")
	}
	for name, e := range map[string]string{"shared": shared, "unlinked (pull in progress)": pulling, "locked": locked, "partial": etag('e') + ".incomplete"} {
		if !exists(cache.BlobPath(repo, e)) {
			t.Errorf("the %s blob was deleted", name)
		}
	}
	if exists(cache.SnapshotDir(repo, commitB)) || exists(filepath.Join(cache.RepoDir(repo), "refs", "v2")) {
		t.Error("v2's snapshot or ref is still there")
	}
	if _, err := cache.Resolve(Ref{Repo: repo}); err != nil {
		t.Errorf("main no longer resolves: %v", err)
	}

	// The last snapshot: its blobs go, but the folder stays while blobs of
	// a pull in progress are there.
	if _, err := cache.Remove(Ref{Repo: repo, Revision: "main"}, false); err != nil {
		t.Fatal(err)
	}
	if exists(cache.BlobPath(repo, shared)) || exists(cache.SnapshotDir(repo, commitA)) {
		t.Error("main's blob or snapshot is still there")
	}
	if !exists(cache.BlobPath(repo, pulling)) {
		t.Error("removing the last snapshot deleted the blob of a pull in progress")
	}
	if _, err := cache.Resolve(Ref{Repo: repo}); !errors.Is(err, ErrNotCached) {
		t.Errorf("removed model resolves: %v", err)
	}

	// With nothing else there, the folder goes with the last snapshot.
	cache2 := newCache(t)
	fakeBlob(t, cache2, repo, own, "x")
	fakeLink(t, cache2, repo, commitA, "config.json", own)
	cache2.WriteRef(repo, "main", commitA)
	if _, err := cache2.Remove(Ref{Repo: repo, Revision: "main"}, false); err != nil {
		t.Fatal(err)
	}
	if exists(cache2.RepoDir(repo)) {
		t.Error("the model folder stays after its last snapshot went")
	}
}
