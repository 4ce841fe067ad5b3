//go:build mslemu

package metal

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/internal/mslemu"
)

// TestConformanceEmulated runs the shared backend conformance suite on the
// backend's host logic over the emulated GPU: every op's kernel choice,
// launch geometry and buffer binding, with the real shader source.
func TestConformanceEmulated(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated-GPU conformance run needs clang-19", mslemu.Clang)
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

// TestSelfTestEmulated runs `clef selftest`'s checks (untimed) on the
// emulated GPU against the CPU backend.
func TestSelfTestEmulated(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates every kernel at the model's sizes")
	}
	var out bytes.Buffer
	failed, err := SelfTest(context.Background(), &out, emulated(t), cpu.New(backend.Options{}), SelfTestOptions{})
	if err != nil || failed != 0 {
		t.Fatalf("%d checks failed (%v):\n%s", failed, err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"ok   conformance MoE", "moe q4_K/q6_K parted experts", "moe q4_K/q6_K contiguous experts"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
