//go:build !unix

package kernels

import "time"

var start = time.Now()

func cpuTime() time.Duration { return time.Since(start) }
