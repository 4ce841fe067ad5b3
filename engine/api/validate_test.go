package api

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	req, err := ParseRequest([]byte(`{"model":"clef-omni","state":{"b":1.0,"a":[1e-05]},"id":3,"extra":true,
		"questions":{"z":{"type":"noul","instructions":"Z?"},"a":{"type":"choice","criteria":{"y":null,"x":"X"}},"z":{"type":"score","criteria":["lo","hi"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "clef-omni" || req.State == nil || len(req.Questions) != 2 {
		t.Fatalf("got %+v", req)
	}
	// A duplicated question keeps its first position and takes the last value.
	if q := req.Questions[0]; q.ID != "z" || q.Type != "score" || q.Instructions != nil || q.Criteria.Len() != 2 {
		t.Errorf("questions[0] = %+v", q)
	}
	if q := req.Questions[1]; q.ID != "a" || q.Type != "choice" || strings.Join(q.Criteria.Keys, ",") != "y,x" {
		t.Errorf("questions[1] = %+v", q)
	}

	for _, body := range []string{``, `{`, `[1]`, `"x"`, `{"a":1}x`, "\xff"} {
		_, err := ParseRequest([]byte(body))
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != CodeNotJSON || strings.Contains(ae.Message, "\n") {
			t.Errorf("ParseRequest(%q) = %v, want a one-line 400/6003 error", body, err)
		}
	}
}

const okQuestions = `{"n":{"type":"noul","instructions":"N?"},` +
	`"c":{"type":"choice","instructions":{"ask":"which","data":[1]},"criteria":{"a":"A","b":null,"c":["x"]}},` +
	`"s.level-2":{"type":"score","instructions":["rate"],"criteria":["lo",{"d":1},"hi"]}}`

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		body, field, msg string
		status, code     int
	}{
		{`{"model":"m","state":null,"questions":` + okQuestions + `}`, "", "", 0, 0},
		{`{"model":"m","state":"s","questions":{"q":{"type":"choice","criteria":{"a":1}}},"junk":1}`, "", "", 0, 0},
		{`{"state":"s","questions":` + okQuestions + `}`, "model", "model and state are required", 422, 5012},
		{`{"model":3,"state":"s","questions":` + okQuestions + `}`, "model", "model and state are required", 422, 5012},
		{`{"model":"m","questions":` + okQuestions + `}`, "state", "model and state are required", 422, 5012},
		{`{"model":"m","state":"s"}`, "questions", "at least one question is required", 400, 5006},
		{`{"model":"m","state":"s","questions":{}}`, "questions", "at least one question is required", 400, 5006},
		{`{"model":"m","state":"s","questions":[{"type":"noul"}]}`, "questions", "at least one question is required", 400, 5006},
		{`{"model":"m","state":"s","questions":{"q":{"type":"multi"}}}`, "questions.q.type", "q: type must be noul, choice, or score", 400, 5006},
		{`{"model":"m","state":"s","questions":{"q":{"type":1}}}`, "questions.q.type", "q: type must be noul, choice, or score", 400, 5006},
		{`{"model":"m","state":"s","questions":{"q":{"instructions":"?"}}}`, "questions.q.type", "q: type must be noul, choice, or score", 400, 5006},
		{`{"model":"m","state":"s","questions":{"q":{"type":"choice","criteria":{}}}}`, "questions.q.criteria", "q: criteria must not be empty", 422, 5012},
		{`{"model":"m","state":"s","questions":{"q":{"type":"score"}}}`, "questions.q.criteria", "q: criteria must not be empty", 422, 5012},
		{`{"model":"m","state":"s","questions":{"q":{"type":"score","criteria":""}}}`, "questions.q.criteria", "q: criteria must not be empty", 422, 5012},
		{`{"model":"m","state":"s","questions":{"q":"noul"}}`, "questions.q", "q: question must be an object, got string", 422, 5012},
	} {
		req, err := ParseRequest([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		checkErr(t, c.body, req.Validate(), c.status, c.code, c.field, c.msg)
	}
}

func checkErr(t *testing.T, body string, err error, status, code int, field, msg string) {
	t.Helper()
	if status == 0 {
		if err != nil {
			t.Errorf("%s: unexpected error %v", body, err)
		}
		return
	}
	var ae *Error
	if !errors.As(err, &ae) {
		t.Errorf("%s: err = %v, want %d %s", body, err, status, msg)
		return
	}
	if ae.Status != status || ae.Code != code || ae.Field != field || !strings.Contains(ae.Message, msg) {
		t.Errorf("%s:\n got %d/%d %q %q\nwant %d/%d %q %q", body, ae.Status, ae.Code, ae.Field, ae.Message, status, code, field, msg)
	}
	if strings.Contains(ae.Message, "\n") {
		t.Errorf("%s: message is not one line", body)
	}
}

func TestValidateHosted(t *testing.T) {
	q := func(s string) string { return `{"model":"clef-omni","state":"s","questions":{` + s + `}}` }
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	noul := `"type":"noul","instructions":"?"`
	id101 := strings.Repeat("a", 101)
	b64 := func(n int) string { return strings.Repeat("A", n/3*4) }
	for _, c := range []struct{ body, field, msg string }{
		{`{"model":" clef-omni\n","state":{"x":1},"questions":` + okQuestions + `}`, "", ""},
		{q(many(64, func(i int) string { return `"q` + string(rune('A'+i%26)) + string(rune('a'+i/26)) + `":{` + noul + `}` })), "", ""},
		{q(`"` + id101[:100] + `":{` + noul + `}`), "", ""},
		{q(`"c":{"type":"choice","instructions":"?","criteria":{` + many(255, func(i int) string { return `"o` + strings.Repeat("x", i) + `":null` }) + `}}`), "", ""},
		{q(`"s":{"type":"score","instructions":"?","criteria":["0","1","2","3","4","5","6","7","8","9"]}`), "", ""},
		{q(`"n":{"type":"noul","instructions":"   ","criteria":{"true":"yes","false":{"k":1}}}`), "", ""},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":["data:image/png;base64,` + b64(4<<20) + `",{"content_type":"image/jpeg","base64":"AAAA"}],"audio":["data:audio/wav;base64,AAAA"],"videos":[{"content_type":"video/mp4","base64":"AAAA"}]}`, "", ""},

		// Reference errors come first, with the reference's codes.
		{q(``), "questions", "at least one question is required"},
		{`{"state":"s","questions":{"n":{` + noul + `}}}`, "model", "model and state are required"},
		{`{"model":"clef-flash","state":"s","questions":{"n":{` + noul + `}}}`, "model", `must be "clef-omni"`},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"stream":true}`, "stream", "unknown field"},
		{q(many(65, func(i int) string { return `"q` + string(rune('A'+i%26)) + string(rune('a'+i/26)) + `":{` + noul + `}` })), "questions", "at most 64 questions, got 65"},
		{q(`"` + id101 + `":{` + noul + `}`), "questions." + id101, "must be 1-100 characters"},
		{q(`"a b":{` + noul + `}`), "questions.a b", "must be 1-100 characters"},
		{q(`"":{` + noul + `}`), "questions.", "must be 1-100 characters"},
		{q(`"é":{` + noul + `}`), "questions.é", "must be 1-100 characters"},
		{q(`"n":{` + noul + `,"weight":2}`), "questions.n.weight", "unknown field"},
		{q(`"n":{"type":"noul"}`), "questions.n.instructions", "required"},
		{q(`"n":{"type":"noul","instructions":null}`), "questions.n.instructions", "required"},
		{q(`"n":{"type":"noul","instructions":""}`), "questions.n.instructions", "must not be empty"},
		{q(`"n":{"type":"noul","instructions":{}}`), "questions.n.instructions", "must not be empty"},
		{q(`"n":{"type":"noul","instructions":[]}`), "questions.n.instructions", "must not be empty"},
		{q(`"n":{"type":"noul","instructions":0}`), "questions.n.instructions", "must be a non-empty string, object or array, got int"},
		{q(`"n":{` + noul + `,"criteria":{"true":"y","maybe":"m"}}`), "questions.n.criteria.maybe", "unknown field"},
		{q(`"n":{` + noul + `,"criteria":["y","n"]}`), "questions.n.criteria", "must be an object"},
		{q(`"c":{"type":"choice","instructions":"?","criteria":{"a":"A"}}`), "questions.c.criteria", "a choice needs 2 to 255 options, got 1"},
		{q(`"c":{"type":"choice","instructions":"?","criteria":{` + many(256, func(i int) string { return `"o` + strings.Repeat("x", i) + `":null` }) + `}}`), "questions.c.criteria", "got 256"},
		{q(`"c":{"type":"choice","instructions":"?","criteria":["a","b"]}`), "questions.c.criteria", "must be an object"},
		{q(`"c":{"type":"choice","instructions":"?","criteria":{"a":"A","":"B"}}`), "questions.c.criteria", "option ids must be non-empty"},
		{q(`"c":{"type":"choice","instructions":"?","criteria":{"a":"A","b":2}}`), "questions.c.criteria.b", "got int"},
		{q(`"s":{"type":"score","instructions":"?","criteria":["only"]}`), "questions.s.criteria", "a score needs 2 to 10 levels, got 1"},
		{q(`"s":{"type":"score","instructions":"?","criteria":["0","1","2","3","4","5","6","7","8","9","10"]}`), "questions.s.criteria", "got 11"},
		{q(`"s":{"type":"score","instructions":"?","criteria":{"0":"a","1":"b"}}`), "questions.s.criteria", "must be an array"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":["a","b","c","d","e"]}`, "images", "at most 4 items, got 5"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":"data:image/png;base64,AAAA"}`, "images", "must be an array"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":["https://example.com/cat.png"]}`, "images.0", "remote URLs are not accepted"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":["data:image/png;base64,` + b64(4<<20+3) + `"]}`, "images.0", "at most 4 MiB decoded"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":["data:image/png;base64,` + b64(3<<20) + `","data:image/png;base64,` + b64(3<<20) + `","data:image/png;base64,` + b64(3<<20) + `"]}`, "images", "at most 8 MiB decoded in all"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"images":[{"content_type":"image/png","base64":"AAAA","url":"x"}]}`, "images.0.url", "unknown field"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"audio":["data:video/mp4;base64,AAAA"]}`, "audio.0", "must be a data:audio/... URL"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"audio":[{"content_type":"video/mp4","base64":"AAAA"}]}`, "audio.0.content_type", "must be audio/*"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"videos":["data:video/mp4;base64,AAAA","data:video/mp4;base64,AAAA","data:video/mp4;base64,AAAA"]}`, "videos", "at most 2 items, got 3"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"audio":["data:audio/wav;base64,` + b64(8<<20) + `"],"videos":["data:video/mp4;base64,` + b64(9<<20) + `"]}`, "videos", "together"},
		{`{"model":"clef-omni","state":"s","questions":{"n":{` + noul + `}},"videos":[3]}`, "videos.0", "got int"},
	} {
		req, err := ParseRequest([]byte(c.body))
		if err != nil {
			t.Fatalf("%.80s: %v", c.body, err)
		}
		err = req.ValidateHosted()
		short := c.body
		if len(short) > 120 {
			short = short[:120] + "..."
		}
		switch {
		case c.msg == "":
			checkErr(t, short, err, 0, 0, "", "")
		case c.field == "questions" && strings.Contains(c.msg, "at least one"):
			checkErr(t, short, err, 400, CodeBadRequest, c.field, c.msg)
		default:
			checkErr(t, short, err, 422, CodeValidation, c.field, c.msg)
		}
	}
}

func TestCheckBodySize(t *testing.T) {
	if err := CheckBodySize(MaxBodyBytes); err != nil {
		t.Error(err)
	}
	var ae *Error
	if err := CheckBodySize(MaxBodyBytes + 1); !errors.As(err, &ae) || ae.Status != 413 || ae.Code != CodeTooLong {
		t.Errorf("err = %v, want 413/5021", err)
	}
}

func TestRefuseMedia(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"m","state":1,"questions":{}}`:                             "",
		`{"model":"m","state":1,"questions":{},"images":[],"audio":null}`:    "",
		`{"model":"m","state":1,"questions":{},"videos":false,"images":""}`:  "",
		`{"model":"m","state":1,"questions":{},"audio":["data:audio/wav;"]}`: "audio",
		`{"model":"m","state":1,"questions":{},"images":{"a":1}}`:            "images",
		`{"model":"m","state":1,"questions":{},"videos":1}`:                  "videos",
	} {
		r, err := ParseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		err = r.RefuseMedia("not read by this runtime")
		var ae *Error
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want no error", body, err)
		case want != "" && (!errors.As(err, &ae) || ae.Field != want || ae.Status != 422 || ae.Message != want+": not read by this runtime"):
			t.Errorf("%s: %v, want a 422 naming %s", body, err, want)
		}
		// Only the fields named are refused.
		if err := r.RefuseMedia("x", "nothing-such"); err != nil {
			t.Errorf("%s: %v refusing an unknown field", body, err)
		}
		if want != "" {
			if err := r.RefuseMedia("x", want); err == nil {
				t.Errorf("%s: %s not refused when named", body, want)
			}
		}
	}
}

func TestAddMedia(t *testing.T) {
	r, err := ParseRequest([]byte(`{"model":"m","state":1,"questions":{},"audio":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddMedia("images", "image/png", []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMedia("audio", "audio/wav", []byte("RIFF")); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMedia("images", "image/jpeg", []byte{4}); err != nil {
		t.Fatal(err)
	}
	imgs, clips := r.MediaItems("images"), r.MediaItems("audio")
	if len(imgs) != 2 || imgs[0] != (MediaItem{ContentType: "image/png", Base64: "AQID"}) || imgs[1].ContentType != "image/jpeg" ||
		len(clips) != 1 || clips[0] != (MediaItem{ContentType: "audio/wav", Base64: "UklGRg=="}) {
		t.Fatalf("items %+v %+v", imgs, clips)
	}
	if err := r.AddMedia("pictures", "image/png", nil); err == nil {
		t.Error("unknown field accepted")
	}
	r2, _ := ParseRequest([]byte(`{"model":"m","state":1,"questions":{},"images":"x"}`))
	if err := r2.AddMedia("images", "image/png", nil); err == nil {
		t.Error("a non-list images field extended")
	}
}
