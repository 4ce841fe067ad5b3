//go:build (amd64 || arm64) && !purego

package kernels

import "testing"

// TestGEMMGenericFallback runs the GEMM table on the generic kernels, as on
// a CPU without the instructions the fast ones need.
func TestGEMMGenericFallback(t *testing.T) {
	saved := fast
	fast = false
	defer func() { fast = saved }()
	gemmTable(t)
}

// TestPkRecsGeneric checks the Go scale decoding of the packed kernels.
func TestPkRecsGeneric(t *testing.T) {
	saved := fast
	fast = false
	defer func() { fast = saved }()
	pkRecsCheck(t)
}

// TestGEMMFloatGenericFallback runs TestGEMMFloat on the generic kernels.
func TestGEMMFloatGenericFallback(t *testing.T) {
	saved := fast
	fast = false
	defer func() { fast = saved }()
	TestGEMMFloat(t)
}
