package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CachedRepo is one model of the cache, as List reports it.
type CachedRepo struct {
	Repo string
	Dir  string
	// Size counts each blob once (snapshots share blobs), partial
	// transfers included.
	Size int64
	// Partial is the bytes of .incomplete transfers.
	Partial   int64
	Revisions []CachedRevision
}

// CachedRevision is one snapshot of a cached model.
type CachedRevision struct {
	Commit string
	// Refs are the revisions (branches, tags) that point to the commit.
	Refs []string
	// Files and Size count the snapshot's files.
	Files int
	Size  int64
	// Weights reports whether the snapshot holds the model's weights.
	Weights   bool
	Quantized []QuantFile
}

// QuantFile is a quantized model written by clef pull --quantize.
type QuantFile struct {
	Type string
	Path string // the backbone TYPE.gguf
	// Size counts the backbone and its companion TYPE.head.gguf.
	Size int64
}

// List scans the cache: every model folder, its snapshots and refs, and
// the quantized files of each commit. Entries that are not model folders
// (datasets--, spaces--, .locks) are left out.
func (c *Cache) List() ([]CachedRepo, error) {
	ents, err := os.ReadDir(c.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hub: %w", err)
	}
	seen := map[string]bool{}
	var out []CachedRepo
	for _, e := range ents {
		repo := repoOfFolder(e.Name())
		if repo == "" || !e.IsDir() {
			continue
		}
		seen[repo] = true
		out = append(out, c.scanRepo(repo))
	}
	// Quantized files whose snapshot was removed by other tools.
	qents, _ := os.ReadDir(c.QuantDir)
	for _, e := range qents {
		repo := strings.Replace(e.Name(), "--", "/", 1)
		if ValidRepo(repo) != nil || seen[repo] || !e.IsDir() {
			continue
		}
		r := CachedRepo{Repo: repo}
		commits, _ := os.ReadDir(filepath.Join(c.QuantDir, e.Name()))
		for _, cm := range commits {
			if IsCommit(cm.Name()) {
				rv := CachedRevision{Commit: cm.Name(), Quantized: c.quantFiles(repo, cm.Name())}
				for _, q := range rv.Quantized {
					r.Size += q.Size
				}
				r.Revisions = append(r.Revisions, rv)
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Repo < out[j].Repo })
	return out, nil
}

func (c *Cache) scanRepo(repo string) CachedRepo {
	dir := c.RepoDir(repo)
	r := CachedRepo{Repo: repo, Dir: dir}
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	for _, b := range blobs {
		if info, err := b.Info(); err == nil && info.Mode().IsRegular() {
			r.Size += info.Size()
			if strings.HasSuffix(b.Name(), ".incomplete") {
				r.Partial += info.Size()
			}
		}
	}
	refs := map[string][]string{}
	refDir := filepath.Join(dir, "refs")
	filepath.WalkDir(refDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(refDir, p)
		commit := strings.TrimSpace(string(b))
		refs[commit] = append(refs[commit], filepath.ToSlash(rel))
		return nil
	})
	snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	for _, s := range snaps {
		if !s.IsDir() {
			continue
		}
		rv := CachedRevision{Commit: s.Name(), Refs: refs[s.Name()]}
		sort.Strings(rv.Refs)
		sdir := filepath.Join(dir, "snapshots", s.Name())
		filepath.WalkDir(sdir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				rv.Files++
				rv.Size += st.Size()
			}
			return nil
		})
		rv.Weights = hasWeights(sdir)
		rv.Quantized = c.quantFiles(repo, s.Name())
		for _, q := range rv.Quantized {
			r.Size += q.Size
		}
		r.Revisions = append(r.Revisions, rv)
	}
	return r
}

func (c *Cache) quantFiles(repo, commit string) []QuantFile {
	var out []QuantFile
	for _, p := range quantizedFiles(c.QuantizedDir(repo, commit)) {
		q := QuantFile{Type: strings.TrimSuffix(filepath.Base(p), ".gguf"), Path: p}
		for _, f := range []string{p, strings.TrimSuffix(p, ".gguf") + ".head.gguf"} {
			if st, err := os.Stat(f); err == nil {
				q.Size += st.Size()
			}
		}
		out = append(out, q)
	}
	return out
}

// Remove deletes a model from the cache. With all set, the whole model
// folder and its quantized files go. Otherwise only ref's revision does:
// its snapshot, the refs pointing to it, its quantized files, and the
// blobs its snapshot linked to that no other snapshot links to (the whole
// folder when it was the last snapshot and no other blob is left). Blobs
// no snapshot links to are left alone: they may be a pull in progress. It
// returns the bytes freed.
func (c *Cache) Remove(ref Ref, all bool) (int64, error) {
	if err := ValidRepo(ref.Repo); err != nil {
		return 0, err
	}
	dir := c.RepoDir(ref.Repo)
	qdir := filepath.Join(c.QuantDir, strings.ReplaceAll(ref.Repo, "/", "--"))
	_, errRepo := os.Stat(dir)
	_, errQ := os.Stat(qdir)
	if errRepo != nil && errQ != nil {
		return 0, fmt.Errorf("hub: %s is %w (%s)", ref.Repo, ErrNotCached, c.Dir)
	}
	if all {
		freed := treeSize(dir) + treeSize(qdir)
		if err := os.RemoveAll(dir); err != nil {
			return 0, err
		}
		return freed, os.RemoveAll(qdir)
	}
	if err := ValidRevision(ref.Revision); err != nil {
		return 0, err
	}
	commit := ref.Revision
	if !IsCommit(commit) {
		var err error
		if commit, err = c.ReadRef(ref.Repo, ref.Revision); err != nil {
			return 0, fmt.Errorf("hub: %s: revision %s is %w", ref.Repo, ref.Revision, ErrNotCached)
		}
	}
	snap := c.SnapshotDir(ref.Repo, commit)
	cq := c.QuantizedDir(ref.Repo, commit)
	if _, err := os.Stat(snap); err != nil {
		if _, err := os.Stat(cq); err != nil {
			return 0, fmt.Errorf("hub: %s@%s (commit %s) is %w", ref.Repo, ref.Revision, commit, ErrNotCached)
		}
	}
	freed := treeSize(cq)
	if err := os.RemoveAll(cq); err != nil {
		return 0, err
	}
	os.Remove(filepath.Dir(cq)) // only when empty
	// The blobs the snapshot links to, read before it goes: only those
	// may be deleted. Other blobs no snapshot links to belong to pulls in
	// progress (clef and huggingface_hub link a blob only after fetching
	// it) and stay.
	own := snapshotBlobs(dir, snap)
	if err := os.RemoveAll(snap); err != nil {
		return freed, err
	}
	// Refs that pointed to the commit.
	refDir := filepath.Join(dir, "refs")
	filepath.WalkDir(refDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == commit {
				os.Remove(p)
			}
		}
		return nil
	})
	// A blob is deleted under its lock (one a download holds is skipped),
	// and only when no snapshot links to it once the locks are held.
	var locked []string
	for b := range own {
		unlock, ok, err := tryLockBlob(c, ref.Repo, b)
		if err != nil || !ok {
			continue
		}
		defer unlock()
		locked = append(locked, b)
	}
	used := linkedBlobs(dir)
	for _, b := range locked {
		if used[b] {
			continue
		}
		p := filepath.Join(dir, "blobs", b)
		if info, err := os.Lstat(p); err == nil && info.Mode().IsRegular() {
			if err := os.Remove(p); err == nil {
				freed += info.Size()
			}
		}
	}
	// The model's last snapshot: the folder goes when nothing else is
	// left in blobs/.
	if snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(snaps) == 0 {
		if blobs, _ := os.ReadDir(filepath.Join(dir, "blobs")); len(blobs) == 0 {
			freed += treeSize(dir)
			return freed, os.RemoveAll(dir)
		}
	}
	return freed, nil
}

// snapshotBlobs returns the names of the blobs (in dir/blobs) that the
// links of a snapshot point to.
func snapshotBlobs(dir, snap string) map[string]bool {
	blobs := filepath.Join(dir, "blobs")
	out := map[string]bool{}
	filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		t, err := os.Readlink(p)
		if err != nil {
			return nil
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		if t = filepath.Clean(t); filepath.Dir(t) == blobs && !strings.HasSuffix(t, ".incomplete") {
			out[filepath.Base(t)] = true
		}
		return nil
	})
	return out
}

// linkedBlobs returns the base names of the link targets of every
// snapshot of a model folder: the blobs in use.
func linkedBlobs(dir string) map[string]bool {
	used := map[string]bool{}
	filepath.WalkDir(filepath.Join(dir, "snapshots"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			if t, err := os.Readlink(p); err == nil {
				used[filepath.Base(t)] = true
			}
		}
		return nil
	})
	return used
}

// treeSize sums the regular files under dir (symlinks not followed).
func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
