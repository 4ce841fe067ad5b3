package server

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// processRSS is the process's resident set size in bytes: from
// /proc/self/statm where there is one, else the Go runtime's view.
func processRSS() int64 {
	if data, err := os.ReadFile("/proc/self/statm"); err == nil {
		f := strings.Fields(string(data))
		if len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return pages * int64(os.Getpagesize())
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.Sys)
}
