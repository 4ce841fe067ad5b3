//go:build unix

package cpu

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used, for benchmarks that
// must not depend on the machine's load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
