//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package hub

// diskFree is unknown on this platform: the space check is skipped.
func diskFree(string) (free uint64, dev uint64, ok bool) { return 0, 0, false }
