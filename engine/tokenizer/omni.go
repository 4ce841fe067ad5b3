package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/clefrt/clef/internal/untrusted"
)

// OmniAddedTokens are the 7 tokens Qwen3-Omni adds on top of the Qwen3
// tokenizer (ids 151669-151675), all special. A Qwen3-Omni release carries
// them in its own tokenizer.json; these let a plain Qwen3 tokenizer.json
// stand in for it.
var OmniAddedTokens = []AddedToken{
	{ID: 151669, Content: "<|audio_start|>", Special: true},
	{ID: 151670, Content: "<|audio_end|>", Special: true},
	{ID: 151671, Content: "<tts_pad>", Special: true},
	{ID: 151672, Content: "<tts_text_bos>", Special: true},
	{ID: 151673, Content: "<tts_text_eod>", Special: true},
	{ID: 151674, Content: "<tts_text_bos_single>", Special: true},
	{ID: 151675, Content: "<|audio_pad|>", Special: true},
}

// ParseAddedTokens reads added tokens from JSON in any of these shapes: a
// list of tokens ([{"id", "content", "special", ...}]), an object with such a
// list under "added_tokens" (tokenizer.json), or an object whose
// "added_tokens_decoder" maps ids to tokens (tokenizer_config.json). The
// result is in id order.
func ParseAddedTokens(data []byte) ([]AddedToken, error) {
	data = bytes.TrimSpace(data)
	var list []AddedToken
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("added tokens: %w", untrusted.Wrap(err))
		}
	} else {
		var obj struct {
			AddedTokens  []AddedToken          `json:"added_tokens"`
			AddedDecoder map[string]AddedToken `json:"added_tokens_decoder"`
		}
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, fmt.Errorf("added tokens: %w", untrusted.Wrap(err))
		}
		list = obj.AddedTokens
		for k, tok := range obj.AddedDecoder {
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 {
				return nil, fmt.Errorf("added tokens: added_tokens_decoder key %s is not an id", untrusted.Quote(k))
			}
			tok.ID = id
			list = append(list, tok)
		}
	}
	if len(list) == 0 {
		return nil, errors.New("added tokens: none found (want a list, \"added_tokens\" or \"added_tokens_decoder\")")
	}
	for _, tok := range list {
		if tok.Content == "" {
			return nil, fmt.Errorf("added tokens: token %d has no content", tok.ID)
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	return list, nil
}

// LoadAddedTokens reads a file for ParseAddedTokens.
func LoadAddedTokens(path string) ([]AddedToken, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("added tokens: %w", err)
	}
	toks, err := ParseAddedTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return toks, nil
}
