package bench

import "syscall"

// PeakRSS returns the process's peak resident set in bytes (getrusage's
// maxrss, which darwin reports in bytes).
func PeakRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return int64(ru.Maxrss)
	}
	return 0
}

// ResetPeakRSS cannot restart the peak on darwin: it reports false, and
// peaks are then the process's peak so far.
func ResetPeakRSS() bool { return false }
