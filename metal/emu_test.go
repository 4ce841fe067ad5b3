package metal

import (
	"testing"

	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/shaders/emu"
)

// TestConformanceEmulated runs the shared backend conformance suite on the
// backend's host logic over the emulated GPU: every op's kernel choice,
// launch geometry and buffer binding, with the real shader source.
func TestConformanceEmulated(t *testing.T) {
	if !emu.Available() {
		t.Skipf("%s not found: the emulated-GPU conformance run needs clang-19", emu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates every kernel")
	}
	b, err := NewEmulated()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conformance.Run(t, b)
}
