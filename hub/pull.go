package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// RuntimeFiles are the patterns of the files clef needs from a release or
// MLX repository: weights, configuration, tokenizer, chat template. Code,
// docs and other weight formats are left out.
var RuntimeFiles = []string{"*.safetensors", "*.json", "*.jinja", "tokenizer*", "merges.txt", "vocab.*", "*.tiktoken", "*.model"}

// IndexFile is the shard index of a sharded safetensors release.
const IndexFile = "model.safetensors.index.json"

// SpeechPrefixes are the tensor prefixes of the speech-output modules the
// runtime never loads.
var SpeechPrefixes = []string{"talker.", "code2wav."}

// Progress follows a pull.
type Progress interface {
	// Plan tells what will be transferred: the files not yet in the cache
	// and the bytes still missing.
	Plan(files []File, bytes int64)
	// Add counts bytes received (from several goroutines).
	Add(n int64)
	// Done tells a file is in blobs/, verified (reused: it was there).
	Done(f File, reused bool)
}

// ShardSink takes the weight shards of a pull as they arrive instead of
// the snapshot (clef pull --quantize): each verified shard is given to
// Shard, then its blob is deleted (unless it was already in the cache), so
// the whole release never sits on disk.
type ShardSink interface {
	// Space returns the bytes the sink will write and where, for the disk
	// space check.
	Space(shards []File) (bytes int64, dir string)
	// Begin is called once the other files are in the snapshot.
	Begin(snapshot string, shards []File) error
	// Shard converts one shard; calls are not concurrent.
	Shard(f File, path string) error
	// Finish completes the output once every shard was given; the
	// revision's ref is written only after it succeeds, so a name never
	// resolves to a conversion that did not finish.
	Finish(snapshot string) error
}

// PullOptions tune Pull.
type PullOptions struct {
	// Revision is a branch, tag or commit ("main" when empty).
	Revision string
	// Include, when given, replaces RuntimeFiles: glob patterns matched
	// against the file's path, or its base name for patterns without '/'.
	Include []string
	// AllFiles fetches every file, the speech-output shards included.
	AllFiles bool
	// Jobs is the number of parallel transfers (default 4).
	Jobs     int
	Progress Progress
	Sink     ShardSink
}

// PullResult says what Pull did.
type PullResult struct {
	Repo, Revision, Commit string
	Snapshot               string
	// Files are the files selected (in the snapshot, or given to the sink).
	Files []File
	// Speech are the shards left out because they hold only talker.* /
	// code2wav.* tensors.
	Speech []File
	// Excluded counts the repository's files not selected by the patterns.
	Excluded int
	// Transferred is the bytes received; Reused the files already cached.
	Transferred int64
	Reused      int
	// Offline is set when the client was offline and the cache already
	// had the revision.
	Offline bool
}

// Pull brings a model repository at a revision into the cache: the
// revision's commit, the files the runtime needs (see PullOptions),
// verified, in blobs/, linked from snapshots/COMMIT, and refs/REVISION.
// The snapshot links are made only once every file is verified.
func (c *Client) Pull(ctx context.Context, cache *Cache, repo string, o PullOptions) (*PullResult, error) {
	rev := o.Revision
	if rev == "" {
		rev = DefaultRevision
	}
	if err := ValidRepo(repo); err != nil {
		return nil, err
	}
	if err := ValidRevision(rev); err != nil {
		return nil, err
	}
	if c.Offline {
		r, err := cache.Resolve(Ref{Repo: repo, Revision: rev})
		if err != nil {
			return nil, fmt.Errorf("%w; %v", ErrOffline, err)
		}
		return &PullResult{Repo: repo, Revision: rev, Commit: r.Commit, Snapshot: r.Snapshot, Offline: true}, nil
	}
	info, err := c.Info(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	res := &PullResult{Repo: repo, Revision: rev, Commit: info.Commit, Snapshot: cache.SnapshotDir(repo, info.Commit)}
	patterns := RuntimeFiles
	if len(o.Include) > 0 {
		patterns = o.Include
	}
	for _, f := range info.Files {
		if o.AllFiles || matchAny(patterns, f.Name) {
			res.Files = append(res.Files, f)
		} else {
			res.Excluded++
		}
	}
	if len(res.Files) == 0 {
		return nil, fmt.Errorf("%s: no file of the repository matches %s", repo, strings.Join(patterns, " "))
	}
	jobs := o.Jobs
	if jobs <= 0 {
		jobs = 4
	}
	// The index comes first: it says which shards are speech-output only
	// and which files are shards.
	var shardSet map[string]bool
	idx, hasIdx := findFile(res.Files, IndexFile)
	var idxBlob string
	var idxGot int64
	idxHad := hasIdx && fileSize(cache.BlobPath(repo, idx.ETag())) == idx.Size
	if hasIdx {
		blob, n, err := c.Fetch(ctx, cache, repo, info.Commit, idx, nil)
		if err != nil {
			return nil, err
		}
		idxBlob, idxGot = blob, n
		var speech map[string]bool
		if shardSet, speech, err = readIndex(blob); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", repo, IndexFile, err)
		}
		if !o.AllFiles {
			kept := res.Files[:0]
			for _, f := range res.Files {
				if speech[f.Name] {
					res.Speech = append(res.Speech, f)
				} else {
					kept = append(kept, f)
				}
			}
			res.Files = kept
		}
	}
	isShard := func(f File) bool {
		if shardSet != nil {
			return shardSet[f.Name]
		}
		return strings.HasSuffix(f.Name, ".safetensors") && path.Base(f.Name) != "joint_head.safetensors"
	}
	var small, shards []File
	for _, f := range res.Files {
		if hasIdx && f.Name == IndexFile {
			continue // fetched above
		}
		if o.Sink != nil && isShard(f) {
			shards = append(shards, f)
		} else {
			small = append(small, f)
		}
	}
	if o.Sink != nil && len(shards) == 0 {
		return nil, fmt.Errorf("%s: no weight shards to convert", repo)
	}

	// What is missing, and the space it needs.
	var todo []File
	var missing int64
	var maxShard int64
	for _, f := range res.Files {
		early := hasIdx && f.Name == IndexFile && !idxHad
		if st, err := os.Stat(cache.BlobPath(repo, f.ETag())); err == nil && st.Size() == f.Size && !early {
			continue
		}
		todo = append(todo, f)
		left := f.Size
		if st, err := os.Stat(cache.BlobPath(repo, f.ETag()) + ".incomplete"); err == nil && st.Size() <= f.Size && !early {
			left -= st.Size()
		}
		missing += left
		if o.Sink != nil && isShard(f) {
			maxShard = max(maxShard, f.Size)
		}
	}
	need := missing
	var sinkBytes int64
	var sinkDir string
	if o.Sink != nil {
		// Only `jobs` shards are on disk at once.
		var shardMissing int64
		for _, f := range todo {
			if isShard(f) {
				shardMissing += f.Size
			}
		}
		need = missing - shardMissing + min(shardMissing, int64(min(jobs, len(shards)))*maxShard)
		sinkBytes, sinkDir = o.Sink.Space(shards)
	}
	if err := checkSpace(cache.Dir, need, sinkDir, sinkBytes); err != nil {
		return nil, err
	}
	if o.Progress != nil {
		o.Progress.Plan(todo, missing)
	}
	blobs := map[string]string{}
	if hasIdx {
		blobs[IndexFile] = idxBlob
		res.Transferred += idxGot
		if idxHad {
			res.Reused++
		}
		if o.Progress != nil && !idxHad {
			o.Progress.Add(idxGot)
			o.Progress.Done(idx, false)
		}
	}
	var mu sync.Mutex
	done := func(f File, blob string, n int64) {
		mu.Lock()
		blobs[f.Name] = blob
		res.Transferred += n
		if n == 0 {
			res.Reused++
		}
		mu.Unlock()
	}
	fetch := func(ctx context.Context, f File) (string, error) {
		had := fileSize(cache.BlobPath(repo, f.ETag())) == f.Size
		var add func(int64)
		if o.Progress != nil {
			add = o.Progress.Add
		}
		blob, n, err := c.Fetch(ctx, cache, repo, info.Commit, f, add)
		if err != nil {
			return "", err
		}
		done(f, blob, n)
		if o.Progress != nil {
			o.Progress.Done(f, had)
		}
		return blob, nil
	}
	if err := parallel(ctx, jobs, small, func(ctx context.Context, f File) error {
		_, err := fetch(ctx, f)
		return err
	}); err != nil {
		return nil, err
	}
	if o.Sink == nil {
		if err := link(cache, repo, info.Commit, res.Files, blobs); err != nil {
			return nil, err
		}
		return res, writeRef(cache, repo, rev, info.Commit)
	}

	if err := link(cache, repo, info.Commit, small, blobs); err != nil {
		return nil, err
	}
	if err := o.Sink.Begin(res.Snapshot, shards); err != nil {
		return nil, err
	}
	var sinkMu sync.Mutex
	err = parallel(ctx, jobs, shards, func(ctx context.Context, f File) error {
		had := fileSize(cache.BlobPath(repo, f.ETag())) == f.Size
		blob, err := fetch(ctx, f)
		if err != nil {
			return err
		}
		sinkMu.Lock()
		defer sinkMu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := o.Sink.Shard(f, blob); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		if !had {
			return dropBlob(ctx, cache, repo, f.ETag(), c.Notef)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := o.Sink.Finish(res.Snapshot); err != nil {
		return nil, err
	}
	return res, writeRef(cache, repo, rev, info.Commit)
}

// writeRef records a branch or tag's commit in refs/. A revision given as
// a commit hash gets no ref, as with huggingface_hub: its snapshot is
// found by the hash.
func writeRef(cache *Cache, repo, rev, commit string) error {
	if IsCommit(rev) {
		return nil
	}
	return cache.WriteRef(repo, rev, commit)
}

// dropBlob deletes a shard's blob once the sink has it (clef pull
// --quantize), under the blob's lock and only when no snapshot links to
// it: another process may have pulled the same file meanwhile.
func dropBlob(ctx context.Context, cache *Cache, repo, etag string, notef func(string, ...any)) error {
	unlock, err := lockBlob(ctx, cache, repo, etag, notef)
	if err != nil {
		return err
	}
	defer unlock()
	if linkedBlobs(cache.RepoDir(repo))[etag] {
		return nil
	}
	if err := os.Remove(cache.BlobPath(repo, etag)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return -1
	}
	return st.Size()
}

// matchAny reports whether name matches one of the glob patterns (a
// pattern without '/' also matches the base name).
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
		if !strings.Contains(p, "/") {
			if ok, _ := path.Match(p, path.Base(name)); ok {
				return true
			}
		}
	}
	return false
}

func findFile(files []File, name string) (File, bool) {
	for _, f := range files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// readIndex reads a shard index: the shard files, and those that hold only
// speech-output tensors.
func readIndex(p string) (shards, speech map[string]bool, err error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.NewDecoder(io.LimitReader(fh, maxListing)).Decode(&idx); err != nil {
		return nil, nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, nil, errors.New("empty or missing weight_map")
	}
	shards = map[string]bool{}
	other := map[string]bool{}
	for name, file := range idx.WeightMap {
		shards[file] = true
		isSpeech := false
		for _, p := range SpeechPrefixes {
			if strings.HasPrefix(name, p) {
				isSpeech = true
			}
		}
		if !isSpeech {
			other[file] = true
		}
	}
	speech = map[string]bool{}
	for f := range shards {
		if !other[f] {
			speech[f] = true
		}
	}
	return shards, speech, nil
}

// parallel runs fn over files on up to jobs goroutines; the first error
// cancels the rest and is returned.
func parallel(ctx context.Context, jobs int, files []File, fn func(context.Context, File) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan File)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(jobs, max(len(files), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := fn(ctx, f); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	// Largest first keeps the parallel transfers busy to the end.
	order := append([]File(nil), files...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].Size > order[j].Size })
feed:
	for _, f := range order {
		select {
		case work <- f:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// link makes snapshots/COMMIT/NAME a relative symlink to blobs/ETAG for
// each file, replacing what was there atomically.
func link(cache *Cache, repo, commit string, files []File, blobs map[string]string) error {
	snap := cache.SnapshotDir(repo, commit)
	for _, f := range files {
		blob, ok := blobs[f.Name]
		if !ok {
			blob = cache.BlobPath(repo, f.ETag())
		}
		dst := filepath.Join(snap, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(dst), blob)
		if err != nil {
			return err
		}
		if cur, err := os.Readlink(dst); err == nil && cur == rel {
			continue
		}
		tmp := dst + ".clef-link"
		os.Remove(tmp)
		if err := os.Symlink(rel, tmp); err != nil {
			return fmt.Errorf("hub: linking %s into the snapshot: %w", f.Name, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("hub: linking %s into the snapshot: %w", f.Name, err)
		}
	}
	return nil
}

// checkSpace refuses a pull when the file systems lack room: need bytes
// for the cache, plus extra bytes in extraDir (the same file system or
// another).
func checkSpace(cacheDir string, need int64, extraDir string, extra int64) error {
	const margin = 64 << 20
	free, dev, ok := diskFree(cacheDir)
	if !ok {
		return nil
	}
	total := need
	if extraDir != "" && extra > 0 {
		efree, edev, eok := diskFree(extraDir)
		if eok && edev != dev {
			if uint64(extra+margin) > efree {
				return fmt.Errorf("hub: not enough disk space in %s: %s needed, %s free", existingParent(extraDir), human(extra), human(int64(efree)))
			}
		} else {
			total += extra
		}
	}
	if total > 0 && uint64(total+margin) > free {
		return fmt.Errorf("hub: not enough disk space in %s: %s needed, %s free", existingParent(cacheDir), human(total), human(int64(free)))
	}
	return nil
}

// human formats a size in decimal units.
func human(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// existingParent is p or its nearest existing parent directory.
func existingParent(p string) string {
	p = filepath.Clean(p)
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(p)
		if up == p {
			return p
		}
		p = up
	}
}
