package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrChecksum is wrapped by the error of a file whose bytes do not match
// the listing's hash or size; nothing of it is kept.
var ErrChecksum = errors.New("checksum mismatch")

// newHash returns the hash a file is verified with: sha256 for LFS files,
// the git blob sha1 ("blob SIZE\x00" then the bytes) for the others.
func newHash(f File) hash.Hash {
	if f.LFS() {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", f.Size)
	return h
}

// Fetch brings one file of a commit into blobs/ (verified) and returns the
// blob's path and the bytes transferred. A blob already there with the
// right size is reused. A partial blob (.incomplete) is resumed with a
// Range request. add, when not nil, is told of every byte received.
func (c *Client) Fetch(ctx context.Context, cache *Cache, repo, commit string, f File, add func(int64)) (blob string, got int64, err error) {
	if err := validFileName(f.Name); err != nil {
		return "", 0, err
	}
	if !isHex(f.ETag(), len(f.ETag())) || (len(f.ETag()) != 40 && len(f.ETag()) != 64) {
		return "", 0, fmt.Errorf("hub: %s: bad etag %q", f.Name, f.ETag())
	}
	blob = cache.BlobPath(repo, f.ETag())
	if st, err := os.Stat(blob); err == nil && st.Mode().IsRegular() && st.Size() == f.Size {
		return blob, 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return "", 0, err
	}
	unlock, err := lockBlob(ctx, cache, repo, f.ETag(), c.Notef)
	if err != nil {
		return "", 0, err
	}
	defer unlock()
	// Another process may have finished it while we waited for the lock.
	if st, err := os.Stat(blob); err == nil && st.Mode().IsRegular() && st.Size() == f.Size {
		return blob, 0, nil
	}
	part := blob + ".incomplete"
	got, err = c.transfer(ctx, repo, commit, f, part, add)
	if err != nil {
		return "", got, err
	}
	if err := os.Rename(part, blob); err != nil {
		return "", got, err
	}
	return blob, got, nil
}

// transfer fills part with the file, resuming what it holds, and verifies
// it. On a checksum or size mismatch the partial file is removed.
func (c *Client) transfer(ctx context.Context, repo, commit string, f File, part string, add func(int64)) (int64, error) {
	what := repo + "/" + f.Name
	fh, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	h := newHash(f)
	// Hash what an earlier run left, so the check covers the whole file.
	have, err := io.Copy(h, io.LimitReader(fh, f.Size+1))
	if err != nil {
		return 0, fmt.Errorf("%s: reading the partial file: %w", what, err)
	}
	if have > f.Size {
		if have, err = restart(fh, &h, f); err != nil {
			return 0, err
		}
	}
	var got int64
	fails, restarts := 0, 0
	for have < f.Size {
		n, resp, err := c.transferOnce(ctx, repo, commit, f, fh, h, have, add)
		got += n
		have += n
		if err == nil {
			continue
		}
		if errors.Is(err, ErrChecksum) {
			// The Hub's headers or the bytes contradict the listing:
			// another try would get the same answer.
			fh.Close()
			os.Remove(part)
			return got, err
		}
		var rs *restartError
		if errors.As(err, &rs) {
			// A server that keeps answering a resume badly must not
			// make the transfer start over forever.
			restarts++
			if restarts >= c.attempts() {
				return got, fmt.Errorf("%s: giving up after %d restarts from byte 0: %w", what, restarts, err)
			}
			c.notef("%s: %v; starting over", what, err)
			if err := c.waitRetry(ctx, nil, restarts, what); err != nil {
				return got, err
			}
			if have, err = restart(fh, &h, f); err != nil {
				return got, err
			}
			continue
		}
		var he *Error
		if errors.As(err, &he) || ctx.Err() != nil || errors.Is(err, ErrOffline) || errors.Is(err, ErrRedirectRefused) {
			return got, err
		}
		if n == 0 {
			fails++
		} else {
			fails = 0 // progress: a cut connection is resumed, not counted
		}
		if fails >= c.attempts() {
			return got, fmt.Errorf("%s: giving up after %d tries: %w", what, fails, err)
		}
		c.notef("%s: %v; resuming at byte %d", what, err, have)
		if err := c.waitRetry(ctx, resp, max(fails, 1), what); err != nil {
			return got, err
		}
	}
	if err := fh.Sync(); err != nil {
		return got, err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.ETag() {
		fh.Close()
		os.Remove(part)
		kind := "git blob sha1"
		if f.LFS() {
			kind = "sha256"
		}
		return got, fmt.Errorf("%s: %w: %s %s, the listing says %s; the download was discarded", what, ErrChecksum, kind, sum, f.ETag())
	}
	return got, nil
}

// restartError asks transfer to truncate and start the file over.
type restartError struct{ why string }

func (e *restartError) Error() string { return e.why }

func restart(fh *os.File, h *hash.Hash, f File) (int64, error) {
	if err := fh.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	*h = newHash(f)
	return 0, nil
}

// transferOnce sends one request for the bytes from have on and appends
// what arrives to fh and h. It returns the bytes appended, and the answer
// when it was a retryable status (for its Retry-After).
func (c *Client) transferOnce(ctx context.Context, repo, commit string, f File, fh *os.File, h hash.Hash, have int64, add func(int64)) (int64, *http.Response, error) {
	what := repo + "/" + f.Name
	var hdr http.Header
	if have > 0 {
		hdr = http.Header{"Range": {"bytes=" + strconv.FormatInt(have, 10) + "-"}}
	}
	// Identity: sizes and resumes are about the stored bytes.
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Accept-Encoding", "identity")
	resp, first, err := c.get(ctx, c.resolveURL(repo, commit, f.Name), hdr)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if err := checkHeaders(first, f, commit); err != nil {
		return 0, nil, fmt.Errorf("%s: %w", what, err)
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != have {
			return 0, nil, &restartError{"unexpected Content-Range " + resp.Header.Get("Content-Range")}
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 {
			// The server ignored the range: start over.
			return 0, nil, &restartError{"range ignored"}
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		return 0, nil, &restartError{"range not satisfiable"}
	case retryable(resp.StatusCode):
		return 0, resp, fmt.Errorf("the server answered %s", resp.Status)
	default:
		return 0, nil, c.statusError(resp, repo, what)
	}
	if _, err := fh.Seek(have, io.SeekStart); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, 1<<20)
	var n int64
	left := f.Size - have
	for left > 0 {
		k, rerr := resp.Body.Read(buf[:min(int64(len(buf)), left)])
		if k > 0 {
			if _, werr := fh.Write(buf[:k]); werr != nil {
				return n, nil, werr
			}
			h.Write(buf[:k])
			n += int64(k)
			left -= int64(k)
			if add != nil {
				add(int64(k))
			}
		}
		if rerr == io.EOF {
			if left > 0 {
				return n, nil, io.ErrUnexpectedEOF
			}
			break
		}
		if rerr != nil {
			return n, nil, rerr
		}
	}
	if left == 0 {
		// More bytes than the listing's size mean another file.
		var one [1]byte
		if k, _ := resp.Body.Read(one[:]); k > 0 {
			return n, nil, fmt.Errorf("%w: the server sent more than the listing's %d bytes", ErrChecksum, f.Size)
		}
	}
	return n, nil, nil
}

// checkHeaders compares the Hub's headers for a file (those of the first
// answer, before any redirect to a CDN) with the listing.
func checkHeaders(h http.Header, f File, commit string) error {
	if h == nil {
		return nil
	}
	if rc := h.Get("X-Repo-Commit"); rc != "" && rc != commit {
		return fmt.Errorf("the Hub served commit %s, not %s", rc, commit)
	}
	etag := normEtag(h.Get("X-Linked-Etag"))
	if etag == "" {
		etag = normEtag(h.Get("ETag"))
	}
	if etag != "" && (isHex(etag, 40) || isHex(etag, 64)) && etag != f.ETag() {
		return fmt.Errorf("%w: the Hub's ETag is %s, the listing says %s", ErrChecksum, etag, f.ETag())
	}
	if ls := h.Get("X-Linked-Size"); ls != "" {
		if n, err := strconv.ParseInt(ls, 10, 64); err == nil && n != f.Size {
			return fmt.Errorf("%w: the Hub gives the size %d, the listing %d", ErrChecksum, n, f.Size)
		}
	}
	return nil
}

// normEtag removes the quotes and weak marker of an ETag.
func normEtag(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
	return strings.Trim(v, `"`)
}
