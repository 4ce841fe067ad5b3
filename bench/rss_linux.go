package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// PeakRSS returns the process's peak resident set in bytes: VmHWM of
// /proc/self/status, else getrusage's maxrss (KiB on Linux).
func PeakRSS() int64 {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return int64(ru.Maxrss) << 10
	}
	return 0
}

// ResetPeakRSS restarts the peak (writing 5 to /proc/self/clear_refs); it
// reports whether the kernel allowed it.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
