package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const qwen3Tokenizer = "../../testdata/tokenizer/qwen3"

// runTokenize runs `clef tokenize args...` with stdin, flags reset first.
func runTokenize(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	args = append([]string{"tokenize"}, args...)
	cmd, _, err := rootCmd.Find(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		f.Value.Set(f.DefValue)
		f.Changed = false
	})
	var out bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetIn(strings.NewReader(stdin))
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&bytes.Buffer{})
	defer func() {
		rootCmd.SetIn(nil)
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
	}()
	err = rootCmd.Execute()
	return out.String(), err
}

func TestTokenizeArgs(t *testing.T) {
	out, err := runTokenize(t, "", "--tokenizer", qwen3Tokenizer, "Hello, world!", "", "a  b")
	if err != nil {
		t.Fatal(err)
	}
	if want := "[9707,11,1879,0]\n[]\n[64,220,293]\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	out, err = runTokenize(t, "", "--tokenizer", qwen3Tokenizer+"/tokenizer.json", "--omni", " <|audio_pad|> ")
	if err != nil || out != "[220,151675,220]\n" {
		t.Errorf("--omni: %q, %v", out, err)
	}
}

// The golden corpus through --jsonl gives the golden ids, line by line.
func TestTokenizeJSONL(t *testing.T) {
	data, err := os.ReadFile(qwen3Tokenizer + "/golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runTokenize(t, string(data), "--tokenizer", qwen3Tokenizer, "--jsonl")
	if err != nil {
		t.Fatal(err)
	}
	in := bufio.NewScanner(bytes.NewReader(data))
	in.Buffer(nil, 1<<26)
	got := bufio.NewScanner(strings.NewReader(out))
	got.Buffer(nil, 1<<26)
	n := 0
	for in.Scan() {
		if !got.Scan() {
			t.Fatalf("output ends after %d lines", n)
		}
		n++
		var want, have struct {
			IDs []int `json:"ids"`
		}
		if err := json.Unmarshal(in.Bytes(), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got.Bytes(), &have); err != nil {
			t.Fatalf("output line %d: %v", n, err)
		}
		if !slices.Equal(want.IDs, have.IDs) {
			t.Errorf("line %d: %v, want %v", n, have.IDs, want.IDs)
		}
	}
	if n != 378 || got.Scan() {
		t.Errorf("%d lines in, output has more or fewer", n)
	}
}

func TestTokenizeErrors(t *testing.T) {
	cases := []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"x"}, "--tokenizer is required"},
		{"", []string{"--tokenizer", "no/such/file", "x"}, "no/such/file"},
		{"{\"text\": 1}\n", []string{"--tokenizer", qwen3Tokenizer, "--jsonl"}, "line 1"},
		{"{\"text\": \"a\"}\nnot json\n", []string{"--tokenizer", qwen3Tokenizer, "--jsonl"}, "line 2"},
		{"{\"txt\": \"a\"}\n", []string{"--tokenizer", qwen3Tokenizer, "--jsonl"}, `no "text"`},
		{"", []string{"--tokenizer", qwen3Tokenizer, "--added-tokens", "no/such.json", "x"}, "no/such.json"},
	}
	for _, c := range cases {
		_, err := runTokenize(t, c.stdin, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: err %v, want one line naming %q", c.args, err, c.want)
		}
	}
}
