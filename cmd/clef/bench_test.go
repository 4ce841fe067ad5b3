package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/clefrt/clef/bench"
)

// runBenchCLI runs clef with args (flags of the command reset first) and
// returns stdout, stderr and the error.
func runBenchCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd, _, err := rootCmd.Find(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		f.Value.Set(f.DefValue)
		f.Changed = false
	})
	var out, errOut bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errOut)
	defer func() {
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
		rootCmd.SetArgs(nil)
	}()
	err = rootCmd.Execute()
	return out.String(), errOut.String(), err
}

// clef bench on the embedded tiny model and its q8_0 quantization writes the
// whole report into a temporary directory.
func TestBenchTinyEndToEnd(t *testing.T) {
	dir := t.TempDir()
	out, errOut, err := runBenchCLI(t, "bench", "--states", "32", "--questions", "1,3", "--options", "3", "--reps", "2", "--warmup", "0",
		"--threads", "1", "--quants", "q8_0", "--out", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for _, f := range []string{bench.ReportJSON, bench.ReportMarkdown, bench.BenchTxt, bench.LatencySVG, bench.AgreementSVG} {
		if !strings.Contains(out, filepath.Join(dir, f)) {
			t.Errorf("%s not reported written:\n%s", f, out)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, bench.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.ReadReport(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Models) != 2 || rep.Reference != "tiny" || rep.Models[1].Name != "q8_0" || rep.Models[1].Agreement["all"] == nil {
		t.Fatalf("models %+v reference %q", rep.Models, rep.Reference)
	}
	if len(rep.Scenarios) != 2 || rep.Scenarios[0].StateTokens != 32 || rep.Scenarios[1].Questions != 3 {
		t.Errorf("scenarios %+v", rep.Scenarios)
	}
	for _, m := range rep.Models {
		for _, s := range m.Scenarios {
			if s.Runs != 2 || s.Latency.P50 <= 0 {
				t.Errorf("%s/%s: %+v", m.Name, s.Scenario, s)
			}
		}
	}
	if !strings.Contains(errOut, "synthetic") {
		t.Error("no note that the tiny model is synthetic")
	}

	// render writes the same report.md again from report.json.
	again := t.TempDir()
	if _, errOut, err := runBenchCLI(t, "bench", "render", filepath.Join(dir, bench.ReportJSON), "--out", again); err != nil {
		t.Fatalf("render: %v\n%s", err, errOut)
	}
	a, _ := os.ReadFile(filepath.Join(dir, bench.ReportMarkdown))
	b, _ := os.ReadFile(filepath.Join(again, bench.ReportMarkdown))
	if len(a) == 0 || string(a) != string(b) {
		t.Error("render wrote another report.md")
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--states", "huge"}, "state size"},
		{[]string{"bench", "--questions", "65"}, "questions"},
		{[]string{"bench", "--options", "1"}, "options"},
		{[]string{"bench", "--reps", "0"}, "--reps"},
		{[]string{"bench", "--records", "0"}, "--records"},
		{[]string{"bench", "--url", "http://x", "--quants", "q8_0"}, "--url"},
		{[]string{"bench", "--quants", "q9_9", "--states", "16", "--questions", "1"}, "q9_9"},
		{[]string{"bench", "--models", "no/such/dir", "--states", "16", "--questions", "1"}, "no/such/dir"},
		{[]string{"bench", "--scenarios", "no/such.jsonl"}, "no/such.jsonl"},
		{[]string{"bench", "synth"}, "--out"},
		{[]string{"bench", "synth", "--out", "x", "--layers", "0"}, "--layers"},
		{[]string{"bench", "kernels", "--types", "q9"}, "q9"},
		{[]string{"bench", "render", "no/such.json", "--out", "x"}, "no/such.json"},
	} {
		_, _, err := runBenchCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}
