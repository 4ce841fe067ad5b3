package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"

	"github.com/clefrt/clef/engine/pyjson"
)

// tinyCase is what the answer mapping needs from a clef-tiny case.
type tinyCase struct {
	Name      string          `json:"name"`
	Request   json.RawMessage `json:"request"`
	InputIDs  []int           `json:"input_ids"`
	Questions []struct {
		ID        string   `json:"question_id"`
		Type      int      `json:"question_type"`
		Span      [2]int   `json:"question_span"`
		Spans     [][2]int `json:"option_spans"`
		OptionIDs []string `json:"option_ids"`
	} `json:"questions"`
	Probabilities [][]float64     `json:"probabilities"`
	Response      json.RawMessage `json:"response"`
}

func readTinyCases(t *testing.T, path string) []tinyCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []tinyCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var c tinyCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestAnswerGolden feeds the golden probabilities of every clef-tiny case
// (both releases) to Answer and compares the response JSON byte for byte.
func TestAnswerGolden(t *testing.T) {
	for _, file := range []string{"cases.jsonl", "cases-bf16.jsonl"} {
		cases := readTinyCases(t, "../../testdata/clef-tiny/"+file)
		if len(cases) != 19 {
			t.Fatalf("%s: %d cases, want 19", file, len(cases))
		}
		for _, c := range cases {
			req, err := ParseRequest(c.Request)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			enc := &Encoded{InputIDs: c.InputIDs}
			probs := make([][]float32, len(c.Probabilities))
			for i, q := range c.Questions {
				enc.Questions = append(enc.Questions, EncodedQuestion{q.ID, q.Type, q.Span, q.Spans, q.OptionIDs})
				for _, p := range c.Probabilities[i] {
					probs[i] = append(probs[i], float32(p))
				}
			}
			if err := CheckProbs(enc, probs); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			got, _ := Answer(req, enc, probs).MarshalJSON()
			if string(got) != string(c.Response) {
				t.Errorf("%s/%s:\n got %s\nwant %s", file, c.Name, got, c.Response)
			}
		}
	}
}

func TestAnswerMapping(t *testing.T) {
	req, err := ParseRequest([]byte(`{"model":"m","state":"s","questions":{
		"n":{"type":"noul","instructions":"?"},
		"c":{"type":"choice","instructions":"?","criteria":{"zeta":"z","alpha":null,"mid":"m"}},
		"s":{"type":"score","instructions":"?","criteria":["lo",{"k":[1,2.50]},null]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	enc := &Encoded{InputIDs: make([]int, 7), Questions: []EncodedQuestion{
		{ID: "n", Type: 0, OptionIDs: []string{"true", "false"}},
		{ID: "c", Type: 1, OptionIDs: []string{"alpha", "mid", "zeta"}},
		{ID: "s", Type: 2, OptionIDs: []string{"0", "1", "2"}},
	}}
	// The choice tie between zeta and alpha goes to zeta: first in request order.
	probs := [][]float32{{0.123456, 0.876544}, {0.4, 0.2, 0.4}, {0.25, 0.25, 0.5}}
	if err := CheckProbs(enc, probs); err != nil {
		t.Fatal(err)
	}
	got := string(Answer(req, enc, probs).AppendJSON(nil, pyjson.Default))
	want := `{"model": "m", "answers": {` +
		`"n": {"type": "noul", "noul": 0.1235}, ` +
		`"c": {"type": "choice", "choice": "zeta", "confidence": 0.4, "probabilities": {"zeta": 0.4, "alpha": 0.4, "mid": 0.2}}, ` +
		`"s": {"type": "score", "score": 1.25, "confidence": 0.5, "legend": {"0": "lo", "1": {"k": [1, 2.5]}, "2": null}, "probabilities": {"0": 0.25, "1": 0.25, "2": 0.5}}}, ` +
		`"usage": {"input_tokens": 7, "output_tokens": 0}}`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if err := CheckProbs(enc, probs[:2]); err == nil {
		t.Error("CheckProbs accepted a missing row")
	}
	if err := CheckProbs(enc, [][]float32{{1, 0}, {1}, {1, 0, 0}}); err == nil {
		t.Error("CheckProbs accepted a short row")
	}
}

func TestEnvelope(t *testing.T) {
	resp := &Response{Model: "clef-omni", Answers: []Decision{{ID: "q", Type: Noul, Noul: 0.5}}, Usage: Usage{InputTokens: 3}}
	got, _ := Wrap(resp).MarshalJSON()
	want := `{"result":{"model":"clef-omni","answers":{"q":{"type":"noul","noul":0.5}},"usage":{"input_tokens":3,"output_tokens":0}},"success":true,"errors":[],"messages":[]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	env, status := Fail(&Error{Status: 422, Code: CodeValidation, Message: `questions.x: "bad"`})
	got, _ = env.MarshalJSON()
	want = `{"result":null,"success":false,"errors":[{"code":5012,"message":"questions.x: \"bad\""}],"messages":[]}`
	if string(got) != want || status != 422 {
		t.Errorf("got %d %s\nwant 422 %s", status, got, want)
	}
	if _, status := Fail(errors.New("boom")); status != http.StatusInternalServerError {
		t.Errorf("plain error: status %d, want 500", status)
	}
}
