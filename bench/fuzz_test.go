package bench

import (
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/api"
)

// FuzzLoadJSONL: any scenarios file gives scenarios or an error, never a
// panic; every record it accepts has a known token count.
func FuzzLoadJSONL(f *testing.F) {
	tok := loadTok(f, tinyRelease)
	f.Add(`{"model": "clef-omni", "state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}}`)
	f.Add("# c\n\n{\"model\": \"m\", \"state\": {\"a\": [1, 2]}, \"questions\": {\"c\": {\"type\": \"choice\", \"instructions\": \"?\", \"criteria\": {\"x\": \"X\"}}}}\n")
	f.Add(`{"model": "m", "state": "s", "questions": {"s": {"type": "score", "instructions": "?", "criteria": "abc"}}, "id": 7}`)
	f.Add("{\n[\n\"")
	f.Fuzz(func(t *testing.T, in string) {
		scs, err := LoadJSONL(strings.NewReader(in), tok, 4096)
		if err != nil {
			return
		}
		for _, s := range scs {
			for _, r := range s.Records {
				if r.InputTokens <= 0 || r.InputTokens > 4096 || len(r.QuestionTypes) == 0 {
					t.Fatalf("record %s: %d tokens, %d questions", r.ID, r.InputTokens, len(r.QuestionTypes))
				}
			}
		}
	})
}

// FuzzParseWire: any daemon answer gives probabilities in the request's
// question order or an error, never a panic.
func FuzzParseWire(f *testing.F) {
	req, err := api.ParseRequest([]byte(`{"model": "clef-omni", "state": "s", "questions": {"a": {"type": "noul", "instructions": "?"}, "b": {"type": "choice", "instructions": "?", "criteria": {"y": "Y", "x": "X"}}}}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(`{"answers": {"b": {"type": "choice", "probabilities": {"y": 0.6, "x": 0.4}}, "a": {"type": "noul", "noul": 0.25}}, "usage": {"input_tokens": 9}}`)
	f.Add(`{"answers": {"a": {"type": "noul", "noul": null}}}`)
	f.Add(`{"answers": {"a": {"type": "x", "probabilities": {"k": "v"}}, "b": {"probabilities": 3}}}`)
	f.Fuzz(func(t *testing.T, body string) {
		probs, _, err := parseWire([]byte(body), req)
		if err == nil && len(probs) != len(req.Questions) {
			t.Fatalf("%d rows for %d questions", len(probs), len(req.Questions))
		}
	})
}
