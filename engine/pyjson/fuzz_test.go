package pyjson

import (
	"bufio"
	"os"
	"testing"
)

// addFixtureSeeds adds every line of the JSONL fixtures (records and clef-tiny
// requests) that is under maxLen bytes.
func addFixtureSeeds(f *testing.F, maxLen int) {
	for _, path := range []string{
		"../../testdata/tokenizer/qwen3/records.jsonl",
		"../../testdata/tokenizer/qwen3/golden.jsonl",
		"../../testdata/clef-tiny/cases.jsonl",
	} {
		fh, err := os.Open(path)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if len(sc.Bytes()) <= maxLen {
				f.Add(append([]byte(nil), sc.Bytes()...))
			}
		}
		fh.Close()
	}
}

// FuzzParseRender checks that Decode never panics and that rendering is
// stable: whatever Decode accepts, Dumps writes a document that decodes back
// to the same rendering, under both Compact and Default.
func FuzzParseRender(f *testing.F) {
	for _, c := range pythonCases {
		f.Add([]byte(c.in))
	}
	for _, in := range rejected {
		if len(in) < 100 {
			f.Add([]byte(in))
		}
	}
	addFixtureSeeds(f, 16<<10)
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, o := range []Options{Compact, Default} {
			r1 := Dumps(v, o)
			v2, err := Decode([]byte(r1))
			if err != nil {
				t.Fatalf("Decode(Dumps(x)) failed: %v\n%s", err, r1)
			}
			if r2 := Dumps(v2, o); r2 != r1 {
				t.Fatalf("unstable rendering:\n%s\n%s", r1, r2)
			}
		}
		_ = Render(v)
	})
}
