//go:build !unix

package quant

import "time"

var start = time.Now()

func cpuTime() time.Duration { return time.Since(start) }
