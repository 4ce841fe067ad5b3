package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	qwen3Dir   = "../../testdata/tokenizer/qwen3/"
	llamaDir   = "../../testdata/tokenizer/llamacpp-qwen2/"
	tinyTokDir = "../../testdata/clef-tiny/release/"
)

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// qwen3 loads the Qwen3 tokenizer once per test binary.
func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	qwenOnce.Do(func() { qwenTok, qwenErr = Load(qwen3Dir + "tokenizer.json") })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

var (
	omniOnce sync.Once
	omniTok  *Tokenizer
	omniErr  error
)

// omni loads, once, a Qwen3 tokenizer with the fixture's Omni tokens added.
func omni(t testing.TB) *Tokenizer {
	t.Helper()
	omniOnce.Do(func() {
		omniTok, omniErr = Load(qwen3Dir)
		if omniErr != nil {
			return
		}
		var added []AddedToken
		if added, omniErr = LoadAddedTokens(qwen3Dir + "qwen3-omni-added-tokens.json"); omniErr == nil {
			omniErr = omniTok.AddSpecialTokens(added)
		}
	})
	if omniErr != nil {
		t.Fatal(omniErr)
	}
	return omniTok
}

type goldenLine struct {
	Text      string   `json:"text"`
	IDs       []int    `json:"ids"`
	Tokens    []string `json:"tokens"`
	Roundtrip bool     `json:"roundtrip"`
	Decoded   *string  `json:"decoded"`
	Tag       string   `json:"tag"`
}

func readGolden(t testing.TB, path string) []goldenLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var g goldenLine
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("%s line %d: %v", path, len(out)+1, err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkGolden(t *testing.T, tok *Tokenizer, lines []goldenLine) {
	t.Helper()
	fails := 0
	for i, g := range lines {
		got := tok.Encode(g.Text)
		if !slices.Equal(got, g.IDs) {
			fails++
			if fails <= 10 {
				t.Errorf("line %d (%s) %q:\n got %v\nwant %v\npieces %q", i+1, g.Tag, trunc(g.Text), got, g.IDs, tok.Pieces(trunc(g.Text)))
			}
			continue
		}
		for k, id := range got {
			if s, _ := tok.Token(id); s != g.Tokens[k] {
				t.Errorf("line %d: token %d is %q, want %q", i+1, id, s, g.Tokens[k])
			}
		}
		want := g.Text
		if !g.Roundtrip {
			if g.Decoded == nil {
				t.Fatalf("line %d: no roundtrip and no decoded text", i+1)
			}
			want = *g.Decoded
		}
		if dec := tok.Decode(g.IDs); dec != want {
			t.Errorf("line %d: decode %q, want %q", i+1, trunc(dec), trunc(want))
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d strings differ", fails, len(lines))
	}
}

func trunc(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func TestGoldenQwen3(t *testing.T) {
	lines := readGolden(t, qwen3Dir+"golden.jsonl")
	if len(lines) != 378 {
		t.Fatalf("golden.jsonl has %d lines, want 378", len(lines))
	}
	checkGolden(t, qwen3(t), lines)
}

func TestGoldenOmni(t *testing.T) {
	tok := omni(t)
	lines := readGolden(t, qwen3Dir+"golden-omni.jsonl")
	if len(lines) != 9 {
		t.Fatalf("golden-omni.jsonl has %d lines, want 9", len(lines))
	}
	checkGolden(t, tok, lines)
	// Every other string of the corpus is unchanged by the Omni tokens.
	for _, g := range readGolden(t, qwen3Dir+"golden.jsonl") {
		if strings.Contains(g.Text, "<|audio_") || strings.Contains(g.Text, "<tts_") {
			continue
		}
		if got := tok.Encode(g.Text); !slices.Equal(got, g.IDs) {
			t.Errorf("omni changes %q: %v, want %v", trunc(g.Text), got, g.IDs)
		}
	}
	if tok.VocabSize() != 151676 {
		t.Errorf("omni VocabSize %d, want 151676", tok.VocabSize())
	}
}

// The built-in Omni list must agree with the fixture's.
func TestOmniAddedTokensMatchFixture(t *testing.T) {
	fix, err := LoadAddedTokens(qwen3Dir + "qwen3-omni-added-tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(fix) != len(OmniAddedTokens) {
		t.Fatalf("fixture has %d tokens, OmniAddedTokens %d", len(fix), len(OmniAddedTokens))
	}
	for i, f := range fix {
		o := OmniAddedTokens[i]
		if f.ID != o.ID || f.Content != o.Content || f.Special != o.Special {
			t.Errorf("token %d: fixture %+v, built-in %+v", i, f, o)
		}
	}
}

// The llama.cpp qwen2 vectors (Qwen1.5 tokenizer, same family) with the
// Qwen3 vocabulary.
func TestLlamaCppQwen2(t *testing.T) {
	inp, err := os.ReadFile(llamaDir + "ggml-vocab-qwen2.gguf.inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(llamaDir + "ggml-vocab-qwen2.gguf.out")
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	if texts[len(texts)-1] != "" {
		t.Fatal("input does not end with a separator")
	}
	texts = texts[:len(texts)-1]
	wants := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(texts) != 46 || len(wants) != 46 {
		t.Fatalf("%d texts and %d outputs, want 46", len(texts), len(wants))
	}
	tok := qwen3(t)
	for i, text := range texts {
		var want []int
		for _, f := range strings.Fields(wants[i]) {
			var id int
			if err := json.Unmarshal([]byte(f), &id); err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			want = append(want, id)
		}
		if got := tok.Encode(text); !slices.Equal(got, want) {
			t.Errorf("string %d %q: got %v, want %v", i+1, text, got, want)
		}
	}
}

func TestTinyTokenizer(t *testing.T) {
	tok, err := Load(tinyTokDir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 512 {
		t.Errorf("VocabSize %d, want 512", tok.VocabSize())
	}
	for _, s := range []string{"hello world", "<|im_start|>user\n{\"a\": 1}<|im_end|>", "héllo 😀 12\n\n"} {
		ids := tok.Encode(s)
		if len(ids) == 0 {
			t.Errorf("%q: no ids", s)
		}
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Errorf("%q: id %d out of range", s, id)
			}
		}
		if got := tok.Decode(ids); got != s {
			t.Errorf("decode %q, want %q", got, s)
		}
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || id != 501 {
		t.Errorf("TokenID(<|im_end|>) = %d, %v", id, ok)
	}
	// The Omni tokens are already there at other ids: adding them is a no-op.
	if err := tok.AddSpecialTokens(OmniAddedTokens[:2]); err != nil {
		t.Errorf("AddSpecialTokens on tiny: %v", err)
	}
	if got := tok.Encode("<|audio_start|>"); !slices.Equal(got, []int{502}) {
		t.Errorf("tiny <|audio_start|> = %v, want [502]", got)
	}
}
