//go:build linux || darwin || freebsd || netbsd || openbsd

package hub

import (
	"os"
	"syscall"
)

// diskFree returns the bytes available to the user on the file system of
// path (its nearest existing parent) and an id of that file system.
func diskFree(path string) (free uint64, dev uint64, ok bool) {
	p := existingParent(path)
	var st syscall.Statfs_t
	if err := syscall.Statfs(p, &st); err != nil {
		return 0, 0, false
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0, 0, false
	}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		dev = uint64(s.Dev)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), dev, true
}
