package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultEndpoint is the Hub's address when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// Client talks to the Hub (or a mirror).
type Client struct {
	// Endpoint is the Hub's base URL, without a trailing slash.
	Endpoint string
	// Token, when set, goes in the Authorization header of requests to the
	// endpoint's own host, never to a host a redirect leads to.
	Token string
	// Offline refuses every request (HF_HUB_OFFLINE).
	Offline bool
	// HTTP makes the requests; its redirect policy is replaced by the
	// client's own (see get).
	HTTP *http.Client
	// UserAgent names the client.
	UserAgent string
	// MaxAttempts bounds the tries of one request that fails with a
	// retryable status (429, 5xx) or a network error, and the tries of a
	// transfer that makes no progress.
	MaxAttempts int
	// MaxWait bounds one wait (backoff or Retry-After); a longer
	// Retry-After fails the request.
	MaxWait time.Duration
	// Sleep waits between tries (tests replace it).
	Sleep func(ctx context.Context, d time.Duration) error
	// Notef, when set, is told about retries.
	Notef func(format string, args ...any)
	// HeaderTimeout bounds the wait for an answer's headers, and
	// IdleTimeout the wait for the next bytes of a body (60 s each when
	// zero): a stalled request fails and is retried or resumed.
	HeaderTimeout, IdleTimeout time.Duration
}

// defaultTimeout is HeaderTimeout's and IdleTimeout's default.
const defaultTimeout = 60 * time.Second

// NewClient makes a client from the environment: HF_ENDPOINT, HF_TOKEN (else
// the token file), HF_HUB_OFFLINE.
func NewClient() (*Client, error) {
	ep := os.Getenv("HF_ENDPOINT")
	if ep == "" {
		ep = DefaultEndpoint
	}
	ep, err := checkEndpoint(ep)
	if err != nil {
		return nil, err
	}
	tok, err := tokenFromEnv()
	if err != nil {
		return nil, err
	}
	return &Client{
		Endpoint:      ep,
		Token:         tok,
		Offline:       OfflineFromEnv(),
		HTTP:          &http.Client{Transport: http.DefaultTransport},
		UserAgent:     "clef-hub/1",
		MaxAttempts:   6,
		MaxWait:       2 * time.Minute,
		Sleep:         sleepCtx,
		HeaderTimeout: defaultTimeout,
		IdleTimeout:   defaultTimeout,
	}, nil
}

// OfflineFromEnv reports whether HF_HUB_OFFLINE asks for no network.
func OfflineFromEnv() bool {
	switch strings.ToUpper(strings.TrimSpace(os.Getenv("HF_HUB_OFFLINE"))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// checkEndpoint accepts https URLs, and http ones on a loopback host.
func checkEndpoint(ep string) (string, error) {
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("hub: HF_ENDPOINT %q is not a base URL like https://huggingface.co", ep)
	}
	if !allowedURL(u) {
		return "", fmt.Errorf("hub: HF_ENDPOINT %q: only https is allowed (plain http only on a loopback address)", ep)
	}
	return strings.TrimRight(ep, "/"), nil
}

// allowedURL reports whether an endpoint may be u: https, or http on a
// loopback host.
func allowedURL(u *url.URL) bool {
	switch u.Scheme {
	case "https":
		return u.Host != ""
	case "http":
		return isLoopback(u.Hostname())
	}
	return false
}

// allowedHop reports whether a request of a redirect chain from the
// endpoint base may go to u: https, or http on loopback only when the
// endpoint itself is plain http on loopback (a local mirror or a test).
// An https Hub never sends the client to plain http, loopback included.
func allowedHop(base, u *url.URL) bool {
	if u.Scheme == "http" && !(base.Scheme == "http" && isLoopback(base.Hostname())) {
		return false
	}
	return allowedURL(u)
}

// ErrRedirectRefused is wrapped by the error of a request that a redirect
// sent to a URL the client does not follow (not https); it is not retried.
var ErrRedirectRefused = errors.New("redirect refused")

// errStalled is wrapped by the error of a request whose answer did not
// come within HeaderTimeout, or whose body stopped for IdleTimeout; such a
// request is retried.
var errStalled = errors.New("stalled")

// redact drops the query, fragment and user of a URL: a CDN's signed
// query is a temporary credential that must not reach logs or errors.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.IndexAny(raw, "?#"); i >= 0 {
			return raw[:i]
		}
		return raw
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment, u.User = "", false, "", "", nil
	return u.String()
}

// redactErr redacts the URL of a *url.Error in err.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redact(ue.URL)
	}
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenFromEnv returns $HF_TOKEN, else the file at $HF_TOKEN_PATH, else
// $HF_HOME/token ("" when there is none).
func tokenFromEnv() (string, error) {
	if t := strings.TrimSpace(os.Getenv("HF_TOKEN")); t != "" {
		return t, nil
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		home, err := Home()
		if err != nil {
			return "", nil
		}
		p = filepath.Join(home, "token")
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("hub: reading the token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ErrOffline is returned for any request while the client is offline.
var ErrOffline = errors.New("hub: offline (HF_HUB_OFFLINE is set): only models already in the cache can be used")

// Error is an HTTP error answer of the Hub, with what to do about it.
type Error struct {
	Status int
	// Code is the Hub's X-Error-Code (GatedRepo, RepoNotFound,
	// RevisionNotFound, EntryNotFound), when it gave one.
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// IsNotFound reports whether err is a 404 of the Hub.
func IsNotFound(err error) bool {
	var he *Error
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}

// IsAuth reports whether err is a 401 or 403 of the Hub.
func IsAuth(err error) bool {
	var he *Error
	return errors.As(err, &he) && (he.Status == http.StatusUnauthorized || he.Status == http.StatusForbidden)
}

// statusError describes a failed answer about what (a repo, a file).
func (c *Client) statusError(resp *http.Response, repo, what string) error {
	code := resp.Header.Get("X-Error-Code")
	page := c.Endpoint + "/" + repo
	e := &Error{Status: resp.StatusCode, Code: code}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || code == "GatedRepo":
		if c.Token == "" {
			e.Msg = fmt.Sprintf("%s: access denied (%d): the model is gated or private, or does not exist. If it is gated, accept its terms on %s, then set HF_TOKEN to a token of that account (or run: huggingface-cli login)", what, resp.StatusCode, page)
		} else {
			e.Msg = fmt.Sprintf("%s: access denied (%d) with the token given: accept the model's terms on %s with the token's account (gated models), or use a token with read access (HF_TOKEN or huggingface-cli login)", what, resp.StatusCode, page)
		}
	case resp.StatusCode == http.StatusNotFound:
		switch code {
		case "RevisionNotFound":
			e.Msg = fmt.Sprintf("%s: revision not found on %s", what, c.Endpoint)
		case "EntryNotFound":
			e.Msg = fmt.Sprintf("%s: file not found", what)
		default:
			e.Msg = fmt.Sprintf("%s: not found on %s (check the name on %s)", what, c.Endpoint, page)
		}
	default:
		e.Msg = fmt.Sprintf("%s: the Hub answered %s", what, resp.Status)
	}
	if m := resp.Header.Get("X-Error-Message"); m != "" && len(m) < 300 {
		e.Msg += " (" + strconv.Quote(m) + ")"
	}
	return e
}

// retryable reports whether a status is worth another try.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500 && status != http.StatusNotImplemented
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// backoff is the wait before try n+1 (n counts from 1): 1 s, 2 s, 4 s, …
// up to MaxWait.
func (c *Client) backoff(n int) time.Duration {
	d := time.Second << min(n-1, 10)
	return min(d, c.maxWait())
}

func (c *Client) maxWait() time.Duration {
	if c.MaxWait > 0 {
		return c.MaxWait
	}
	return 2 * time.Minute
}

func (c *Client) attempts() int {
	if c.MaxAttempts > 0 {
		return c.MaxAttempts
	}
	return 6
}

func (c *Client) notef(format string, args ...any) {
	if c.Notef != nil {
		c.Notef(format, args...)
	}
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	return sleepCtx(ctx, d)
}

// waitRetry waits before another try after a failed one: Retry-After when
// the answer gave one (bounded by MaxWait), else the backoff for try n.
func (c *Client) waitRetry(ctx context.Context, resp *http.Response, n int, what string) error {
	d := c.backoff(n)
	if resp != nil {
		if ra, ok := retryAfter(resp.Header, time.Now()); ok {
			if ra > c.maxWait() {
				return fmt.Errorf("%s: the Hub asks to retry after %s (rate limited): try again later", what, ra.Round(time.Second))
			}
			d = ra
		}
	}
	return c.sleep(ctx, d)
}

// maxRedirects bounds a chain of redirects.
const maxRedirects = 10

// get sends one GET (no retries), following redirects itself: only to
// https (or loopback http), and with the token only while the request
// stays on the endpoint's host. first holds the headers of the first
// answer (a redirect carries the Hub's X-Linked-Etag and X-Repo-Commit).
func (c *Client) get(ctx context.Context, rawURL string, hdr http.Header) (resp *http.Response, first http.Header, err error) {
	if c.Offline {
		return nil, nil, ErrOffline
	}
	base, err := url.Parse(c.Endpoint)
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	hc := *c.httpClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for hop := 0; ; hop++ {
		if !allowedHop(base, u) {
			return nil, first, fmt.Errorf("hub: refusing to follow a redirect to %s://%s (https only): %w", u.Scheme, u.Host, ErrRedirectRefused)
		}
		hopCtx, cancel := context.WithCancel(ctx)
		req, err := http.NewRequestWithContext(hopCtx, http.MethodGet, u.String(), nil)
		if err != nil {
			cancel()
			return nil, first, redactErr(err)
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("User-Agent", c.UserAgent)
		if c.Token != "" && u.Scheme == base.Scheme && u.Host == base.Host {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		// The answer's headers must come within HeaderTimeout.
		hd := timeoutOr(c.HeaderTimeout)
		stalled := time.AfterFunc(hd, cancel)
		resp, err := hc.Do(req)
		if !stalled.Stop() {
			cancel()
			if resp != nil {
				resp.Body.Close()
			}
			if ctx.Err() == nil {
				return nil, first, fmt.Errorf("hub: %s: no answer within %s: %w", redact(u.String()), hd, errStalled)
			}
		}
		if err != nil {
			cancel()
			return nil, first, redactErr(err)
		}
		if first == nil {
			first = resp.Header
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode < 300 || resp.StatusCode > 399 || loc == "" || resp.StatusCode == http.StatusNotModified {
			resp.Body = newIdleBody(resp.Body, timeoutOr(c.IdleTimeout), cancel)
			return resp, first, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		cancel()
		if hop >= maxRedirects {
			return nil, first, fmt.Errorf("hub: more than %d redirects from %s", maxRedirects, redact(rawURL))
		}
		next, err := u.Parse(loc)
		if err != nil {
			return nil, first, fmt.Errorf("hub: bad redirect location: %w", redactErr(err))
		}
		u = next
	}
}

func timeoutOr(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return defaultTimeout
}

// idleBody is an answer's body that fails with errStalled when no byte
// arrives for a while: a timer, reset by every read that returns bytes,
// cancels the request.
type idleBody struct {
	body   io.ReadCloser
	d      time.Duration
	timer  *time.Timer
	fired  atomic.Bool
	cancel context.CancelFunc
}

func newIdleBody(body io.ReadCloser, d time.Duration, cancel context.CancelFunc) *idleBody {
	b := &idleBody{body: body, d: d, cancel: cancel}
	b.timer = time.AfterFunc(d, func() {
		b.fired.Store(true)
		cancel()
	})
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if b.fired.Load() {
		if err == nil && n == 0 || err != nil && err != io.EOF {
			err = fmt.Errorf("hub: no data for %s: %w", b.d, errStalled)
		}
		return n, err
	}
	if n > 0 {
		b.timer.Reset(b.d)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel()
	return err
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Transport: http.DefaultTransport}
}

// getRetry sends a GET with retries on 429/5xx and network errors; a
// non-2xx answer that is not retried becomes an *Error. The caller closes
// the body.
func (c *Client) getRetry(ctx context.Context, rawURL string, hdr http.Header, repo, what string) (*http.Response, http.Header, error) {
	for n := 1; ; n++ {
		resp, first, err := c.get(ctx, rawURL, hdr)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrOffline) || n >= c.attempts() || !netRetryable(err) {
				return nil, nil, fmt.Errorf("%s: %w", what, err)
			}
			c.notef("%s: %v; retrying (%d/%d)", what, err, n, c.attempts()-1)
			if err := c.waitRetry(ctx, nil, n, what); err != nil {
				return nil, nil, err
			}
			continue
		}
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return resp, first, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if retryable(resp.StatusCode) && n < c.attempts() {
			c.notef("%s: %s; retrying (%d/%d)", what, resp.Status, n, c.attempts()-1)
			if err := c.waitRetry(ctx, resp, n, what); err != nil {
				return nil, nil, err
			}
			continue
		}
		return nil, nil, c.statusError(resp, repo, what)
	}
}

// netRetryable reports whether a transport error may go away on its own
// (not a refused redirect or a bad URL).
func netRetryable(err error) bool {
	if errors.Is(err, errStalled) {
		return true
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return !errors.Is(err, context.Canceled)
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// File is one file of a repository at a commit.
type File struct {
	// Name is the path in the repository ('/'-separated).
	Name string
	Size int64
	// BlobID is the git blob sha1 of the file (of its LFS pointer for
	// LFS files).
	BlobID string
	// SHA256 is the LFS object id; empty for a file stored in git.
	SHA256 string
}

// LFS reports whether the file is stored with git LFS.
func (f File) LFS() bool { return f.SHA256 != "" }

// ETag is the file's name in blobs/: the sha256 of an LFS file, the git
// blob sha1 of the others (what huggingface_hub uses).
func (f File) ETag() string {
	if f.LFS() {
		return f.SHA256
	}
	return f.BlobID
}

// RepoInfo is a repository at a commit: the file list.
type RepoInfo struct {
	Repo   string
	Commit string
	Files  []File
}

// maxListing bounds the JSON of a repository listing.
const maxListing = 64 << 20

// Info resolves a revision to its commit and lists the files with their
// sizes and hashes: GET /api/models/ORG/NAME/revision/REV?blobs=true.
func (c *Client) Info(ctx context.Context, repo, revision string) (*RepoInfo, error) {
	if err := ValidRepo(repo); err != nil {
		return nil, err
	}
	if err := ValidRevision(revision); err != nil {
		return nil, err
	}
	what := repo
	if revision != DefaultRevision {
		what += "@" + revision
	}
	u := c.Endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(revision) + "?blobs=true"
	resp, _, err := c.getRetry(ctx, u, nil, repo, what)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the listing: %w", what, err)
	}
	if len(body) > maxListing {
		return nil, fmt.Errorf("%s: listing larger than %d MiB", what, maxListing>>20)
	}
	var doc struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%s: the Hub's listing is not valid JSON: %v", what, err)
	}
	if !IsCommit(doc.SHA) {
		return nil, fmt.Errorf("%s: the listing names commit %q, not a commit hash", what, doc.SHA)
	}
	if IsCommit(revision) && doc.SHA != revision {
		return nil, fmt.Errorf("%s: the Hub answered for commit %s", what, doc.SHA)
	}
	info := &RepoInfo{Repo: repo, Commit: doc.SHA}
	seen := map[string]bool{}
	for _, s := range doc.Siblings {
		if err := validFileName(s.RFilename); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if seen[s.RFilename] {
			return nil, fmt.Errorf("%s: the listing names %q twice", what, s.RFilename)
		}
		seen[s.RFilename] = true
		f := File{Name: s.RFilename, BlobID: s.BlobID}
		if s.Size == nil || *s.Size < 0 || !isHex(s.BlobID, 40) {
			return nil, fmt.Errorf("%s: the listing gives no size or blob id for %q (an old mirror without ?blobs=true?)", what, s.RFilename)
		}
		f.Size = *s.Size
		if s.LFS != nil {
			if !isHex(s.LFS.SHA256, 64) || s.LFS.Size != f.Size {
				return nil, fmt.Errorf("%s: the listing's LFS entry of %q is malformed", what, s.RFilename)
			}
			f.SHA256 = s.LFS.SHA256
		}
		info.Files = append(info.Files, f)
	}
	// A prefix of one file's path must not be another file.
	for _, f := range info.Files {
		for d := f.Name; strings.Contains(d, "/"); {
			d = d[:strings.LastIndexByte(d, '/')]
			if seen[d] {
				return nil, fmt.Errorf("%s: the listing has both a file %q and a file under it, %q", what, d, f.Name)
			}
		}
	}
	return info, nil
}

// resolveURL is where a file of a commit is fetched from.
func (c *Client) resolveURL(repo, commit, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return c.Endpoint + "/" + repo + "/resolve/" + commit + "/" + strings.Join(parts, "/")
}

// ReadRange reads n bytes at off of a file of a commit (a Range request):
// how clef reads a shard's safetensors header before the shard.
func (c *Client) ReadRange(ctx context.Context, repo, commit string, f File, off, n int64) ([]byte, error) {
	if off < 0 || n <= 0 || off+n > f.Size {
		return nil, fmt.Errorf("hub: %s: range %d+%d outside the file's %d bytes", f.Name, off, n, f.Size)
	}
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+n-1)}}
	what := repo + "/" + f.Name
	for try := 1; ; try++ {
		resp, _, err := c.getRetry(ctx, c.resolveURL(repo, commit, f.Name), hdr, repo, what)
		if err != nil {
			return nil, err
		}
		var r io.Reader = resp.Body
		if resp.StatusCode == http.StatusOK {
			// The server ignored the range: skip to it.
			if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
				resp.Body.Close()
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		} else if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != off {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: the server answered range %q for bytes %d-", what, resp.Header.Get("Content-Range"), off)
		}
		buf := make([]byte, n)
		_, err = io.ReadFull(r, buf)
		resp.Body.Close()
		if err == nil {
			return buf, nil
		}
		if try >= c.attempts() || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if err := c.waitRetry(ctx, nil, try, what); err != nil {
			return nil, err
		}
	}
}

// contentRangeStart reads the first byte of "bytes START-END/SIZE".
func contentRangeStart(v string) (int64, bool) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil && n >= 0
}
