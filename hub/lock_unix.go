//go:build linux || darwin || freebsd || netbsd || openbsd

package hub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// fileLock takes an flock on the file p (created when missing), the lock
// huggingface_hub takes for a blob. With wait it polls while another
// process holds it; without, ok is false then.
func fileLock(ctx context.Context, p string, wait bool, notef func(string, ...any)) (unlock func(), ok bool, err error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, false, err
	}
	fh, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	told := false
	for {
		err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(fh.Fd()), syscall.LOCK_UN)
				fh.Close()
			}, true, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			fh.Close()
			return nil, false, err
		}
		if !wait && errors.Is(err, syscall.EWOULDBLOCK) {
			fh.Close()
			return nil, false, nil
		}
		if !told && notef != nil && wait {
			notef("waiting for another download of the same file (%s)", p)
			told = true
		}
		select {
		case <-ctx.Done():
			fh.Close()
			return nil, false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
