//go:build unix

package weights

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the whole file read-only. An empty file maps to an empty
// slice (mmap of length 0 is an error on most systems).
func mapFile(path string) (*mapped, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	if size == 0 {
		return &mapped{path: path}, nil
	}
	if size != int64(int(size)) {
		return nil, fmt.Errorf("%s: file of %d bytes is too large to map", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	return &mapped{path: path, data: data, unmap: func() error { return syscall.Munmap(data) }}, nil
}
