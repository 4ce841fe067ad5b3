// Package golden holds what the model packages' tests share to compare with
// the reference goldens of testdata/: the tiny Qwen3-Omni's configuration
// and weights, the CPU backend in the precise mode the references are
// matched in, and the largest difference of two outputs. Tests only.
package golden

import (
	"math"
	"os"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// Thinker reads the thinker configuration of dir/config.json.
func Thinker(t testing.TB, dir string) release.Thinker {
	t.Helper()
	data, err := os.ReadFile(dir + "/config.json")
	if err != nil {
		t.Fatal(err)
	}
	th, err := release.ParseThinker(data)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// Weights maps a weights file for the test.
func Weights(t testing.TB, path string) weights.Model {
	t.Helper()
	w, err := weights.Open(path, weights.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// CPU opens the CPU backend (the test registers it by importing
// engine/cpu) with float32 activations for block-quantized weights, the
// mode the float references are matched in; threads 0 means all cores.
func CPU(t testing.TB, threads int) backend.Backend {
	t.Helper()
	b, err := backend.Open("cpu", backend.Options{Threads: threads, Precise: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// MaxDiff returns max |a-b|, or +Inf on a NaN or a length mismatch.
func MaxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = max(m, d)
	}
	return m
}
