package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	fuzzOnce   sync.Once
	fuzzServer *Server
)

// FuzzHandler throws arbitrary bodies at both decision routes. Whatever
// comes in: no 5xx, a JSON answer in the route's shape, Workers AI answers
// that validate against the published output schema, and a 4xx for every
// body the published input schema rejects.
func FuzzHandler(f *testing.F) {
	f.Add(goodBody, false)
	f.Add(goodBody, true)
	f.Add(`{"model":"clef-omni","state":{"a":[1,2.50,-0.0,1E5,null,true]},"questions":{"q":{"type":"noul","instructions":{"text":"x"},"criteria":{"false":{"d":1}}}}}`, true)
	f.Add(`{"model":"clef-omni","state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a",{"b":1},["c"]]}}}`, true)
	f.Add(`{"model":"clef-omni","state":"s","questions":{"q":{"type":"choice","instructions":"x","criteria":{"10":null,"2":"two"}}},"images":[]}`, true)
	f.Add(`{"model":"clef-omni","state":"s","questions":{"q":{"type":"noul","instructions":"x"}},"audio":["data:audio/wav;base64,AAAA"]}`, true)
	f.Add(`{"model":" clef-omni\t","state":null,"questions":{"q":{"type":"noul","instructions":[1]}}}`, true)
	f.Add(`{"model":"m","state":1,"questions":{"":{"type":"choice","criteria":{"":1}}}}`, false)
	f.Add(`{"model":"m","state":"\ud800","questions":{"q":{"type":"noul"}}}`, false)
	f.Add(`[`, false)
	f.Add(`{"model":"clef-omni","state":1,"questions":{"q":{"type":"noul","instructions":"x"}},"questions":{}}`, true)
	if fh, err := os.Open("../testdata/clef-tiny/cases.jsonl"); err == nil {
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var c struct{ Request json.RawMessage }
			if json.Unmarshal(sc.Bytes(), &c) == nil && len(c.Request) < 4096 {
				f.Add(string(c.Request), false)
				f.Add(strings.Replace(string(c.Request), `"model"`, `"model":"clef-omni","_m"`, 1), true)
			}
		}
		fh.Close()
	}
	in, out := workersAISchemas(f)
	fuzzOnce.Do(func() {
		fm := newFake()
		fm.plain = true
		s, err := New(Config{Logger: quietLogger(), Load: fm.loader(nil), QueueSize: 1024, RequestTimeout: 10 * time.Second})
		if err != nil {
			f.Fatal(err)
		}
		s.Start()
		deadline := time.Now().Add(10 * time.Second)
		for s.admit() != nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		fuzzServer = s
	})
	h := fuzzServer.Handler()
	f.Fuzz(func(t *testing.T, body string, wai bool) {
		path := soPath
		if wai {
			path = waiPath
		}
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, path, strings.NewReader(body))
		req.Host = "127.0.0.1:8089" // httptest's example.com is not served (DNS rebinding)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		r := result{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		if r.status >= 500 {
			t.Fatalf("status %d for %q: %s", r.status, body, r.body)
		}
		if _, err := decodeJSON(bytes.TrimSpace(r.body)); err != nil {
			t.Fatalf("answer is not JSON (%v): %s", err, r.body)
		}
		if !wai {
			if r.status == 200 && !bytes.Contains(r.body, []byte(`"answers": {`)) {
				t.Fatalf("SystemOne answer without answers: %s", r.body)
			}
			return
		}
		checkWorkersAIResponse(t, out, r)
		if v, err := decodeJSON([]byte(body)); err == nil {
			if msg := validate(in, v, ""); msg != "" && r.status == 200 {
				t.Fatalf("the input schema rejects %q (%s) but it was answered", body, msg)
			}
		}
	})
}
