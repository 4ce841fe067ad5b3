package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/model/schemahead"
	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/engine/weights"
)

// Metadata keys of the companion FILE.head.gguf written by clef quantize: the
// release's config.json and joint_head_config.json, verbatim.
const (
	ggufConfigKey     = "clef.config"
	ggufHeadConfigKey = "clef.head_config"
)

// openGGUF opens the GGUF pair written by clef quantize: the backbone
// FILE.gguf (the thinker's text decoder and the tokenizer, llama.cpp
// qwen3moe layout) and its companion FILE.head.gguf (the joint head, the
// towers, and the release's config files as metadata).
func openGGUF(path string, opts Options) (*Engine, error) {
	switch {
	case strings.HasSuffix(path, ".head.gguf"):
		return nil, fmt.Errorf("engine: %s is the companion file; give the backbone %s", path, strings.TrimSuffix(path, ".head.gguf")+".gguf")
	case !strings.HasSuffix(path, ".gguf"):
		return nil, fmt.Errorf("engine: %s: want a release directory or a .gguf file from clef quantize", path)
	}
	companion := weights.CompanionPath(path)
	if _, err := os.Stat(companion); err != nil {
		return nil, fmt.Errorf("engine: %s has no companion %s (written by clef quantize next to it; it holds the joint head)", path, companion)
	}
	m, err := weights.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e, err := openGGUFModel(m, path, companion, opts)
	if err != nil {
		m.Close()
		return nil, err
	}
	return e, nil
}

func openGGUFModel(m weights.Model, path, companion string, opts Options) (*Engine, error) {
	set, ok := m.(*weights.Set)
	if !ok || len(set.GGUF) != 2 {
		return nil, fmt.Errorf("engine: %s: expected a backbone GGUF and its companion", path)
	}
	backbone, head := set.GGUF[0], set.GGUF[1]
	cfgJSON, err := head.String(ggufConfigKey)
	if err != nil {
		return nil, fmt.Errorf("engine: companion %s lacks the release config (%w); re-run clef quantize from a release directory", companion, err)
	}
	tcfg, err := qwen3moe.ParseConfig([]byte(cfgJSON))
	if err != nil {
		return nil, fmt.Errorf("engine: %s %s: %w", companion, ggufConfigKey, err)
	}
	headJSON, err := head.String(ggufHeadConfigKey)
	if err != nil {
		return nil, fmt.Errorf("engine: companion %s lacks the joint head config: %w", companion, err)
	}
	hcfg, err := schemahead.ParseConfig([]byte(headJSON))
	if err != nil {
		return nil, fmt.Errorf("engine: %s %s: %w", companion, ggufHeadConfigKey, err)
	}
	tok, err := ggufTokenizer(backbone)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", path, err)
	}
	return assemble(m, tcfg, hcfg, tok, opts)
}

// GGUF token types (llama.cpp's llama_token_type).
const (
	ggufTokenNormal      = 1
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
)

// qwenPreTokenizer, byteLevel and the NFC normalizer are the blocks every
// Qwen2/Qwen3 tokenizer.json carries; a GGUF names them only as
// tokenizer.ggml.pre = "qwen2", so they are restored here.
const qwenPreTokenizer = `{"type": "Sequence", "pretokenizers": [` +
	`{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, ` +
	`{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}`

const byteLevel = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`

// ggufTokenizer rebuilds the Hugging Face tokenizer from a backbone GGUF's
// tokenizer.ggml.* metadata (byte-level BPE, Qwen2 pre-tokenizer): normal
// tokens form the BPE vocabulary, control tokens are special added tokens,
// user-defined tokens non-special added tokens; padding entries are dropped.
func ggufTokenizer(f *weights.GGUFFile) (*tokenizer.Tokenizer, error) {
	if model, err := f.String("tokenizer.ggml.model"); err != nil || model != "gpt2" {
		return nil, fmt.Errorf("tokenizer.ggml.model is %q (%v), want gpt2 (byte-level BPE)", model, err)
	}
	if pre, err := f.String("tokenizer.ggml.pre"); err != nil || pre != "qwen2" {
		return nil, fmt.Errorf("tokenizer.ggml.pre is %q (%v), want qwen2", pre, err)
	}
	tv, _ := f.Get("tokenizer.ggml.tokens")
	tokens, ok := tv.([]string)
	if !ok {
		return nil, fmt.Errorf("tokenizer.ggml.tokens is %T, want an array of strings", tv)
	}
	yv, _ := f.Get("tokenizer.ggml.token_type")
	types, ok := yv.([]int32)
	if !ok || len(types) != len(tokens) {
		return nil, fmt.Errorf("tokenizer.ggml.token_type is %T of %d, want %d int32", yv, len(types), len(tokens))
	}
	mv, _ := f.Get("tokenizer.ggml.merges")
	merges, ok := mv.([]string)
	if !ok {
		return nil, fmt.Errorf("tokenizer.ggml.merges is %T, want an array of strings", mv)
	}
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	vocab := make(map[string]int, len(tokens))
	var addedTokens []added
	for id, tok := range tokens {
		switch types[id] {
		case ggufTokenNormal:
			vocab[tok] = id
		case ggufTokenControl, ggufTokenUserDefined:
			addedTokens = append(addedTokens, added{ID: id, Content: tok, Special: types[id] == ggufTokenControl})
		}
	}
	pairs := make([][2]string, len(merges))
	for i, mg := range merges {
		a, b, ok := strings.Cut(mg, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("tokenizer.ggml.merges[%d] = %q is not two tokens", i, mg)
		}
		pairs[i] = [2]string{a, b}
	}
	model, err := json.Marshal(map[string]any{
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
		`, "post_processor": ` + byteLevel + `, "decoder": ` + byteLevel + `, "model": ` + string(model) + `}`
	tok, err := tokenizer.FromJSON([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("tokenizer from GGUF metadata: %w", err)
	}
	return tok, nil
}
