//go:build unix

package schemahead

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used, so that benchmarks on
// a loaded machine can report work done rather than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
