package hub

import (
	"context"
	"path/filepath"
	"sync"
)

// A blob's lock has two parts: one in this process (goroutines fetching
// the same blob, on every platform), then huggingface_hub's lock file
// CACHE/.locks/models--ORG--NAME/ETAG.lock (flock, where there is one), so
// that clef and a Python tool never write or delete the same blob at once.

// lockBlob takes the lock of a blob, waiting while another holder has it
// (notef is told once that it waits).
func lockBlob(ctx context.Context, cache *Cache, repo, etag string, notef func(string, ...any)) (func(), error) {
	unlock, _, err := takeBlobLock(ctx, cache, repo, etag, true, notef)
	return unlock, err
}

// tryLockBlob takes the lock of a blob only when it is free: ok is false
// when another download holds it.
func tryLockBlob(cache *Cache, repo, etag string) (unlock func(), ok bool, err error) {
	return takeBlobLock(context.Background(), cache, repo, etag, false, nil)
}

func takeBlobLock(ctx context.Context, cache *Cache, repo, etag string, wait bool, notef func(string, ...any)) (func(), bool, error) {
	p := filepath.Join(cache.Dir, ".locks", folderName(repo), etag+".lock")
	relProc, ok, err := procLock(ctx, p, wait, notef)
	if err != nil || !ok {
		return nil, false, err
	}
	relFile, ok, err := fileLock(ctx, p, wait, notef)
	if err != nil || !ok {
		relProc()
		return nil, false, err
	}
	return func() { relFile(); relProc() }, true, nil
}

// procLocks are the blob locks held or awaited in this process, by lock
// file path.
var procLocks = struct {
	sync.Mutex
	m map[string]*procLockEntry
}{m: map[string]*procLockEntry{}}

type procLockEntry struct {
	held chan struct{} // holds one token while the lock is held
	refs int           // holders and waiters; the entry goes at zero
}

// procLock takes the in-process lock named key.
func procLock(ctx context.Context, key string, wait bool, notef func(string, ...any)) (func(), bool, error) {
	procLocks.Lock()
	e := procLocks.m[key]
	if e == nil {
		e = &procLockEntry{held: make(chan struct{}, 1)}
		procLocks.m[key] = e
	}
	e.refs++
	procLocks.Unlock()
	drop := func() {
		procLocks.Lock()
		if e.refs--; e.refs == 0 {
			delete(procLocks.m, key)
		}
		procLocks.Unlock()
	}
	release := func() { <-e.held; drop() }
	select {
	case e.held <- struct{}{}:
		return release, true, nil
	default:
	}
	if !wait {
		drop()
		return nil, false, nil
	}
	if notef != nil {
		notef("waiting for another download of the same file (%s)", key)
	}
	select {
	case e.held <- struct{}{}:
		return release, true, nil
	case <-ctx.Done():
		drop()
		return nil, false, ctx.Err()
	}
}
