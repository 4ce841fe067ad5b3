package convert

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/clefrt/clef/engine/weights"
)

// llama.cpp token types (llama_token_type).
const (
	tokNormal      = 1
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
)

// tokenizerKV builds the tokenizer.ggml.* metadata that makes the backbone
// GGUF stand alone: the byte-level BPE vocabulary padded to the embedding
// rows ([PADn] entries, type unused, as llama.cpp's converter writes), the
// merges, token types (added special tokens are control tokens, other added
// tokens user-defined) and the special token ids from tokenizer_config.json.
func tokenizerKV(dir string, rows int) ([]weights.GGUFKV, error) {
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
		return nil, fmt.Errorf("%s: invalid JSON: %v", p, err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model type %q, want BPE", p, tj.Model.Type)
	}
	tokens := make([]string, rows)
	types := make([]int32, rows)
	set := make([]bool, rows)
	put := func(id int, s string, typ int32) error {
		if id < 0 || id >= rows {
			return fmt.Errorf("%s: token %q has id %d outside the %d embedding rows", p, s, id, rows)
		}
		tokens[id], types[id], set[id] = s, typ, true
		return nil
	}
	for s, id := range tj.Model.Vocab {
		if err := put(id, s, tokNormal); err != nil {
			return nil, err
		}
	}
	ids := map[string]int{}
	for _, a := range tj.AddedTokens {
		typ := int32(tokUserDefined)
		if a.Special {
			typ = tokControl
		}
		if err := put(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
		ids[a.Content] = a.ID
	}
	for i := range tokens {
		if !set[i] {
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokUnused
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
	kv := []weights.GGUFKV{
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: "qwen2"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.merges", Value: merges},
	}
	cfg := readTokenizerConfig(dir)
	special := func(key, field, fallback string) {
		name := cfg.token(field)
		if name == "" {
			name = fallback
		}
		if id, ok := ids[name]; ok {
			kv = append(kv, weights.GGUFKV{Key: key, Value: uint32(id)})
		} else if id, ok := tj.Model.Vocab[name]; ok {
			kv = append(kv, weights.GGUFKV{Key: key, Value: uint32(id)})
		}
	}
	special("tokenizer.ggml.eos_token_id", "eos_token", "<|im_end|>")
	special("tokenizer.ggml.padding_token_id", "pad_token", "<|endoftext|>")
	special("tokenizer.ggml.bos_token_id", "bos_token", "<|endoftext|>")
	kv = append(kv, weights.GGUFKV{Key: "tokenizer.ggml.add_bos_token", Value: cfg.AddBOS})
	if cfg.ChatTemplate != "" {
		kv = append(kv, weights.GGUFKV{Key: "tokenizer.chat_template", Value: cfg.ChatTemplate})
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
