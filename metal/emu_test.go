package metal

import (
	"os"
	"sync"
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
	conformance.Run(t, emulated(t))
}

// shared is the emulated backend the tests share (building it compiles or
// loads every shader harness); TestMain closes it.
var shared struct {
	once sync.Once
	b    *Backend
	err  error
}

func emulated(t *testing.T) *Backend {
	t.Helper()
	shared.once.Do(func() { shared.b, shared.err = NewEmulated() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.b
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.b != nil {
		shared.b.Close()
	}
	os.Exit(code)
}
