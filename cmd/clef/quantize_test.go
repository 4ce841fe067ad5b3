package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// runClef runs the root command with fresh flag values and returns stdout.
func runClef(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c, _, err := rootCmd.Find(args[:1])
	if err != nil {
		t.Fatal(err)
	}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		f.Value.Set(f.DefValue)
		f.Changed = false
	})
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	defer rootCmd.SetOut(nil)
	rootCmd.SetArgs(args)
	err = rootCmd.Execute()
	return out.String(), err
}

func TestQuantizeAndInspectCommands(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny.gguf")
	s, err := runClef(t, "quantize", "--model", "../../testdata/clef-tiny/release", "--type", "q8_0", "--out", out, "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, "tiny.gguf: 27 tensors") || !strings.Contains(s, "tiny.head.gguf: 176 tensors") || !strings.Contains(s, "q8_0 16") {
		t.Errorf("quantize output:\n%s", s)
	}
	s, err = runClef(t, "inspect", out, "--context", "4096")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"qwen3moe (GGUF v3, q8_0, with companion)", "2 layers, hidden 64", "424.5K (424548) total", "tensors       245", "one decision of 4096 tokens"} {
		if !strings.Contains(s, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, s)
		}
	}
}

func TestQuantizeCommandErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"quantize", "--model", "../../testdata/clef-tiny/release", "--type", "q4_k_s", "--out", filepath.Join(dir, "a.gguf")}, 2, "unknown quantization type"},
		{[]string{"quantize", "--model", "../../testdata/clef-tiny/release", "--type", "q8_0", "--out", filepath.Join(dir, "a.bin")}, 2, "must end in .gguf"},
		{[]string{"quantize", "--type", "q8_0", "--out", filepath.Join(dir, "a.gguf")}, 2, "required"},
		{[]string{"quantize", "--model", "../../testdata/tokenizer", "--type", "q8_0", "--out", filepath.Join(dir, "a.gguf")}, 1, "config.json is missing"},
		{[]string{"inspect", "../../testdata/qwen3moe/README.md"}, 1, "want a model directory, a .gguf or a .safetensors file"},
		{[]string{"inspect", "../../testdata/clef-tiny/release", "--context", "0"}, 2, "--context"},
	} {
		_, err := runClef(t, c.args...)
		ee, ok := err.(*exitError)
		if !ok || ee.code != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want exit %d with %q", c.args, err, c.code, c.want)
		}
	}
}
