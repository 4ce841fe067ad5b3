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

// Cache is a huggingface_hub cache directory, and the directory next to it
// where clef keeps quantized models.
type Cache struct {
	// Dir is the hub cache (…/huggingface/hub).
	Dir string
	// QuantDir holds quantized models: QuantDir/ORG--NAME/COMMIT/TYPE.gguf.
	QuantDir string
}

// Home returns huggingface_hub's home directory: $HF_HOME, else
// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func Home() (string, error) {
	if h := os.Getenv("HF_HOME"); h != "" {
		return h, nil
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("hub: no home directory for the cache (set HF_HOME): %w", err)
	}
	return filepath.Join(home, ".cache", "huggingface"), nil
}

// DefaultCache returns the cache the environment names: $HF_HUB_CACHE, else
// $HF_HOME/hub (see Home). Quantized models go to $HF_HOME/clef/quantized,
// or next to $HF_HUB_CACHE when only that is set.
func DefaultCache() (*Cache, error) {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		q := filepath.Join(filepath.Dir(filepath.Clean(d)), "clef", "quantized")
		if os.Getenv("HF_HOME") != "" {
			q = filepath.Join(os.Getenv("HF_HOME"), "clef", "quantized")
		}
		return &Cache{Dir: d, QuantDir: q}, nil
	}
	home, err := Home()
	if err != nil {
		return nil, err
	}
	return &Cache{Dir: filepath.Join(home, "hub"), QuantDir: filepath.Join(home, "clef", "quantized")}, nil
}

// RepoDir is the folder of a model: Dir/models--ORG--NAME.
func (c *Cache) RepoDir(repo string) string { return filepath.Join(c.Dir, folderName(repo)) }

// BlobPath is where a file with the given ETag (sha256 or git sha1) lives.
func (c *Cache) BlobPath(repo, etag string) string {
	return filepath.Join(c.RepoDir(repo), "blobs", etag)
}

// SnapshotDir is the snapshot of a commit: the model's files by name.
func (c *Cache) SnapshotDir(repo, commit string) string {
	return filepath.Join(c.RepoDir(repo), "snapshots", commit)
}

// QuantizedDir is where clef pull --quantize writes the quantized files of
// a commit.
func (c *Cache) QuantizedDir(repo, commit string) string {
	return filepath.Join(c.QuantDir, strings.ReplaceAll(repo, "/", "--"), commit)
}

// ReadRef returns the commit refs/REVISION records.
func (c *Cache) ReadRef(repo, rev string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(b))
	if !IsCommit(commit) {
		return "", fmt.Errorf("hub: %s refs/%s holds %q, not a commit hash", repo, rev, commit)
	}
	return commit, nil
}

// WriteRef records that rev points to commit (refs/REVISION, the commit
// without a newline, as huggingface_hub writes it), atomically.
func (c *Cache) WriteRef(repo, rev, commit string) error {
	p := filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(rev))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".clef-tmp"
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// ErrNotCached is wrapped by Resolve's error when the model (or its
// revision) is not in the cache.
var ErrNotCached = errors.New("not in the cache")

// Resolved is a model found in the cache.
type Resolved struct {
	Ref    Ref
	Commit string
	// Snapshot is the commit's snapshot directory.
	Snapshot string
	// Weights reports whether the snapshot holds model weights (a pull
	// with --quantize keeps only the configuration files there).
	Weights bool
	// Quantized lists the backbone GGUF files of the commit (TYPE.gguf),
	// sorted.
	Quantized []string
}

// Path is what a model loader should open: the quantized file Ref.Quant
// names, else the snapshot when it holds the weights, else the one
// quantized file.
func (r *Resolved) Path() (string, error) {
	if q := r.Ref.Quant; q != "" {
		for _, p := range r.Quantized {
			if strings.EqualFold(strings.TrimSuffix(filepath.Base(p), ".gguf"), q) {
				return p, nil
			}
		}
		return "", fmt.Errorf("hub: %s: no %s quantization in the cache (%w): run: clef pull %s --quantize %s", r.Ref.Repo, q, ErrNotCached, r.Ref.Repo, q)
	}
	if r.Weights {
		return r.Snapshot, nil
	}
	switch len(r.Quantized) {
	case 0:
		return "", fmt.Errorf("hub: %s: the snapshot %s holds no weights (%w): run: clef pull %s", r.Ref.Repo, r.Commit, ErrNotCached, r.Ref.Repo)
	case 1:
		return r.Quantized[0], nil
	}
	var names []string
	for _, p := range r.Quantized {
		names = append(names, r.Ref.Repo+":"+strings.TrimSuffix(filepath.Base(p), ".gguf"))
	}
	return "", fmt.Errorf("hub: %s has several quantized files; name one: %s", r.Ref.Repo, strings.Join(names, ", "))
}

// Resolve finds a model in the cache without the network: the revision
// through refs/ (or as a commit), then its snapshot.
func (c *Cache) Resolve(ref Ref) (*Resolved, error) {
	if err := ValidRepo(ref.Repo); err != nil {
		return nil, err
	}
	if ref.Revision == "" {
		ref.Revision = DefaultRevision
	}
	if err := ValidRevision(ref.Revision); err != nil {
		return nil, err
	}
	pull := "clef pull " + ref.Repo
	if ref.Revision != DefaultRevision {
		pull += " --revision " + ref.Revision
	}
	commit := ref.Revision
	if !IsCommit(commit) {
		var err error
		commit, err = c.ReadRef(ref.Repo, ref.Revision)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("hub: %s is %w (%s): run: %s", ref, ErrNotCached, c.Dir, pull)
		}
		if err != nil {
			return nil, err
		}
	}
	r := &Resolved{Ref: ref, Commit: commit, Snapshot: c.SnapshotDir(ref.Repo, commit)}
	if st, err := os.Stat(r.Snapshot); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("hub: %s (commit %s) is %w (%s): run: %s", ref, commit, ErrNotCached, c.Dir, pull)
	}
	r.Weights = hasWeights(r.Snapshot)
	r.Quantized = quantizedFiles(c.QuantizedDir(ref.Repo, commit))
	return r, nil
}

// hasWeights reports whether a snapshot holds model weights: a shard index
// whose shards are there, or a .safetensors / .gguf file other than the
// joint head.
func hasWeights(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		n := e.Name()
		if n == "joint_head.safetensors" {
			continue
		}
		if strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".gguf") {
			if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
				return true
			}
		}
	}
	return false
}

// quantizedFiles lists the backbone GGUF files of a quantized directory.
func quantizedFiles(dir string) []string {
	ms, _ := filepath.Glob(filepath.Join(dir, "*.gguf"))
	var out []string
	for _, m := range ms {
		if !strings.HasSuffix(m, ".head.gguf") {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}
