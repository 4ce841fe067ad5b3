package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/tokenizer"
)

const (
	qwen3Dir    = "../../testdata/tokenizer/qwen3"
	clefTinyDir = "../../testdata/clef-tiny"
)

// fixtureQuestion is one question of the fixtures' schema.
type fixtureQuestion struct {
	QuestionID   string   `json:"question_id"`
	QuestionType int      `json:"question_type"`
	QuestionSpan [2]int   `json:"question_span"`
	OptionSpans  [][2]int `json:"option_spans"`
	OptionIDs    []string `json:"option_ids"`
}

// recordCase is one line of records.jsonl. Record keeps the exact JSON text
// (key order, duplicates, number literals).
type recordCase struct {
	Name           string            `json:"name"`
	Record         json.RawMessage   `json:"record"`
	MaxLength      int               `json:"max_length"`
	InputIDs       []int             `json:"input_ids"`
	Questions      []fixtureQuestion `json:"questions"`
	RecordID       string            `json:"record_id"`
	FixedLength    int               `json:"fixed_length"`
	StateTokens    int               `json:"state_tokens"`
	StateTruncated bool              `json:"state_truncated"`
	SystemOneValid *bool             `json:"systemone_valid"`
	Stage          string            `json:"stage"`
	ErrorType      string            `json:"error_type"`
	Error          string            `json:"error"`
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var c T
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	qwen3Once sync.Once
	qwen3Tok  *tokenizer.Tokenizer
	qwen3Err  error
)

func qwen3(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	qwen3Once.Do(func() { qwen3Tok, qwen3Err = tokenizer.Load(qwen3Dir + "/tokenizer.json") })
	if qwen3Err != nil {
		t.Fatal(qwen3Err)
	}
	return qwen3Tok
}

func fixtureQuestions(qs []Question) []fixtureQuestion {
	out := make([]fixtureQuestion, len(qs))
	for i, q := range qs {
		out[i] = fixtureQuestion{q.ID, q.Type, q.Span, q.OptionSpans, q.OptionIDs}
	}
	return out
}

// TestRecordsGolden runs all 71 cases of records.jsonl: 61 encodings with
// identical ids, spans and counts, 10 failures at the same stage for the same
// reason.
func TestRecordsGolden(t *testing.T) {
	tok := qwen3(t)
	cases := readJSONL[recordCase](t, qwen3Dir+"/records.jsonl")
	if len(cases) != 71 {
		t.Fatalf("%d cases, want 71", len(cases))
	}
	var encoded, failed int
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			req, err := api.ParseRequest(c.Record)
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			verr := req.Validate()
			enc, eerr := Encode(tok, req, c.MaxLength)
			if c.Stage != "" {
				failed++
				got := eerr
				if c.Stage == "systemone" {
					got = verr
				} else if verr != nil && c.Stage == "encode_record" && eerr == nil {
					t.Fatalf("Encode succeeded, want %s %s", c.ErrorType, c.Error)
				}
				var ae *api.Error
				if !errors.As(got, &ae) {
					t.Fatalf("stage %s: err = %v, want %s: %s", c.Stage, got, c.ErrorType, c.Error)
				}
				if ae.PyType != c.ErrorType || ae.Python() != c.Error {
					t.Errorf("stage %s: got %s: %s, want %s: %s", c.Stage, ae.PyType, ae.Python(), c.ErrorType, c.Error)
				}
				if ae.Message == "" || strings.Contains(ae.Message, "\n") {
					t.Errorf("message %q is not one line", ae.Message)
				}
				return
			}
			encoded++
			if eerr != nil {
				t.Fatalf("Encode: %v", eerr)
			}
			if valid := verr == nil; c.SystemOneValid == nil || valid != *c.SystemOneValid {
				t.Errorf("Validate() = %v, want valid=%v", verr, c.SystemOneValid != nil && *c.SystemOneValid)
			}
			if !reflect.DeepEqual(enc.InputIDs, c.InputIDs) {
				t.Errorf("input ids differ: got %d ids, want %d; first difference at %d",
					len(enc.InputIDs), len(c.InputIDs), firstDiff(enc.InputIDs, c.InputIDs))
			}
			if got := fixtureQuestions(enc.Questions); !reflect.DeepEqual(got, c.Questions) {
				t.Errorf("questions:\n got %+v\nwant %+v", got, c.Questions)
			}
			if enc.FixedLength != c.FixedLength || enc.StateTokens != c.StateTokens || enc.StateTruncated != c.StateTruncated {
				t.Errorf("fixed/state/truncated = %d/%d/%v, want %d/%d/%v", enc.FixedLength, enc.StateTokens,
					enc.StateTruncated, c.FixedLength, c.StateTokens, c.StateTruncated)
			}
			if enc.RecordID != c.RecordID {
				t.Errorf("record id %q, want %q", enc.RecordID, c.RecordID)
			}
		})
	}
	if encoded != 61 || failed != 10 {
		t.Errorf("%d encodings and %d failures, want 61 and 10", encoded, failed)
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// tinyCase is the encoding part of a clef-tiny case.
type tinyCase struct {
	Name           string            `json:"name"`
	Request        json.RawMessage   `json:"request"`
	MaxLength      int               `json:"max_length"`
	InputIDs       []int             `json:"input_ids"`
	StateTokens    int               `json:"state_tokens"`
	StateTruncated bool              `json:"state_truncated"`
	Questions      []fixtureQuestion `json:"questions"`
	Media          *struct {
		Offset      int   `json:"media_offset"`
		Tokens      int   `json:"media_tokens"`
		ImageTokens []int `json:"image_tokens"`
		AudioTokens []int `json:"audio_tokens"`
	} `json:"media"`
}

// TestClefTinyCases cross-checks the encoding with another tokenizer: the 19
// requests of clef-tiny, the media ones given their items' token counts (the
// placeholder expansion of transformers' processor is part of the golden).
func TestClefTinyCases(t *testing.T) {
	tok, err := tokenizer.Load(clefTinyDir + "/release/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := readJSONL[tinyCase](t, clefTinyDir+"/cases.jsonl")
	if len(cases) != 19 {
		t.Fatalf("%d cases, want 19", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			req, err := api.ParseRequest(c.Request)
			if err != nil {
				t.Fatal(err)
			}
			if err := req.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			var enc *Encoded
			if c.Media != nil {
				if _, err := Encode(tok, req, c.MaxLength); err == nil {
					t.Fatal("Encode accepted a media request")
				}
				var pl *Placement
				enc, pl, err = EncodeMedia(tok, req, c.MaxLength, Media{ImageTokens: c.Media.ImageTokens, AudioTokens: c.Media.AudioTokens})
				if err != nil {
					t.Fatal(err)
				}
				if pl.Start != c.Media.Offset || pl.End != c.Media.Offset+c.Media.Tokens {
					t.Errorf("media block [%d, %d), want [%d, %d)", pl.Start, pl.End, c.Media.Offset, c.Media.Offset+c.Media.Tokens)
				}
				for _, runs := range []struct {
					runs [][2]int
					want []int
				}{{pl.Images, c.Media.ImageTokens}, {pl.Audio, c.Media.AudioTokens}} {
					if len(runs.runs) != len(runs.want) {
						t.Fatalf("%d runs, want %d", len(runs.runs), len(runs.want))
					}
					for i, r := range runs.runs {
						pad := enc.InputIDs[r[0]]
						for _, id := range enc.InputIDs[r[0]:r[1]] {
							if id != pad {
								t.Fatalf("run %v is not one pad token", r)
							}
						}
						if r[1]-r[0] != runs.want[i] || enc.InputIDs[r[0]-1] == pad || enc.InputIDs[r[1]] == pad {
							t.Errorf("run %v of %d pads, want the whole run of %d", r, r[1]-r[0], runs.want[i])
						}
					}
				}
			} else {
				enc, err = Encode(tok, req, c.MaxLength)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(enc.InputIDs, c.InputIDs) {
				t.Errorf("input ids differ at %d (got %d, want %d ids)", firstDiff(enc.InputIDs, c.InputIDs), len(enc.InputIDs), len(c.InputIDs))
			}
			if got := fixtureQuestions(enc.Questions); !reflect.DeepEqual(got, c.Questions) {
				t.Errorf("questions:\n got %+v\nwant %+v", got, c.Questions)
			}
			if enc.StateTokens != c.StateTokens || enc.StateTruncated != c.StateTruncated {
				t.Errorf("state %d/%v, want %d/%v", enc.StateTokens, enc.StateTruncated, c.StateTokens, c.StateTruncated)
			}
		})
	}
}
