package record

import (
	"errors"
	"testing"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
)

// FuzzRequest runs arbitrary bodies through the request decoder, both
// validations, the encoder (fake tokenizer, a small context so that
// truncation and the schema limit are hit) and the answer mapping. Nothing
// may panic, every failure must be an *api.Error with a status, and every
// encoding must be consistent.
func FuzzRequest(f *testing.F) {
	for _, c := range readJSONL[recordCase](f, qwen3Dir+"/records.jsonl") {
		f.Add([]byte(c.Record), uint16(c.MaxLength))
	}
	for _, c := range readJSONL[tinyCase](f, clefTinyDir+"/cases.jsonl") {
		if len(c.Request) < 16<<10 {
			f.Add([]byte(c.Request), uint16(c.MaxLength))
		}
	}
	f.Add([]byte(`{"model":"clef-omni","state":"x","questions":{"q":{"type":"score","criteria":"abc"}}}`), uint16(300))
	f.Fuzz(func(t *testing.T, body []byte, maxLen uint16) {
		isAPIError := func(err error) {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status == 0 || ae.Code == 0 || ae.Message == "" {
				t.Fatalf("error %T %v is not a complete *api.Error", err, err)
			}
		}
		req, err := api.ParseRequest(body)
		if err != nil {
			isAPIError(err)
			return
		}
		if err := req.Validate(); err != nil {
			isAPIError(err)
		}
		if err := req.ValidateHosted(); err != nil {
			isAPIError(err)
		}
		max := int(maxLen%2048) + 1
		enc, err := Encode(byteTok{}, req, max)
		if err != nil {
			isAPIError(err)
			return
		}
		if len(enc.InputIDs) > max || enc.FixedLength+enc.StateTokens != len(enc.InputIDs) {
			t.Fatalf("%d ids for max %d (fixed %d, state %d)", len(enc.InputIDs), max, enc.FixedLength, enc.StateTokens)
		}
		probs := make([][]float32, len(enc.Questions))
		for i, q := range enc.Questions {
			inside := func(s [2]int) bool { return 0 <= s[0] && s[0] <= s[1] && s[1] <= len(enc.InputIDs) }
			if !inside(q.Span) || len(q.OptionSpans) != len(q.OptionIDs) {
				t.Fatalf("question %q: bad spans %v %v", q.ID, q.Span, q.OptionSpans)
			}
			for _, s := range q.OptionSpans {
				if !inside(s) || s[0] == s[1] {
					t.Fatalf("question %q: bad option span %v", q.ID, s)
				}
			}
			for range q.OptionIDs {
				probs[i] = append(probs[i], 1/float32(len(q.OptionIDs)))
			}
		}
		if err := api.CheckProbs(enc, probs); err != nil {
			t.Fatal(err)
		}
		out, _ := api.Answer(req, enc, probs).MarshalJSON()
		if _, err := pyjson.Decode(out); err != nil {
			t.Fatalf("response is not JSON: %v\n%s", err, out)
		}
	})
}
