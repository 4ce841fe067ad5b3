package tokenizer

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// kvMetadata is GGUF metadata held in a map, as a GGUF reader would hand it.
type kvMetadata map[string]any

func (m kvMetadata) Get(key string) (any, bool) {
	v, ok := m[key]
	return v, ok
}

func toMetadata(t *testing.T, kvs []KV) kvMetadata {
	t.Helper()
	m := kvMetadata{}
	for _, kv := range kvs {
		if _, dup := m[kv.Key]; dup {
			t.Fatalf("key %s written twice", kv.Key)
		}
		m[kv.Key] = kv.Value
	}
	return m
}

// roundTrip writes the tokenizer of dir to GGUF metadata padded to rows and
// reads it back.
func roundTrip(t *testing.T, dir string, rows int) (*Tokenizer, kvMetadata) {
	t.Helper()
	kvs, err := GGUFMetadata(dir, rows)
	if err != nil {
		t.Fatal(err)
	}
	md := toMetadata(t, kvs)
	tok, err := FromGGUF(md)
	if err != nil {
		t.Fatal(err)
	}
	return tok, md
}

// sameTokenizer checks that b encodes and decodes texts as a does, and that
// both name the same tokens and added tokens.
func sameTokenizer(t *testing.T, a, b *Tokenizer, texts []string) {
	t.Helper()
	if a.VocabSize() != b.VocabSize() {
		t.Errorf("VocabSize %d, want %d", b.VocabSize(), a.VocabSize())
	}
	if a.PreTokenizer() != b.PreTokenizer() {
		t.Errorf("PreTokenizer %q, want %q", b.PreTokenizer(), a.PreTokenizer())
	}
	for id := range a.VocabSize() {
		sa, oka := a.Token(id)
		sb, okb := b.Token(id)
		if sa != sb || oka != okb || a.IsSpecial(id) != b.IsSpecial(id) {
			t.Fatalf("id %d: %q %v special %v, want %q %v special %v", id, sb, okb, b.IsSpecial(id), sa, oka, a.IsSpecial(id))
		}
	}
	type idContent struct {
		id      int
		content string
		special bool
	}
	added := func(tok *Tokenizer) []idContent {
		var out []idContent
		for _, at := range tok.AddedTokens() {
			out = append(out, idContent{at.ID, at.Content, at.Special})
		}
		return out
	}
	if wa, wb := added(a), added(b); !slices.Equal(wa, wb) {
		t.Errorf("added tokens %v, want %v", wb, wa)
	}
	for _, s := range texts {
		ia, ib := a.Encode(s), b.Encode(s)
		if !slices.Equal(ia, ib) {
			t.Errorf("%q: ids %v, want %v", trunc(s), ib, ia)
			continue
		}
		if da, db := a.Decode(ia), b.Decode(ib); da != db {
			t.Errorf("%q: decode %q, want %q", trunc(s), trunc(db), trunc(da))
		}
	}
}

var ggufTexts = []string{
	"",
	"hello world",
	"Hello, World! It's 2024 and we'll see.",
	"<|im_start|>system\nYou fill forms.<|im_end|>\n<|im_start|>user\n{\"a\": 1}<|im_end|>\n",
	"<|audio_start|><|audio_pad|><|audio_end|> <|vision_start|><|image_pad|><|vision_end|>",
	"héllo 😀 12\n\n",
	"e\u0301t\u00e9 café naïve",
	"  leading and trailing spaces   \t\n",
	"tabs\tand\r\nnewlines\n\n\nend",
	"数字 1234567 和 日本語のテキスト",
	"mixed<|im_end|>inside<think>text</think>",
	"\xff invalid \xc3 bytes",
}

// TestGGUFRoundTripTiny writes the tiny release's tokenizer to GGUF metadata
// (exactly its 512 rows, and padded past them) and reads it back: the ids of
// every string are the same.
func TestGGUFRoundTripTiny(t *testing.T) {
	orig, err := Load(tinyTokDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{orig.VocabSize(), orig.VocabSize() + 8} {
		tok, md := roundTrip(t, tinyTokDir, rows)
		sameTokenizer(t, orig, tok, ggufTexts)
		toks := md[ggufTokensKey].([]string)
		types := md[ggufTokenTypeKey].([]int32)
		if len(toks) != rows || len(types) != rows {
			t.Fatalf("rows %d: %d tokens, %d types", rows, len(toks), len(types))
		}
		if rows > orig.VocabSize() {
			if last := toks[rows-1]; last != "[PAD519]" || types[rows-1] != ggufTokenUnused {
				t.Errorf("padding row %q type %d, want [PAD519] type %d", last, types[rows-1], ggufTokenUnused)
			}
		}
		if types[501] != ggufTokenControl {
			t.Errorf("<|im_end|> type %d, want control", types[501])
		}
		if v := md["tokenizer.ggml.eos_token_id"]; v != uint32(501) {
			t.Errorf("eos_token_id %v (%T), want uint32 501", v, v)
		}
		if v := md["tokenizer.ggml.add_bos_token"]; v != false {
			t.Errorf("add_bos_token %v", v)
		}
		if v, ok := md["tokenizer.chat_template"]; ok {
			t.Errorf("chat_template %q written, the tiny release has none", v)
		}
	}
}

// TestGGUFRoundTripQwen3 does the same with the full Qwen3 tokenizer, padded
// to its 151936 embedding rows, on the reference goldens.
func TestGGUFRoundTripQwen3(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the 11 MB Qwen3 tokenizer twice")
	}
	orig := qwen3(t)
	tok, md := roundTrip(t, qwen3Dir, 151936)
	lines := readGolden(t, qwen3Dir+"golden.jsonl")
	texts := make([]string, len(lines))
	for i, g := range lines {
		texts[i] = g.Text
	}
	sameTokenizer(t, orig, tok, append(texts, ggufTexts...))
	checkGolden(t, tok, lines)
	if ct, _ := md["tokenizer.chat_template"].(string); !strings.Contains(ct, "<|im_start|>") {
		t.Errorf("chat_template %q", trunc(ct))
	}
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.bos_token_id"} {
		if _, ok := md[k].(uint32); !ok {
			t.Errorf("%s is %T", k, md[k])
		}
	}
}

// TestFromGGUFErrors breaks one key at a time: the error names it.
func TestFromGGUFErrors(t *testing.T) {
	kvs, err := GGUFMetadata(tinyTokDir, 512)
	if err != nil {
		t.Fatal(err)
	}
	good := toMetadata(t, kvs)
	for _, tc := range []struct {
		name  string
		key   string
		value any // nil: delete the key
		want  string
	}{
		{"no model", ggufModelKey, nil, "has no tokenizer.ggml.model"},
		{"model type", ggufModelKey, int32(1), "tokenizer.ggml.model is int32"},
		{"model value", ggufModelKey, "llama", `tokenizer.ggml.model is "llama", want "gpt2"`},
		{"no pre", ggufPreKey, nil, "has no tokenizer.ggml.pre"},
		{"pre value", ggufPreKey, "llama3", `tokenizer.ggml.pre is "llama3", want "qwen2"`},
		{"no tokens", ggufTokensKey, nil, "has no tokenizer.ggml.tokens"},
		{"tokens type", ggufTokensKey, []int32{1, 2}, "tokenizer.ggml.tokens is []int32, want an array of strings"},
		{"no token types", ggufTokenTypeKey, nil, "has no tokenizer.ggml.token_type"},
		{"token types type", ggufTokenTypeKey, []uint8{1}, "tokenizer.ggml.token_type is []uint8, want an array of int32"},
		{"token types length", ggufTokenTypeKey, make([]int32, 511), "tokenizer.ggml.token_type has 511 entries, want 512"},
		{"no merges", ggufMergesKey, nil, "has no tokenizer.ggml.merges"},
		{"merges type", ggufMergesKey, "a b", "tokenizer.ggml.merges is string, want an array of strings"},
		{"merge form", ggufMergesKey, []string{"a b c"}, `tokenizer.ggml.merges[0] = "a b c" is not two tokens`},
	} {
		md := maps.Clone(good)
		if tc.value == nil {
			delete(md, tc.key)
		} else {
			md[tc.key] = tc.value
		}
		_, err := FromGGUF(md)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestGGUFMetadataErrors(t *testing.T) {
	if _, err := GGUFMetadata(tinyTokDir, 500); err == nil || !strings.Contains(err.Error(), "outside the 500 embedding rows") {
		t.Errorf("too few rows: err = %v", err)
	}
	if _, err := GGUFMetadata(t.TempDir(), 512); err == nil || !os.IsNotExist(err) {
		t.Errorf("no tokenizer.json: err = %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "WordPiece", "vocab": {}}}`), 0o644)
	if _, err := GGUFMetadata(dir, 512); err == nil || !strings.Contains(err.Error(), `model type "WordPiece", want BPE`) {
		t.Errorf("not BPE: err = %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a b", "c"]]}}`), 0o644)
	if _, err := GGUFMetadata(dir, 4); err == nil || !strings.Contains(err.Error(), "merge 0") {
		t.Errorf("bad merge: err = %v", err)
	}
}
