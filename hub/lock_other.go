//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package hub

import "context"

// fileLock does nothing where flock is not available: only the in-process
// lock (see lockBlob) excludes, between the goroutines of one clef.
func fileLock(context.Context, string, bool, func(string, ...any)) (func(), bool, error) {
	return func() {}, true, nil
}
