package tokenizer

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// mapMetadata is Metadata over a map.
type mapMetadata map[string]any

func (m mapMetadata) Get(key string) (any, bool) { v, ok := m[key]; return v, ok }

// A damaged tokenizer (tokenizer.json or GGUF metadata) is refused with an
// error that quotes and cuts what it read: bounded, no control bytes.
func TestCorruptTokenizerErrorsBounded(t *testing.T) {
	good, err := os.ReadFile(tinyTokDir + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	g := string(good)
	huge := strings.Repeat(`\u0000`, 20000) + strings.Repeat("x", 1000) // JSON escapes of NUL
	raw := strings.Repeat("\x00", 20000) + strings.Repeat("x", 1000)
	jsons := map[string]string{
		"normalizer":     strings.Replace(g, `"type": "NFC"`, `"type": "`+huge+`"`, 1),
		"model type":     strings.Replace(g, `"type": "BPE"`, `"type": "`+huge+`"`, 1),
		"regex":          strings.Replace(g, `\\p{N}|`, huge+`|`, 1),
		"vocab id":       strings.Replace(g, `"!": 0`, `"`+huge+`": -5`, 1),
		"shared id":      strings.Replace(g, `"!": 0`, `"`+huge+`": 1`, 1),
		"merge parts":    strings.Replace(g, `"merges": [`, `"merges": ["`+huge+`",`, 1),
		"merge pair":     strings.Replace(g, `"merges": [`, `"merges": [["`+huge+`","`+huge+`","x"],`, 1),
		"unknown merge":  strings.Replace(g, `"merges": [`, `"merges": [["`+huge+`","q"],`, 1),
		"added conflict": strings.Replace(strings.Replace(g, `"content": "<|im_start|>"`, `"content": "`+huge+`"`, 1), `"id": 500`, `"id": 4000000`, 1),
		"bad json":       `{"model": {"type": "` + huge + `", "vocab": [` + huge,
	}
	for name, j := range jsons {
		if j == g {
			t.Fatalf("%s: replacement did not apply", name)
		}
		_, err := FromJSON([]byte(j))
		checkBounded(t, name, err)
	}
	base := mapMetadata{ggufModelKey: "gpt2", ggufPreKey: "qwen2", ggufTokensKey: []string{"a", "b"},
		ggufTokenTypeKey: []int32{1, 1}, ggufMergesKey: []string{"a b"}}
	for name, kv := range map[string][2]any{
		"model":  {ggufModelKey, raw},
		"pre":    {ggufPreKey, raw},
		"merges": {ggufMergesKey, []string{raw}},
	} {
		md := mapMetadata{}
		for k, v := range base {
			md[k] = v
		}
		md[kv[0].(string)] = kv[1]
		_, err := FromGGUF(md)
		checkBounded(t, "gguf "+name, err)
	}
	_, err = ParseAddedTokens([]byte(`{"added_tokens_decoder": {"` + huge + `": {"content": "x"}}}`))
	checkBounded(t, "added tokens", err)
}

func checkBounded(t *testing.T, name string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", name)
		return
	}
	msg := err.Error()
	if len(msg) > 512 || !utf8.ValidString(msg) || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Errorf("%s: error of %d bytes: %.160q", name, len(msg), msg)
	}
}
