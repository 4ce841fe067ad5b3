package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/clefrt/clef/internal/untrusted"
)

// The GGUF side of the tokenizer: FromGGUF rebuilds a Tokenizer from the
// tokenizer.ggml.* metadata of a GGUF file (llama.cpp's "gpt2" model with
// the "qwen2" pre-tokenizer), and GGUFMetadata writes that metadata from a
// release's tokenizer.json and tokenizer_config.json, for clef quantize. The
// package reads and writes plain key/value pairs, so it knows no GGUF
// container: the weights package's GGUF file is a Metadata, and its writer
// takes the KV pairs.

// Metadata is read-only access to GGUF metadata: the value of a key as the
// GGUF reader decodes it (string, uint32, bool, []string, []int32, ...), and
// whether the key is present.
type Metadata interface {
	Get(key string) (any, bool)
}

// KV is one GGUF metadata entry. Value holds the Go value of the entry's GGUF
// type (see Metadata).
type KV struct {
	Key   string
	Value any
}

// GGUF token types (llama.cpp's llama_token_type).
const (
	ggufTokenNormal      = 1
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
	ggufTokenUnused      = 5
)

// The tokenizer.ggml.* keys read and written here.
const (
	ggufModelKey     = "tokenizer.ggml.model"
	ggufPreKey       = "tokenizer.ggml.pre"
	ggufTokensKey    = "tokenizer.ggml.tokens"
	ggufTokenTypeKey = "tokenizer.ggml.token_type"
	ggufMergesKey    = "tokenizer.ggml.merges"
)

// qwenPreTokenizer, byteLevel and the NFC normalizer are the blocks every
// Qwen2/Qwen3 tokenizer.json carries; a GGUF names them only as
// tokenizer.ggml.pre = "qwen2", so they are restored here.
const qwenPreTokenizer = `{"type": "Sequence", "pretokenizers": [` +
	`{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, ` +
	`{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}`

const byteLevel = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`

// metadataValue returns the value of key as a T; want describes T in the
// error.
func metadataValue[T any](md Metadata, key, want string) (T, error) {
	var zero T
	v, ok := md.Get(key)
	if !ok {
		return zero, fmt.Errorf("tokenizer: GGUF metadata has no %s (want %s)", key, want)
	}
	x, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("tokenizer: GGUF metadata %s is %T, want %s", key, v, want)
	}
	return x, nil
}

// FromGGUF rebuilds the Hugging Face tokenizer from a GGUF's tokenizer.ggml.*
// metadata (byte-level BPE, Qwen2 pre-tokenizer): normal tokens form the BPE
// vocabulary, control tokens are special added tokens, user-defined tokens
// non-special added tokens; padding (unused) entries are dropped.
func FromGGUF(md Metadata) (*Tokenizer, error) {
	model, err := metadataValue[string](md, ggufModelKey, `"gpt2" (byte-level BPE)`)
	if err != nil {
		return nil, err
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("tokenizer: GGUF metadata %s is %s, want \"gpt2\" (byte-level BPE)", ggufModelKey, untrusted.Quote(model))
	}
	pre, err := metadataValue[string](md, ggufPreKey, `"qwen2"`)
	if err != nil {
		return nil, err
	}
	if pre != "qwen2" {
		return nil, fmt.Errorf("tokenizer: GGUF metadata %s is %s, want \"qwen2\"", ggufPreKey, untrusted.Quote(pre))
	}
	tokens, err := metadataValue[[]string](md, ggufTokensKey, "an array of strings")
	if err != nil {
		return nil, err
	}
	types, err := metadataValue[[]int32](md, ggufTokenTypeKey, "an array of int32")
	if err != nil {
		return nil, err
	}
	if len(types) != len(tokens) {
		return nil, fmt.Errorf("tokenizer: GGUF metadata %s has %d entries, want %d (one per %s)", ggufTokenTypeKey, len(types), len(tokens), ggufTokensKey)
	}
	merges, err := metadataValue[[]string](md, ggufMergesKey, "an array of strings")
	if err != nil {
		return nil, err
	}
	vocab := make(map[string]int, len(tokens))
	var addedTokens []AddedToken
	for id, tok := range tokens {
		switch types[id] {
		case ggufTokenNormal:
			vocab[tok] = id
		case ggufTokenControl, ggufTokenUserDefined:
			addedTokens = append(addedTokens, AddedToken{ID: id, Content: tok, Special: types[id] == ggufTokenControl})
		}
	}
	pairs := make([][2]string, len(merges))
	for i, mg := range merges {
		a, b, ok := strings.Cut(mg, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("tokenizer: GGUF metadata %s[%d] = %s is not two tokens", ggufMergesKey, i, untrusted.Quote(mg))
		}
		pairs[i] = [2]string{a, b}
	}
	bpe, err := json.Marshal(map[string]any{
		"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
		"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": pairs,
	})
	if err != nil {
		return nil, err
	}
	at, err := json.Marshal(addedTokens)
	if err != nil {
		return nil, err
	}
	doc := `{"version": "1.0", "truncation": null, "padding": null, "added_tokens": ` + string(at) +
		`, "normalizer": {"type": "NFC"}, "pre_tokenizer": ` + qwenPreTokenizer +
		`, "post_processor": ` + byteLevel + `, "decoder": ` + byteLevel + `, "model": ` + string(bpe) + `}`
	tok, err := FromJSON([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("tokenizer from GGUF metadata: %w", err)
	}
	return tok, nil
}

// GGUFMetadata builds, from the tokenizer.json and the optional
// tokenizer_config.json in dir, the tokenizer.ggml.* metadata that makes a
// GGUF stand alone: the byte-level BPE vocabulary padded to rows embedding
// rows ([PADn] entries, type unused, as llama.cpp's converter writes), the
// merges, token types (added special tokens are control tokens, other added
// tokens user-defined), the special token ids from tokenizer_config.json,
// add_bos_token and the chat template. FromGGUF reads it back.
func GGUFMetadata(dir string, rows int) ([]KV, error) {
	p := filepath.Join(dir, "tokenizer.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var tj struct {
		Model struct {
			Type   string            `json:"type"`
			Vocab  map[string]int    `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %s", p, untrusted.Error(err))
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model type %s, want BPE", p, untrusted.Quote(tj.Model.Type))
	}
	tokens := make([]string, rows)
	types := make([]int32, rows)
	set := make([]bool, rows)
	put := func(id int, s string, typ int32) error {
		if id < 0 || id >= rows {
			return fmt.Errorf("%s: token %s has id %d outside the %d embedding rows", p, untrusted.Quote(s), id, rows)
		}
		tokens[id], types[id], set[id] = s, typ, true
		return nil
	}
	for s, id := range tj.Model.Vocab {
		if err := put(id, s, ggufTokenNormal); err != nil {
			return nil, err
		}
	}
	ids := map[string]int{}
	for _, a := range tj.AddedTokens {
		typ := int32(ggufTokenUserDefined)
		if a.Special {
			typ = ggufTokenControl
		}
		if err := put(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
		ids[a.Content] = a.ID
	}
	for i := range tokens {
		if !set[i] {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), ggufTokenUnused
		}
	}
	merges := make([]string, 0, len(tj.Model.Merges))
	for i, m := range tj.Model.Merges {
		var s string
		var pair []string
		if json.Unmarshal(m, &s) == nil {
			merges = append(merges, s)
			continue
		}
		if err := json.Unmarshal(m, &pair); err != nil || len(pair) != 2 || strings.Contains(pair[0], " ") || strings.Contains(pair[1], " ") {
			return nil, fmt.Errorf("%s: merge %d is neither \"a b\" nor a pair of space-free strings", p, i)
		}
		merges = append(merges, pair[0]+" "+pair[1])
	}
	kv := []KV{
		{Key: ggufModelKey, Value: "gpt2"},
		{Key: ggufPreKey, Value: "qwen2"},
		{Key: ggufTokensKey, Value: tokens},
		{Key: ggufTokenTypeKey, Value: types},
		{Key: ggufMergesKey, Value: merges},
	}
	cfg := readTokenizerConfig(dir)
	special := func(key, field, fallback string) {
		name := cfg.token(field)
		if name == "" {
			name = fallback
		}
		if id, ok := ids[name]; ok {
			kv = append(kv, KV{Key: key, Value: uint32(id)})
		} else if id, ok := tj.Model.Vocab[name]; ok {
			kv = append(kv, KV{Key: key, Value: uint32(id)})
		}
	}
	special("tokenizer.ggml.eos_token_id", "eos_token", "<|im_end|>")
	special("tokenizer.ggml.padding_token_id", "pad_token", "<|endoftext|>")
	special("tokenizer.ggml.bos_token_id", "bos_token", "<|endoftext|>")
	kv = append(kv, KV{Key: "tokenizer.ggml.add_bos_token", Value: cfg.AddBOS})
	if cfg.ChatTemplate != "" {
		kv = append(kv, KV{Key: "tokenizer.chat_template", Value: cfg.ChatTemplate})
	}
	return kv, nil
}

type tokenizerConfig struct {
	AddBOS       bool                       `json:"add_bos_token"`
	ChatTemplate string                     `json:"-"`
	Fields       map[string]json.RawMessage `json:"-"`
}

// readTokenizerConfig reads tokenizer_config.json leniently (it is optional).
func readTokenizerConfig(dir string) *tokenizerConfig {
	c := &tokenizerConfig{}
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return c
	}
	json.Unmarshal(b, c)
	json.Unmarshal(b, &c.Fields)
	if raw, ok := c.Fields["chat_template"]; ok {
		json.Unmarshal(raw, &c.ChatTemplate)
	}
	return c
}

// token returns a special token's text: a string or {"content": ...}.
func (c *tokenizerConfig) token(field string) string {
	raw, ok := c.Fields[field]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	json.Unmarshal(raw, &o)
	return o.Content
}
