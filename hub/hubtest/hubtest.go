// Package hubtest is a fake Hugging Face Hub for tests: the revision API
// and resolve URLs of the real one, LFS files redirected to a separate CDN
// server, and switches that make it misbehave on purpose (cut transfers,
// corrupt bytes, rate limits, gated repositories).
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// File is one file of a fake repository.
type File struct {
	Data []byte
	LFS  bool
}

// Repo is a fake repository: revisions (branch or tag names) pointing to
// commits, and each commit's files.
type Repo struct {
	Refs    map[string]string
	Commits map[string]map[string]File
	// Gated answers 401 without a token and 403 with a wrong one.
	Gated bool
	// Extra are listing entries served as they are (bad names, for tests).
	Extra []map[string]any
}

// Request is one request either server received.
type Request struct {
	Server string // "hub" or "cdn"
	Path   string
	Range  string
	Auth   bool // an Authorization header was sent
}

// Hub is the fake Hub; CDN serves the LFS files the Hub redirects to.
type Hub struct {
	Hub, CDN *httptest.Server
	// Token is the only token accepted for gated repositories.
	Token string

	mu    sync.Mutex
	repos map[string]*Repo
	reqs  []Request
	// CutAfter cuts the first transfer of a file (by name) after that
	// many bytes: the connection closes mid-body.
	CutAfter map[string]int64
	// CutRepeat cuts every transfer of a file from byte 0 (CutAfter), not
	// only the first.
	CutRepeat bool
	// BadRange answers a Range request for a file (by name) with 206 and
	// a Content-Range from byte 0, not from the byte asked for.
	BadRange map[string]bool
	// BadEtag makes the Hub's answer for a file (by name) name another
	// ETag than the listing does.
	BadEtag map[string]bool
	// Corrupt serves a file (by name) with one byte changed.
	Corrupt map[string]bool
	// Limit answers the first N API requests 429 with Retry-After (in seconds).
	Limit      int
	RetryAfter string
	// Fail5xx answers the first N API requests 503 without Retry-After.
	Fail5xx int
	cut     map[string]bool
}

// New starts a fake Hub serving repos (id -> repository).
func New(repos map[string]*Repo) *Hub {
	h := &Hub{repos: repos, CutAfter: map[string]int64{}, BadRange: map[string]bool{}, BadEtag: map[string]bool{}, Corrupt: map[string]bool{}, cut: map[string]bool{}}
	h.CDN = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.Hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	return h
}

// Close stops both servers.
func (h *Hub) Close() {
	h.Hub.Close()
	h.CDN.Close()
}

// Requests returns the requests received so far.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.reqs...)
}

func (h *Hub) log(server string, r *http.Request) {
	h.mu.Lock()
	h.reqs = append(h.reqs, Request{Server: server, Path: r.URL.Path, Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization") != ""})
	h.mu.Unlock()
}

// SHA256 and GitSHA1 are the two hashes the Hub names files by.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// GitSHA1 is the git blob id of b.
func GitSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// pointer is the LFS pointer file git stores for an LFS file.
func pointer(b []byte) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", SHA256(b), len(b))
}

func (h *Hub) auth(w http.ResponseWriter, r *http.Request, repo *Repo) bool {
	if !repo.Gated {
		return true
	}
	a := r.Header.Get("Authorization")
	switch {
	case a == "":
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "gated", http.StatusUnauthorized)
		return false
	case a != "Bearer "+h.Token:
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "gated", http.StatusForbidden)
		return false
	}
	return true
}

func (h *Hub) commitOf(repo *Repo, rev string) (string, bool) {
	if c, ok := repo.Refs[rev]; ok {
		return c, true
	}
	_, ok := repo.Commits[rev]
	return rev, ok
}

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.log("hub", r)
	if rest, ok := strings.CutPrefix(r.URL.Path, "/api/models/"); ok {
		h.serveAPI(w, r, rest)
		return
	}
	// /ORG/NAME/resolve/COMMIT/FILE
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
	if len(parts) < 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	repo, ok := h.repos[parts[0]+"/"+parts[1]]
	if !ok {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "no repo", http.StatusNotFound)
		return
	}
	if !h.auth(w, r, repo) {
		return
	}
	commit, ok := h.commitOf(repo, parts[3])
	if !ok {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "no revision", http.StatusNotFound)
		return
	}
	name := parts[4]
	f, ok := repo.Commits[commit][name]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "no file", http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	h.mu.Lock()
	badEtag := h.BadEtag[name]
	h.mu.Unlock()
	if badEtag {
		other := SHA256(append([]byte("other "), f.Data...))
		if !f.LFS {
			other = GitSHA1(append([]byte("other "), f.Data...))
		}
		w.Header().Set("X-Linked-Etag", `"`+other+`"`)
	}
	if f.LFS {
		if !badEtag {
			w.Header().Set("X-Linked-Etag", `"`+SHA256(f.Data)+`"`)
		}
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		w.Header().Set("ETag", `"`+GitSHA1(pointer(f.Data))+`"`)
		w.Header().Set("Location", h.CDN.URL+"/lfs/"+SHA256(f.Data)+"?name="+url.QueryEscape(name))
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitSHA1(f.Data)+`"`)
	h.serveBytes(w, r, name, f.Data)
}

func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	h.mu.Lock()
	limited, failed := h.Limit > 0, h.Fail5xx > 0
	if limited {
		h.Limit--
	} else if failed {
		h.Fail5xx--
	}
	h.mu.Unlock()
	if limited {
		if h.RetryAfter != "" {
			w.Header().Set("Retry-After", h.RetryAfter)
		}
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	}
	if failed {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	// ORG/NAME/revision/REV
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 || parts[2] != "revision" {
		http.NotFound(w, r)
		return
	}
	repo, ok := h.repos[parts[0]+"/"+parts[1]]
	if !ok {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "no repo", http.StatusNotFound)
		return
	}
	if !h.auth(w, r, repo) {
		return
	}
	rev, _ := url.PathUnescape(parts[3])
	commit, ok := h.commitOf(repo, rev)
	if !ok {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "no revision", http.StatusNotFound)
		return
	}
	files := repo.Commits[commit]
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var sib []map[string]any
	for _, n := range names {
		f := files[n]
		e := map[string]any{"rfilename": n, "size": len(f.Data)}
		if f.LFS {
			e["blobId"] = GitSHA1(pointer(f.Data))
			e["lfs"] = map[string]any{"sha256": SHA256(f.Data), "size": len(f.Data), "pointerSize": len(pointer(f.Data))}
		} else {
			e["blobId"] = GitSHA1(f.Data)
		}
		sib = append(sib, e)
	}
	sib = append(sib, repo.Extra...)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": parts[0] + "/" + parts[1], "sha": commit, "siblings": sib})
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.log("cdn", r)
	oid, ok := strings.CutPrefix(r.URL.Path, "/lfs/")
	name := r.URL.Query().Get("name")
	if !ok {
		http.NotFound(w, r)
		return
	}
	for _, repo := range h.repos {
		for _, files := range repo.Commits {
			if f, ok := files[name]; ok && f.LFS && SHA256(f.Data) == oid {
				h.serveBytes(w, r, name, f.Data)
				return
			}
		}
	}
	http.NotFound(w, r)
}

// serveBytes answers a GET with data, honouring "Range: bytes=N-", and
// misbehaving as the switches say.
func (h *Hub) serveBytes(w http.ResponseWriter, r *http.Request, name string, data []byte) {
	h.mu.Lock()
	corrupt, badRange := h.Corrupt[name], h.BadRange[name]
	cutAt, cut := h.CutAfter[name]
	if h.CutRepeat {
		cut = cut && r.Header.Get("Range") == ""
	} else if cut && h.cut[name] {
		cut = false
	}
	if cut {
		h.cut[name] = true
	}
	h.mu.Unlock()
	if corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	start := 0
	if rg := r.Header.Get("Range"); rg != "" {
		v, ok := strings.CutPrefix(rg, "bytes=")
		a, _, _ := strings.Cut(v, "-")
		n, err := strconv.Atoi(a)
		if !ok || err != nil || n < 0 || n >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
		if badRange {
			start = 0
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
	w.Header().Set("Accept-Ranges", "bytes")
	if r.Header.Get("Range") != "" {
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	body := data[start:]
	if cut && cutAt < int64(len(body)) {
		w.Write(body[:cutAt])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Write(body)
}

// ReleaseRepo makes a repository of the files of a release directory at
// one commit (refs "main"): *.safetensors as LFS, the rest in git, plus
// extra files.
func ReleaseRepo(dir, commit string, extra map[string]File) (*Repo, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string]File{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = File{Data: b, LFS: strings.HasSuffix(e.Name(), ".safetensors")}
	}
	for n, f := range extra {
		files[n] = f
	}
	return &Repo{Refs: map[string]string{"main": commit}, Commits: map[string]map[string]File{commit: files}}, nil
}
