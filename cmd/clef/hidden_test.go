package main

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// TestHiddenRequest: clef hidden --request writes the hidden states of a
// whole record, media included, as the reference's thinker computes them
// (clef-tiny's hidden/<case>.npy: the two media records and a text one).
func TestHiddenRequest(t *testing.T) {
	f, err := os.Open("../../testdata/clef-tiny/cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	ran := 0
	for sc.Scan() {
		var c struct {
			Name      string          `json:"name"`
			Request   json.RawMessage `json:"request"`
			MaxLength int             `json:"max_length"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.Name, "media_") && c.Name != "noul_string_state" {
			continue
		}
		dir := t.TempDir()
		req, out := filepath.Join(dir, "req.json"), filepath.Join(dir, "h.npy")
		if err := os.WriteFile(req, c.Request, 0o644); err != nil {
			t.Fatal(err)
		}
		resetHiddenFlags(t)
		rootCmd.SetArgs([]string{"hidden", "--request", req, "--model", "../../testdata/clef-tiny/release", "--backend", "cpu",
			"--max-length", strconv.Itoa(c.MaxLength), "--out", out})
		if err := rootCmd.Execute(); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		got, err := npy.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want, err := npy.ReadFile("../../testdata/clef-tiny/hidden/" + c.Name + ".npy")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Shape, want.Shape) {
			t.Fatalf("%s: shape %v, want %v", c.Name, got.Shape, want.Shape)
		}
		var worst float64
		for i := range got.F {
			worst = max(worst, math.Abs(float64(got.F[i]-want.F[i])))
		}
		if worst > 1e-4 {
			t.Errorf("%s: hidden states up to %.3g off the reference", c.Name, worst)
		}
		t.Logf("%s: %v, max |Δ| %.3g", c.Name, got.Shape, worst)
		ran++
	}
	if ran != 3 {
		t.Fatalf("ran %d cases, want 3", ran)
	}
	// --request and --ids are exclusive; a refused request exits 2.
	for _, args := range [][]string{
		{"hidden", "--request", "x.json", "--ids", "1", "--out", filepath.Join(t.TempDir(), "h.npy")},
		{"hidden", "--request", "x.json"},
	} {
		resetHiddenFlags(t)
		rootCmd.SetArgs(args)
		if err := rootCmd.Execute(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
