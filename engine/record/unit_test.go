package record

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/api"
)

// byteTok is a fake tokenizer: one id per UTF-8 byte, so that any span can
// be read back as text.
type byteTok struct{}

func (byteTok) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = int(s[i])
	}
	return ids
}

func text(ids []int) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b)
}

func mustParse(t testing.TB, body string) *api.Request {
	t.Helper()
	req, err := api.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestLayout(t *testing.T) {
	req := mustParse(t, `{"model":"m","state":{"b":1.0,"a":"é"},"questions":{
		"q2":{"type":"score","instructions":{"z":1,"y":[0.00001]},"criteria":["low",null]},
		"q1":{"type":"choice","criteria":{"b":"B","a":null,"A":{"k":true}}},
		"q0":{"type":"noul","instructions":"Is it?","criteria":{"false":"No.","other":1}}}}`)
	enc, err := Encode(byteTok{}, req, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Prefix + `{"a":"é","b":1.0}` + SchemaHeader +
		"\nFIELD 1\nID: q2\nTYPE: score\nINSTRUCTION: " + `{"y":[1e-05],"z":1}` + "\nALLOWED OPTIONS:\n" +
		`OPTION 1: {"description":"low","option_id":"0"}` + "\n" +
		`OPTION 2: {"option_id":"1"}` + "\nEND FIELD\n" +
		"\nFIELD 2\nID: q1\nTYPE: choice\nINSTRUCTION: q1\nALLOWED OPTIONS:\n" +
		`OPTION 1: {"description":{"k":true},"option_id":"A"}` + "\n" +
		`OPTION 2: {"option_id":"a"}` + "\n" +
		`OPTION 3: {"description":"B","option_id":"b"}` + "\nEND FIELD\n" +
		"\nFIELD 3\nID: q0\nTYPE: noul\nINSTRUCTION: Is it?\nALLOWED OPTIONS:\n" +
		`OPTION 1: {"description":"` + NoulTrue + `","option_id":"true"}` + "\n" +
		`OPTION 2: {"description":"No.","option_id":"false"}` + "\nEND FIELD\n" + Suffix
	if got := text(enc.InputIDs); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	wantSpans := []struct {
		instr string
		opts  []string
		ids   string
		typ   int
	}{
		{`{"y":[1e-05],"z":1}`, []string{`{"description":"low","option_id":"0"}`, `{"option_id":"1"}`}, "0,1", 2},
		{`q1`, []string{`{"description":{"k":true},"option_id":"A"}`, `{"option_id":"a"}`, `{"description":"B","option_id":"b"}`}, "A,a,b", 1},
		{`Is it?`, []string{`{"description":"` + NoulTrue + `","option_id":"true"}`, `{"description":"No.","option_id":"false"}`}, "true,false", 0},
	}
	for i, w := range wantSpans {
		q := enc.Questions[i]
		if got := text(enc.InputIDs[q.Span[0]:q.Span[1]]); got != w.instr {
			t.Errorf("question %d span %q, want %q", i, got, w.instr)
		}
		for k, o := range w.opts {
			if got := text(enc.InputIDs[q.OptionSpans[k][0]:q.OptionSpans[k][1]]); got != o {
				t.Errorf("question %d option %d span %q, want %q", i, k, got, o)
			}
		}
		if got := strings.Join(q.OptionIDs, ","); got != w.ids || q.Type != w.typ {
			t.Errorf("question %d: ids %s type %d, want %s %d", i, got, q.Type, w.ids, w.typ)
		}
	}
	if enc.StateTokens != len(`{"a":"é","b":1.0}`) || enc.StateTruncated || enc.FixedLength+enc.StateTokens != len(enc.InputIDs) {
		t.Errorf("state %d/%v fixed %d of %d", enc.StateTokens, enc.StateTruncated, enc.FixedLength, len(enc.InputIDs))
	}
	if enc.RecordID != "unknown" {
		t.Errorf("record id %q", enc.RecordID)
	}
}

func TestTruncation(t *testing.T) {
	req := mustParse(t, `{"model":"m","state":"0123456789","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	full, err := Encode(byteTok{}, req, 0)
	if err != nil {
		t.Fatal(err)
	}
	fixed := full.FixedLength
	for _, c := range []struct {
		max, keep int
		cut       bool
	}{{fixed + 10, 10, false}, {fixed + 11, 10, false}, {fixed + 9, 9, true}, {fixed + 1, 1, true}, {fixed, 0, true}} {
		enc, err := Encode(byteTok{}, req, c.max)
		if err != nil {
			t.Fatalf("max %d: %v", c.max, err)
		}
		if enc.StateTokens != c.keep || enc.StateTruncated != c.cut || len(enc.InputIDs) != fixed+c.keep {
			t.Errorf("max %d: kept %d cut %v len %d, want %d %v %d", c.max, enc.StateTokens, enc.StateTruncated, len(enc.InputIDs), c.keep, c.cut, fixed+c.keep)
		}
		if got := text(enc.InputIDs[len(Prefix) : len(Prefix)+c.keep]); got != "0123456789"[:c.keep] {
			t.Errorf("max %d: state %q, want it cut from its end", c.max, got)
		}
		q := enc.Questions[0]
		if got := text(enc.InputIDs[q.Span[0]:q.Span[1]]); got != "?" {
			t.Errorf("max %d: span shows %q", c.max, got)
		}
	}
	_, err = Encode(byteTok{}, req, fixed-1)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 413 || ae.Code != api.CodeTooLong ||
		ae.Message != "schema requires "+strconv.Itoa(fixed)+" tokens before state; maximum is "+strconv.Itoa(fixed-1) {
		t.Errorf("max %d: err = %v, want the 413 schema error", fixed-1, err)
	}
}

func TestEncodeRefusesMedia(t *testing.T) {
	req := mustParse(t, `{"model":"m","state":"abcdef","audio":["data:audio/wav;base64,AAAA"],"questions":{"q":{"type":"noul","instructions":"?"}}}`)
	if _, err := Encode(byteTok{}, req, 0); err == nil || !strings.Contains(err.Error(), "processor") {
		t.Fatalf("Encode with audio: err = %v, want a processor error", err)
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, c := range []struct{ body, pyType, pyText, msg string }{
		{`{"questions":{"q":{"type":"noul"}}}`, "KeyError", "'state'", "state is required"},
		{`{"state":"s"}`, "KeyError", "'questions'", "questions is required"},
		{`{"state":"s","questions":[1]}`, "AttributeError", "'list' object has no attribute 'items'", "questions must be an object"},
		{`{"state":"s","questions":{}}`, "ValueError", "record produced no model input or questions", ""},
		{`{"state":"s","questions":{"q":{"instructions":"?"}}}`, "KeyError", "'type'", "type is required"},
		{`{"state":"s","questions":{"q":{"type":"Noul"}}}`, "KeyError", "'Noul'", `question "q": unknown type 'Noul'`},
		{`{"state":"s","questions":{"q":{"type":"it's"}}}`, "KeyError", `"it's"`, "unknown type"},
		{`{"state":"s","questions":{"q":{"type":5}}}`, "KeyError", "5", "unknown type 5"},
		{`{"state":"s","questions":{"q":{"type":null}}}`, "KeyError", "None", "unknown type None"},
		{`{"state":"s","questions":{"q":{"type":["noul"]}}}`, "TypeError", "unhashable type: 'list'", "type must be"},
		{`{"state":"s","questions":{"q":"noul"}}`, "TypeError", "", "must be an object"},
		{`{"state":"s","questions":{"q":{"type":"choice","criteria":["a","b"]}}}`, "AttributeError", "'list' object has no attribute 'items'", "criteria"},
		{`{"state":"s","questions":{"q":{"type":"noul","criteria":"yes"}}}`, "AttributeError", "'str' object has no attribute 'items'", "criteria"},
		{`{"state":"s","questions":{"q":{"type":"score","criteria":3}}}`, "TypeError", "'int' object is not iterable", "criteria"},
		{`{"state":"s","questions":{"q":{"type":"choice","instructions":"?"}}}`, "KeyError", "'criteria'", `question "q": a choice's criteria is required (KeyError 'criteria')`},
		{`{"state":"s","images":["x"],"questions":{"q":{"type":"noul"}}}`, "ValueError", "records with images or videos require a processor", ""},
		{`{"state":"s","videos":[{}],"questions":{"q":{"type":"noul"}}}`, "ValueError", "records with images or videos require a processor", ""},
	} {
		_, err := Encode(byteTok{}, mustParse(t, c.body), 0)
		var ae *api.Error
		if !errors.As(err, &ae) {
			t.Errorf("%s: err = %v", c.body, err)
			continue
		}
		if ae.PyType != c.pyType || (c.pyText != "" && ae.Python() != c.pyText) || !strings.Contains(ae.Message, c.msg) ||
			strings.Contains(ae.Message, "\n") || ae.Status == 0 || ae.Code == 0 {
			t.Errorf("%s:\n got %s %q %q (%d/%d)\nwant %s %q %q", c.body, ae.PyType, ae.Python(), ae.Message, ae.Status, ae.Code, c.pyType, c.pyText, c.msg)
		}
	}
}

// TestOddCriteria follows Python's iteration where the reference would:
// enumerate() over a dict gives its keys, over a str its characters; falsy
// criteria give the defaults (noul) or no options.
func TestOddCriteria(t *testing.T) {
	for _, c := range []struct{ q, ids, first string }{
		{`{"type":"score","criteria":{"lo":1,"hi":2}}`, "0,1", `{"description":"lo","option_id":"0"}`},
		{`{"type":"score","criteria":"ab"}`, "0,1", `{"description":"a","option_id":"0"}`},
		{`{"type":"noul","criteria":""}`, "true,false", `{"description":"` + NoulTrue + `","option_id":"true"}`},
		{`{"type":"noul","criteria":{"true":null}}`, "true,false", `{"option_id":"true"}`},
		{`{"type":"choice","criteria":null}`, "", ""},
		{`{"type":"choice","criteria":{"é":0,"z":0,"":0}}`, ",z,é", `{"description":0,"option_id":""}`},
	} {
		enc, err := Encode(byteTok{}, mustParse(t, `{"state":"s","id":null,"questions":{"q":`+c.q+`}}`), 0)
		if err != nil {
			t.Errorf("%s: %v", c.q, err)
			continue
		}
		q := enc.Questions[0]
		if got := strings.Join(q.OptionIDs, ","); got != c.ids {
			t.Errorf("%s: ids %q, want %q", c.q, got, c.ids)
		}
		if c.first != "" {
			if got := text(enc.InputIDs[q.OptionSpans[0][0]:q.OptionSpans[0][1]]); got != c.first {
				t.Errorf("%s: first option %s, want %s", c.q, got, c.first)
			}
		}
		if enc.RecordID != "None" {
			t.Errorf("record id %q, want None", enc.RecordID)
		}
	}
}
