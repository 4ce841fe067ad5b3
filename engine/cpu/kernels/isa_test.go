//go:build (amd64 || arm64) && !purego

package kernels

import "testing"

// forEachISA runs f with every kernel level forced in turn (as
// CLEF_CPU_ISA would), skipping, and saying so, the levels this CPU lacks.
func forEachISA(t *testing.T, f func(t *testing.T)) {
	saved := level
	defer setISA(saved)
	for l := isaGeneric; l < isaLevel(len(isaNames)); l++ {
		t.Run(l.String(), func(t *testing.T) {
			if l > cpuLevel {
				t.Skipf("this CPU runs at most %s: the %s kernels (%s) are not covered here", cpuLevel, l, isaNeeds[l])
			}
			setISA(l)
			defer setISA(saved)
			if Accelerated() != l.String() {
				t.Fatalf("Accelerated() = %q at level %s", Accelerated(), l)
			}
			f(t)
		})
	}
}

// TestGEMMEachISA runs the shared GEMM table and the fast-versus-generic
// checks at every kernel level this CPU runs.
func TestGEMMEachISA(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		gemmTable(t)
		TestFastMatchesGeneric(t)
	})
}
