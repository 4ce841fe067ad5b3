package cpu_test

import (
	"fmt"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/cpu"
)

func TestConformance(t *testing.T) {
	for _, threads := range []int{1, 3} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			conformance.Run(t, cpu.New(backend.Options{Threads: threads}))
		})
		t.Run(fmt.Sprintf("precise/threads=%d", threads), func(t *testing.T) {
			conformance.Run(t, cpu.New(backend.Options{Threads: threads, Precise: true}))
		})
	}
}

func TestRegistry(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "cpu" || b.Threads() != 2 {
		t.Errorf("got %s with %d threads", b.Name(), b.Threads())
	}
	if _, err := backend.Open("nope", backend.Options{}); err == nil {
		t.Error("unknown backend opened")
	}
	if _, err := backend.Open("cpu", backend.Options{Threads: -1}); err == nil {
		t.Error("negative threads accepted")
	}
}
