//go:build mslemu

package schemahead

import (
	"fmt"
	"testing"

	"github.com/clefrt/clef/metal"
)

// TestGoldenLogitsEmulatedMetal runs the golden cases of the tiny head on
// the Metal backend over the emulated GPU (the mslemu build tag): the
// backend's host ops and the real shader source, against the PyTorch
// goldens with the float32 tolerances of TestGoldenLogits.
func TestGoldenLogitsEmulatedMetal(t *testing.T) {
	b := metal.EmulatedForTest(t)
	for _, mode := range []int{crossDirect, crossFolded} {
		m, h0, lex := openRelease(t, "release")
		h, err := Load(m, h0.Config())
		if err != nil {
			t.Fatal(err)
		}
		h.crossMode = mode
		if err := h.Bind(b); err != nil {
			t.Fatal(err)
		}
		worst := checkGolden(t, fmt.Sprintf("mode %d", mode), h, lex, readCases(t, "cases.jsonl"))
		t.Logf("mode %d: max |Δlogit| %.3g", mode, worst)
	}
}
