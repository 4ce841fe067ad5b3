package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeInvalidUTF8(t *testing.T) {
	// Expected values are what Python's bytes.decode("utf-8", "replace") gives.
	cases := []struct {
		in   []byte
		want string
	}{
		{[]byte("abc"), "abc"},
		{[]byte{0xE2, 0x82}, "\uFFFD"},
		{[]byte{0xE2, 0x82, 'x'}, "\uFFFDx"},
		{[]byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{[]byte{0xF0, 0x9F, 0x98}, "\uFFFD"},
		{[]byte{0xF0, 0x9F, 0x98, 0x80}, "😀"},
		{[]byte{0xC0, 0xAF}, "\uFFFD\uFFFD"},
		{[]byte{0xF4, 0x90, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{[]byte{0xE0, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{[]byte{0xFF, 'a', 0x80}, "\uFFFDa\uFFFD"},
		{[]byte{0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2}, "\uFFFD\uFFFD\uFFFD"},
	}
	for _, c := range cases {
		if got := toValidUTF8(c.in); got != c.want {
			t.Errorf("% x: got %+q, want %+q", c.in, got, c.want)
		}
	}
}

func TestDecodeTokens(t *testing.T) {
	tok := qwen3(t)
	// A lone lead byte, and a lead byte then ASCII.
	lead, ok := tok.TokenID(string(byteToRune[0xF0]))
	if !ok {
		t.Fatal("no token for byte F0")
	}
	if got := tok.Decode([]int{lead}); got != "\uFFFD" {
		t.Errorf("lone F0 decodes to %+q", got)
	}
	if got := tok.Decode([]int{lead, 9707}); got != "\uFFFDHello" {
		t.Errorf("F0 Hello decodes to %+q", got)
	}
	// Unknown ids are skipped.
	if got := tok.Decode([]int{-1, 9707, 1 << 30, 151645}); got != "Hello<|im_end|>" {
		t.Errorf("got %q", got)
	}
	if got := tok.Decode(nil); got != "" {
		t.Errorf("empty decode %q", got)
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok := qwen3(t)
	got := tok.Encode("a\xffb")
	want := tok.Encode("a\uFFFDb")
	if !slices.Equal(got, want) {
		t.Errorf("invalid byte: %v, want %v", got, want)
	}
}

func TestTokenLookup(t *testing.T) {
	tok := qwen3(t)
	if tok.VocabSize() != 151669 {
		t.Errorf("VocabSize %d, want 151669", tok.VocabSize())
	}
	for s, want := range map[string]int{"Ġworld": 1879, "<|im_end|>": 151645, "<think>": 151667, "!": 0} {
		if id, ok := tok.TokenID(s); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", s, id, ok, want)
		}
		if back, ok := tok.Token(want); !ok || back != s {
			t.Errorf("Token(%d) = %q", want, back)
		}
	}
	if _, ok := tok.TokenID("<|audio_pad|>"); ok {
		t.Error("Qwen3 has no <|audio_pad|>")
	}
	if !tok.IsSpecial(151645) || tok.IsSpecial(151667) || tok.IsSpecial(0) {
		t.Error("IsSpecial wrong")
	}
	if tok.PreTokenizer() != "qwen2" {
		t.Errorf("PreTokenizer %q", tok.PreTokenizer())
	}
	if n := len(tok.AddedTokens()); n != 26 {
		t.Errorf("%d added tokens, want 26", n)
	}
}

// Both BPE paths must agree: the quadratic loop for short words and the heap
// for long ones.
func TestMergePathsAgree(t *testing.T) {
	tok := qwen3(t)
	words := []string{"hello", "Ġworld", strings.Repeat("a", 40), "antidisestablishmentarianism", "😀😀😀", strings.Repeat(" ", 47), "决定状态决定"}
	words = append(words, noSpaces(47), noSpaces(20))
	for _, w := range words {
		var buf [smallWord]int32
		small := tok.model.mergeSmall(buf[:0], w)
		large := tok.model.mergeLarge(w)
		if !slices.Equal(small, large) {
			t.Errorf("%q: small %v, large %v", w, small, large)
		}
	}
}

func TestMergesAsStrings(t *testing.T) {
	tiny, err := os.ReadFile(tinyTokDir + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err := FromJSON(tiny)
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite every ["a","b"] merge as "a b".
	var doc map[string]any
	if err := json.Unmarshal(tiny, &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	merges := model["merges"].([]any)
	for i, m := range merges {
		p := m.([]any)
		merges[i] = p[0].(string) + " " + p[1].(string)
	}
	rewritten, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromJSON(rewritten)
	if err != nil {
		t.Fatalf("merges as strings: %v", err)
	}
	for _, text := range []string{"hello world", `{"state": "ticket 12"}`, "the quick brown fox"} {
		if x, y := a.Encode(text), b.Encode(text); !slices.Equal(x, y) {
			t.Errorf("%q: pairs %v, strings %v", text, x, y)
		}
	}
	if len(a.Encode("the state")) >= len("the state") {
		t.Error("merges were not applied")
	}
}

func TestBadTokenizerJSON(t *testing.T) {
	good, err := os.ReadFile(tinyTokDir + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	g := string(good)
	cases := []struct {
		name, json, want string
	}{
		{"empty", "", "tokenizer.json"},
		{"not json", "{nope", "tokenizer.json"},
		{"truncated", g[:len(g)/2], "tokenizer.json"},
		{"no model", `{"pre_tokenizer":` + preTok(g) + `,"decoder":{"type":"ByteLevel"}}`, "model is missing"},
		{"wordpiece", strings.Replace(g, `"type": "BPE"`, `"type": "WordPiece"`, 1), "WordPiece"},
		{"other regex", strings.Replace(g, `\\p{N}|`, `\\p{N}{1,3}|`, 1), "regex"},
		{"no pre_tokenizer", strings.Replace(g, `"pre_tokenizer"`, `"pre_tokenizer_x"`, 1), "pre_tokenizer"},
		{"nfkc", strings.Replace(g, `"type": "NFC"`, `"type": "NFKC"`, 1), "NFKC"},
		{"bad merge", strings.Replace(g, `"merges": [`, `"merges": [["zz","qq"],`, 1), "merge 0"},
		{"three-part merge", strings.Replace(g, `"merges": [`, `"merges": ["a b c",`, 1), "two tokens"},
		{"negative id", strings.Replace(g, `"!": 0`, `"!": -5`, 1), "id -5"},
		{"huge id", strings.Replace(g, `"!": 0`, `"!": 99999999999`, 1), "outside"},
		{"far id", strings.Replace(g, `"!": 0`, `"!": 3000000`, 1), "ids up to 3000000"},
		{"far added id", strings.Replace(g, `"id": 500`, `"id": 4000000`, 1), "far past"},
		{"duplicate id", strings.Replace(g, `"!": 0`, `"!": 1`, 1), "share id"},
		{"added id clash", strings.Replace(g, `"id": 500`, `"id": 5`, 1), "already"},
		{"byte fallback", strings.Replace(g, `"byte_fallback": false`, `"byte_fallback": true`, 1), "byte_fallback"},
	}
	for _, c := range cases {
		if c.json == g {
			t.Fatalf("%s: replacement did not apply", c.name)
		}
		_, err := FromJSON([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one naming %q", c.name, err, c.want)
		}
	}
	if _, err := Load("no/such/dir"); err == nil {
		t.Error("Load of a missing path succeeded")
	}
}

func preTok(g string) string {
	i := strings.Index(g, `"pre_tokenizer"`)
	j := strings.Index(g, `"post_processor"`)
	s := strings.TrimSpace(g[i+len(`"pre_tokenizer"`) : j])
	s = strings.TrimPrefix(s, ":")
	return strings.TrimSuffix(strings.TrimSpace(s), ",")
}

func TestAddSpecialTokens(t *testing.T) {
	tok, err := Load(tinyTokDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.AddSpecialTokens([]AddedToken{{ID: 3, Content: "<new>"}}); err == nil {
		t.Error("id clash accepted")
	}
	if err := tok.AddSpecialTokens([]AddedToken{{ID: -1, Content: "<new>", Special: true}}); err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID("<new>"); !ok || id != 512 || tok.VocabSize() != 513 {
		t.Errorf("<new> got id %d, %v; VocabSize %d", id, ok, tok.VocabSize())
	}
	if got := tok.Encode("a<new>b"); len(got) != 3 || got[1] != 512 {
		t.Errorf("a<new>b = %v", got)
	}
	if got := tok.Decode([]int{512}); got != "<new>" {
		t.Errorf("decode %q", got)
	}
	if err := tok.AddSpecialTokens([]AddedToken{{ID: 7, Content: ""}}); err == nil {
		t.Error("empty content accepted")
	}
}

func TestParseAddedTokens(t *testing.T) {
	for _, in := range []string{
		`[{"id": 7, "content": "<x>", "special": true}]`,
		`{"added_tokens": [{"id": 7, "content": "<x>", "special": true}]}`,
		`{"added_tokens_decoder": {"7": {"content": "<x>", "special": true}}}`,
	} {
		toks, err := ParseAddedTokens([]byte(in))
		if err != nil || len(toks) != 1 || toks[0].ID != 7 || toks[0].Content != "<x>" || !toks[0].Special {
			t.Errorf("%s: %+v, %v", in, toks, err)
		}
	}
	for _, in := range []string{``, `{}`, `[{"id": 1}]`, `{"added_tokens_decoder": {"x": {"content": "a"}}}`, `[1,2]`} {
		if _, err := ParseAddedTokens([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// Added tokens are matched in the raw text, before NFC: a combining mark
// after one does not compose with its last character.
func TestAddedTokensBeforeNFC(t *testing.T) {
	tok := qwen3(t)
	ids := tok.Encode("<|im_end|>\u0338")
	if len(ids) < 2 || ids[0] != 151645 {
		t.Fatalf("ids %v", ids)
	}
	if got := tok.Decode(ids); got != "<|im_end|>\u0338" {
		t.Errorf("decode %+q", got)
	}
	// Without the token, '>' + U+0338 composes to U+226F.
	if got := tok.Decode(tok.Encode("a>\u0338")); got != "a\u226f" {
		t.Errorf("decode %+q", got)
	}
}

func FuzzEncode(f *testing.F) {
	for _, g := range readGolden(f, qwen3Dir+"golden.jsonl") {
		if len(g.Text) < 2000 {
			f.Add(g.Text)
		}
	}
	for _, s := range splitSeeds {
		f.Add(s)
	}
	tok := omni(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("%q: id %d out of range", s, id)
			}
		}
		// Decoding gives back the text as the encoder saw it: valid UTF-8,
		// normalized between the added tokens.
		want := strings.Join(tok.Pieces(s), "")
		if got := tok.Decode(ids); got != want {
			t.Fatalf("%q: decode %q, want %q", s, got, want)
		}
		if utf8.ValidString(s) && !strings.ContainsAny(s, "<") && !slices.Equal(tok.Encode(tok.Decode(ids)), ids) {
			// NFC is idempotent and there are no added tokens to recompose around,
			// so re-encoding the decoded text is stable.
			t.Fatalf("%q: encode(decode(ids)) differs", s)
		}
		// Every word agrees between the two BPE paths.
		for _, p := range tok.Pieces(s) {
			if len(p) > smallWord || p == "" {
				continue
			}
			var buf [smallWord]int32
			if a, b := tok.model.mergeSmall(buf[:0], p), tok.model.mergeLarge(p); !slices.Equal(a, b) {
				t.Fatalf("%q: small %v, large %v", p, a, b)
			}
		}
	})
}

// The Qwen3.5 regex keeps combining marks in letter runs.
func TestQwen35Variant(t *testing.T) {
	g, err := os.ReadFile(tinyTokDir + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(g), `]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+`, `]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+`, 1)
	if s == string(g) {
		t.Fatal("regex replacement did not apply")
	}
	q35, err := FromJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	q2, err := FromJSON(g)
	if err != nil {
		t.Fatal(err)
	}
	if q35.PreTokenizer() != "qwen3.5" || q2.PreTokenizer() != "qwen2" {
		t.Fatalf("variants %q %q", q35.PreTokenizer(), q2.PreTokenizer())
	}
	text := "a\u0331b x\u0331"
	if got, want := q2.Pieces(text), []string{"a", "\u0331b", " x", "\u0331"}; !slices.Equal(got, want) {
		t.Errorf("qwen2 pieces %q, want %q", got, want)
	}
	if got, want := q35.Pieces(text), []string{"a\u0331b", " x\u0331"}; !slices.Equal(got, want) {
		t.Errorf("qwen3.5 pieces %q, want %q", got, want)
	}
}

func TestMergeJSONForms(t *testing.T) {
	cases := []struct {
		in   string
		a, b string
		bad  bool
	}{
		{in: `["a","b"]`, a: "a", b: "b"},
		{in: "[ \"Ġ\" ,\n \"t\" ]", a: "Ġ", b: "t"},
		{in: `["\"",":"]`, a: `"`, b: ":"},
		{in: `["a\u0020","b"]`, a: "a ", b: "b"},
		{in: `"Ġ Ġ"`, a: "Ġ", b: "Ġ"},
		{in: `["a"]`, bad: true},
		{in: `["a","b","c"]`, bad: true},
		{in: `["a",1]`, bad: true},
		{in: `"a b c"`, bad: true},
		{in: `"ab"`, bad: true},
		{in: `7`, bad: true},
	}
	for _, c := range cases {
		var m []mergeJSON
		err := json.Unmarshal([]byte("["+c.in+"]"), &m)
		if c.bad {
			if err == nil {
				t.Errorf("%s accepted as %q %q", c.in, m[0].a, m[0].b)
			}
			continue
		}
		if err != nil || m[0].a != c.a || m[0].b != c.b {
			t.Errorf("%s: %+v, %v", c.in, m, err)
		}
	}
}

// Encoding from many goroutines at once shares the word cache safely (run
// with -race) and gives the same ids as encoding alone.
func TestConcurrentEncode(t *testing.T) {
	tok := qwen3(t)
	lines := readGolden(t, qwen3Dir+"golden.jsonl")
	done := make(chan string, 4)
	for w := 0; w < 4; w++ {
		go func(w int) {
			for i := w; i < len(lines); i += 2 {
				if got := tok.Encode(lines[i].Text); !slices.Equal(got, lines[i].IDs) {
					done <- lines[i].Text
					return
				}
			}
			done <- ""
		}(w)
	}
	for w := 0; w < 4; w++ {
		if s := <-done; s != "" {
			t.Errorf("concurrent encode of %q differs", trunc(s))
		}
	}
}
