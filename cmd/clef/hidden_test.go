package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/clefrt/clef/internal/npy"
)

// resetHiddenFlags puts the hidden command's flags back to their defaults:
// cobra keeps flag values between Execute calls.
func resetHiddenFlags(t *testing.T) {
	t.Helper()
	c, _, err := rootCmd.Find([]string{"hidden"})
	if err != nil {
		t.Fatal(err)
	}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		f.Value.Set(f.DefValue)
		f.Changed = false
	})
}

func TestHiddenCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "h.npy")
	resetHiddenFlags(t)
	rootCmd.SetArgs([]string{"hidden", "--model", "../../testdata/qwen3moe/tiny64-f32.gguf", "--ids", "241", "--threads", "1", "--out", out})
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	a, err := npy.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Shape) != 2 || a.Shape[0] != 1 || a.Shape[1] != 64 {
		t.Fatalf("shape %v, want [1 64]", a.Shape)
	}
	want, err := os.ReadFile("../../testdata/qwen3moe/tiny64-f32.s1.hidden.bin")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range a.F {
		w := math.Float32frombits(uint32(want[4*i]) | uint32(want[4*i+1])<<8 | uint32(want[4*i+2])<<16 | uint32(want[4*i+3])<<24)
		if math.Abs(float64(v-w)) > 1e-5 {
			t.Fatalf("value %d: %v, llama.cpp %v", i, v, w)
		}
	}
}

func TestHiddenCommandErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "h.npy")
	for _, args := range [][]string{
		{"hidden", "--model", "../../testdata/clef-tiny/release", "--ids", "1,x", "--out", out},
		{"hidden", "--model", "../../testdata/clef-tiny/release", "--ids", "1,99999", "--out", out},
		{"hidden", "--model", "../../testdata/clef-tiny/release", "--ids", "1", "--backend", "nope", "--out", out},
		{"hidden", "--model", "../../testdata/qwen3moe/README.md", "--ids", "1", "--out", out},
		{"hidden", "--ids", "1", "--out", out},
	} {
		resetHiddenFlags(t)
		rootCmd.SetArgs(args)
		if err := rootCmd.Execute(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
