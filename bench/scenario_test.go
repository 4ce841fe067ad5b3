package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/tokenizer"
)

const (
	tinyRelease    = "../testdata/clef-tiny/release"
	tinyReleaseB16 = "../testdata/clef-tiny/release-bf16"
	qwen3Tokenizer = "../testdata/tokenizer/qwen3/tokenizer.json"
)

func loadTok(t testing.TB, path string) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestParseStates(t *testing.T) {
	got, err := ParseStates("256, 1k,4k,16k,64k,300")
	if err != nil {
		t.Fatal(err)
	}
	want := []StateSize{{"256", 256}, {"1k", 1024}, {"4k", 4096}, {"16k", 16384}, {"64k", FillBudget}, {"300", 300}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("state %d: got %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "0", "-3", "1m", "abc", "99999999"} {
		if _, err := ParseStates(bad); err == nil {
			t.Errorf("ParseStates(%q) accepted", bad)
		}
	}
	if _, err := ParseInts("questions", "1,65", 1, 64); err == nil || !strings.Contains(err.Error(), "65") {
		t.Errorf("ParseInts out of range: %v", err)
	}
}

// The builder hits every target state length exactly, on the tiny model's
// 512-token BPE and on the real Qwen3 tokenizer, and "64k" fills the budget
// to the last token.
func TestBuildExactTokenCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		tok  string
	}{{"tiny", tinyRelease + "/tokenizer.json"}, {"qwen3", qwen3Tokenizer}} {
		t.Run(tc.name, func(t *testing.T) {
			tok := loadTok(t, tc.tok)
			const budget = 5000
			states, _ := ParseStates("1,7,256,1k,64k")
			scs, skipped, err := Build(tok, Grid{States: states, Questions: []int{1, 8}, Options: []int{2, 13}, Records: 2, Seed: 7}, budget)
			if err != nil {
				t.Fatal(err)
			}
			if len(skipped) != 0 {
				t.Fatalf("skipped %v", skipped)
			}
			if len(scs) != 5*2*2 {
				t.Fatalf("%d scenarios", len(scs))
			}
			for _, sc := range scs {
				for _, r := range sc.Records {
					enc, err := record.Encode(tok, r.Req, budget)
					if err != nil {
						t.Fatal(err)
					}
					want := map[string]int{"1": 1, "7": 7, "256": 256, "1k": 1024, "64k": budget - enc.FixedLength}[sc.StateLabel]
					if enc.StateTokens != want || enc.StateTruncated || r.StateTokens != want {
						t.Errorf("%s %s: %d state tokens (truncated %v), want %d", sc.Name, r.ID, enc.StateTokens, enc.StateTruncated, want)
					}
					if r.InputTokens != len(enc.InputIDs) || len(enc.InputIDs) != enc.FixedLength+want {
						t.Errorf("%s: input tokens %d, encoded %d", sc.Name, r.InputTokens, len(enc.InputIDs))
					}
					if sc.StateLabel == "64k" && r.InputTokens != budget {
						t.Errorf("%s: %d tokens, want the whole budget %d", sc.Name, r.InputTokens, budget)
					}
				}
				if sc.Records[0].InputTokens == 0 || bytes.Equal(sc.Records[0].Body, sc.Records[1].Body) {
					t.Errorf("%s: the two records are identical", sc.Name)
				}
			}
		})
	}
}

func TestBuildSchemaShapeAndDeterminism(t *testing.T) {
	tok := loadTok(t, tinyRelease)
	states, _ := ParseStates("256")
	g := Grid{States: states, Questions: []int{8}, Options: []int{40}, Seed: 3}
	a, _, err := Build(tok, g, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Build(tok, g, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[0].Records[0].Body, b[0].Records[0].Body) {
		t.Fatal("the same grid and seed built different records")
	}
	sc := a[0]
	if sc.Name != "s256-q8-o40" || sc.Types["noul"] != 3 || sc.Types["choice"] != 3 || sc.Types["score"] != 2 {
		t.Fatalf("scenario %s types %v", sc.Name, sc.Types)
	}
	enc, err := record.Encode(tok, sc.Records[0].Req, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range enc.Questions {
		want := map[int]int{0: 2, 1: 40, 2: 10}[q.Type] // scores are capped at the hosted 10 levels
		if len(q.OptionIDs) != want {
			t.Errorf("question %s (type %d): %d options, want %d", q.ID, q.Type, len(q.OptionIDs), want)
		}
	}
	if err := sc.Records[0].Req.ValidateHosted(); err != nil {
		t.Errorf("a synthetic record breaks the hosted limits: %v", err)
	}
	g.Seed = 4
	c, _, _ := Build(tok, g, 0)
	if bytes.Equal(a[0].Records[0].Body, c[0].Records[0].Body) {
		t.Error("another seed built the same record")
	}
}

func TestBuildSkipsWhatCannotFit(t *testing.T) {
	tok := loadTok(t, tinyRelease)
	states, _ := ParseStates("256")
	scs, skipped, err := Build(tok, Grid{States: states, Questions: []int{1, 64}, Options: []int{255}}, 12000)
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != 1 || scs[0].Questions != 1 || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "12000") {
		t.Fatalf("scenarios %d, skipped %v", len(scs), skipped)
	}
	for _, g := range []Grid{
		{States: states, Questions: []int{0}, Options: []int{2}},
		{States: states, Questions: []int{1}, Options: []int{1}},
		{States: states, Questions: []int{1}, Options: []int{256}},
	} {
		if _, _, err := Build(tok, g, 0); err == nil {
			t.Errorf("grid %+v accepted", g)
		}
	}
}

func TestLoadJSONL(t *testing.T) {
	tok := loadTok(t, tinyRelease)
	in := `# two schemas
{"id": "a1", "model": "clef-omni", "state": "one", "questions": {"ok": {"type": "noul", "instructions": "Is it ok?"}}}

{"model": "clef-omni", "state": "two two", "questions": {"ok": {"type": "noul", "instructions": "Is it ok?"}}}
{"model": "clef-omni", "state": "three", "questions": {"c": {"type": "choice", "instructions": "Which?", "criteria": {"x": "X", "y": "Y", "z": "Z"}}}}
`
	scs, err := LoadJSONL(strings.NewReader(in), tok, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != 2 || len(scs[0].Records) != 2 || len(scs[1].Records) != 1 {
		t.Fatalf("got %d scenarios", len(scs))
	}
	if scs[0].Name != "jsonl-a1" || scs[1].Name != "jsonl-2" || scs[1].Options != 3 || scs[1].Types["choice"] != 1 {
		t.Errorf("names %q %q options %d", scs[0].Name, scs[1].Name, scs[1].Options)
	}
	if r := scs[0].Records[1]; r.InputTokens == 0 || r.StateTokens != len(tok.Encode("two two")) {
		t.Errorf("record %s: %d tokens, state %d", r.ID, r.InputTokens, r.StateTokens)
	}
	for _, bad := range []struct{ in, want string }{
		{"{\"state\": \"x\"}\n", "line 1"},
		{"\n\nnot json\n", "line 3"},
		{`{"model": "clef-omni", "state": "x", "questions": {"q": {"type": "maybe", "instructions": "?"}}}`, "line 1"},
		{"# nothing\n", "no requests"},
	} {
		if _, err := LoadJSONL(strings.NewReader(bad.in), tok, 0); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("LoadJSONL(%q): %v, want an error naming %q", bad.in, err, bad.want)
		}
	}
}
