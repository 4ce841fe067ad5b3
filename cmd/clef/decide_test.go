package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/clefrt/clef/engine/pyjson"
)

const tinyRelease = "../../testdata/clef-tiny/release"

// run executes the clef command line args with stdin and returns stdout,
// stderr and the error RunE returned. Flags are reset to their defaults
// first, since the commands are package globals.
func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd, _, err := rootCmd.Find(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			sv.Replace(nil) // Set would append to the default's "[]"
		} else {
			f.Value.Set(f.DefValue)
		}
		f.Changed = false
	})
	var out, errOut bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetIn(strings.NewReader(stdin))
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errOut)
	defer func() {
		rootCmd.SetIn(nil)
		rootCmd.SetOut(nil)
		rootCmd.SetErr(nil)
	}()
	err = rootCmd.Execute()
	return out.String(), errOut.String(), err
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

type golden struct {
	Name      string          `json:"name"`
	Request   json.RawMessage `json:"request"`
	MaxLength int             `json:"max_length"`
	Response  json.RawMessage `json:"response"`
	Media     json.RawMessage `json:"media"`
}

func goldens(t *testing.T) []golden {
	t.Helper()
	f, err := os.Open("../../testdata/clef-tiny/cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var g golden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

func TestDecideJSONGolden(t *testing.T) {
	n := 0
	for _, g := range goldens(t) {
		if len(g.Media) > 0 || n == 4 {
			continue
		}
		n++
		out, _, err := run(t, string(g.Request), "decide", "--model", tinyRelease, "--max-length", itoa(g.MaxLength))
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		v, err := pyjson.Decode(g.Response)
		if err != nil {
			t.Fatal(err)
		}
		if want := pyjson.Dumps(v, pyjson.Default) + "\n"; out != want {
			t.Errorf("%s:\n got %s\nwant %s", g.Name, out, want)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestDecideEscalate(t *testing.T) {
	req := string(goldens(t)[7].Request) // multi_question_mixed: noul, choice, score
	out, _, err := run(t, req, "decide", "--model", tinyRelease, "--min-confidence", "0.99", "-")
	if exitCode(err) != exitEscalate {
		t.Fatalf("exit code %d (%v), want %d", exitCode(err), err, exitEscalate)
	}
	if strings.Count(out, `"escalate": true`) != 3 {
		t.Errorf("want every answer marked escalate:\n%s", out)
	}
	out, _, err = run(t, req, "decide", "--model", tinyRelease, "--min-confidence", "0.01")
	if err != nil || strings.Contains(out, "escalate") {
		t.Errorf("--min-confidence 0.01: err %v, output %s", err, out)
	}
	out, _, err = run(t, req, "decide", "--model", tinyRelease, "--format", "table", "--min-confidence", "0.99")
	if exitCode(err) != exitEscalate || strings.Count(out, "ESCALATE") != 3 {
		t.Errorf("table: exit %d, output\n%s", exitCode(err), out)
	}
}

func TestDecideTable(t *testing.T) {
	out, _, err := run(t, "", "decide", "--model", tinyRelease, "--format", "table", "../../examples/triage.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"is_urgent (noul)", "team (choice)", "frustration (score)", "billing", "3 angry", "█", "thinker", "head"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestDecideErrors(t *testing.T) {
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{`{"model": "clef-omni", "state": "s"}`, nil, exitBadRequest, "at least one question"},
		{`{"model": `, nil, exitBadRequest, "not valid JSON"},
		{`[]`, nil, exitBadRequest, "JSON object"},
		{`{}`, []string{"--format", "yaml"}, 1, "--format"},
		{`{}`, []string{"--min-confidence", "2"}, 1, "--min-confidence"},
		{`{}`, []string{"--max-length", "0"}, 1, "--max-length"},
		{`{}`, []string{"missing.json"}, 1, "missing.json"},
		{`{"model": "clef-omni", "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}`, []string{"--max-length", "20"}, exitBadRequest, "schema requires"},
		{`{"model": "clef-omni", "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}, "images": ["data:image/png;base64,AAAA"]}`, nil, exitBadRequest, "images[0]: bytes are no known format"},
		{`{"model": "clef-omni", "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}, "videos": ["data:video/mp4;base64,AAAA"]}`, nil, exitBadRequest, "videos[0]: "},
	} {
		args := append([]string{"decide", "--model", tinyRelease}, tc.args...)
		_, _, err := run(t, tc.stdin, args...)
		if exitCode(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v <<< %s: exit %d, err %v; want exit %d mentioning %q", tc.args, tc.stdin, exitCode(err), err, tc.code, tc.want)
		}
	}
	_, _, err := run(t, "{}", "decide", "--model", "no/such/model")
	if err == nil || !strings.Contains(err.Error(), "no/such/model") {
		t.Errorf("missing model: err %v", err)
	}
}

func TestDemo(t *testing.T) {
	t.Setenv("CLEF_MODEL", "")
	out, _, err := run(t, "", "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SYNTHETIC", "mean nothing", "team (choice)", "time: load", "thinker", "head"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	t.Setenv("CLEF_MODEL", "../../testdata/clef-tiny/release-bf16")
	out, _, err = run(t, "", "demo")
	if err != nil || strings.Contains(out, "SYNTHETIC") || !strings.Contains(out, "release-bf16") {
		t.Errorf("demo with CLEF_MODEL: err %v\n%s", err, out)
	}
}

// TestDemoRequestIsTheExample keeps the embedded demo request identical to
// examples/triage.json.
func TestDemoRequestIsTheExample(t *testing.T) {
	want, err := os.ReadFile("../../examples/triage.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(triageRequest, want) {
		t.Error("cmd/clef/demo_triage.json differs from examples/triage.json: copy it over")
	}
}

// TestDecideAttachedMedia: the media records of clef-tiny with their media
// taken out of the request and attached as local files (--image, --audio)
// get the golden response; clef encode reports their token counts.
func TestDecideAttachedMedia(t *testing.T) {
	ran := 0
	for _, g := range goldens(t) {
		if len(g.Media) == 0 {
			continue
		}
		doc, err := pyjson.Decode(g.Request) // keeps the members' order
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		args := []string{"decide", "--model", tinyRelease, "--max-length", itoa(g.MaxLength)}
		attach := map[string]struct{ flag, ext string }{"images": {"--image", ".png"}, "audio": {"--audio", ".wav"}}
		rest := pyjson.NewObject()
		for k, key := range doc.Keys {
			a, ok := attach[key]
			if !ok {
				rest.Set(key, doc.Vals[k])
				continue
			}
			for i, it := range doc.Vals[k].Items {
				data, err := base64.StdEncoding.DecodeString(it.Str[strings.IndexByte(it.Str, ',')+1:])
				if err != nil {
					t.Fatal(err)
				}
				name := filepath.Join(dir, key+itoa(i)+a.ext)
				if err := os.WriteFile(name, data, 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, a.flag, name)
			}
		}
		body := pyjson.Dumps(rest, pyjson.Default)
		out, _, err := run(t, body, args...)
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		v, err := pyjson.Decode(g.Response)
		if err != nil {
			t.Fatal(err)
		}
		if want := pyjson.Dumps(v, pyjson.Default) + "\n"; out != want {
			t.Errorf("%s:\n got %s\nwant %s", g.Name, out, want)
		}
		// clef encode on the request as sent reports the media's tokens.
		var meta struct {
			AudioTokens []int `json:"audio_tokens"`
			ImageTokens []int `json:"image_tokens"`
			Offset      int   `json:"media_offset"`
			Tokens      int   `json:"media_tokens"`
		}
		if err := json.Unmarshal(g.Media, &meta); err != nil {
			t.Fatal(err)
		}
		enc, _, err := run(t, string(g.Request), "encode", "--tokenizer", tinyRelease, "--max-length", itoa(g.MaxLength))
		if err != nil {
			t.Fatalf("%s: encode: %v", g.Name, err)
		}
		var e struct {
			Media struct {
				ImageTokens []int `json:"image_tokens"`
				AudioTokens []int `json:"audio_tokens"`
				Start, End  int
			} `json:"media"`
		}
		if err := json.Unmarshal([]byte(enc), &e); err != nil {
			t.Fatalf("%s: encode output %q: %v", g.Name, enc, err)
		}
		if !slices.Equal(e.Media.ImageTokens, meta.ImageTokens) && !(len(e.Media.ImageTokens) == 0 && len(meta.ImageTokens) == 0) ||
			!slices.Equal(e.Media.AudioTokens, meta.AudioTokens) || e.Media.Start != meta.Offset || e.Media.End != meta.Offset+meta.Tokens {
			t.Errorf("%s: encode media %+v, want images %v audio %v in [%d, %d)", g.Name, e.Media, meta.ImageTokens, meta.AudioTokens, meta.Offset, meta.Offset+meta.Tokens)
		}
		ran++
	}
	if ran != 2 {
		t.Fatalf("ran %d media cases, want 2", ran)
	}
	if _, _, err := run(t, `{"model":"m","state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`, "decide", "--model", tinyRelease, "--image", "no-such-file.png"); exitCode(err) != 2 {
		t.Errorf("missing --image file: %v (exit %d), want exit 2", err, exitCode(err))
	}
}
