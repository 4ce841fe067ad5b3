// Package tokenizer is the byte-level BPE tokenizer of the Qwen2/Qwen3 family
// (also Qwen3-Omni and, with its letter class, Qwen3.5), read from a Hugging
// Face tokenizer.json and exact against the reference tokenizers library.
//
// Encoding runs the reference's stages in order: added tokens are cut out of
// the raw text; each remaining segment is NFC-normalized, split by the
// hand-written pre-tokenizer (pretokenize.go), and each piece is merged by BPE
// over its raw bytes (bpe.go). Decoding maps ids back to bytes and replaces
// invalid UTF-8 like Python's errors="replace".
//
// The tokenizer also travels inside GGUF files as llama.cpp's tokenizer.ggml.*
// metadata (model "gpt2", pre-tokenizer "qwen2"), both ways (gguf.go):
// GGUFMetadata writes it from a release's tokenizer.json and
// tokenizer_config.json as key/value pairs for a GGUF writer (clef quantize),
// and FromGGUF rebuilds the Tokenizer from any Metadata getter (a GGUF file
// opened by the weights package). The package itself knows no GGUF container.
package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	model   *bpe
	classes *classTable
	nfc     bool

	vocab   map[string]int // token as written in tokenizer.json -> id (added tokens included)
	idBytes [][]byte       // id -> the bytes it decodes to; nil where no token has the id
	idText  []string       // id -> token as written in tokenizer.json
	special []bool         // id -> special added token

	added      []AddedToken
	addedIdx   map[string]int // content -> index into added
	rawMatch   *matcher       // added tokens matched in the raw text
	normMatch  *matcher       // added tokens matched in the normalized text
	vocabSize  int
	splitLabel string
}

// Load reads a tokenizer.json, or a directory holding one.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// VocabSize returns the largest token id plus one, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token written as in tokenizer.json (byte-level
// form, e.g. "Ġworld") or of an added token ("<|im_end|>").
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	id, ok := t.vocab[tok]
	return id, ok
}

// Token returns the token of an id as written in tokenizer.json.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.idText) || t.idBytes[id] == nil {
		return "", false
	}
	return t.idText[id], true
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// AddedTokens returns the added tokens in id order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := append([]AddedToken(nil), t.added...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// PreTokenizer names the split in use: "qwen2" (Qwen2, Qwen3, Qwen3-Omni) or
// "qwen3.5".
func (t *Tokenizer) PreTokenizer() string { return t.splitLabel }

// Encode returns the ids of text, as the reference's encode with
// add_special_tokens=false: no BOS/EOS or template, and added tokens found in
// the text become their ids. Invalid UTF-8 bytes are read as U+FFFD, one per
// byte, as Go's JSON decoder does.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/3+1), text)
}

// AppendEncode appends the ids of text to dst and returns it.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	if t.rawMatch == nil {
		return t.appendNormalized(dst, text)
	}
	from := 0
	for {
		m, ok := t.rawMatch.find(text, from, t.added)
		if !ok {
			return t.appendNormalized(dst, text[from:])
		}
		dst = t.appendNormalized(dst, text[from:m.start])
		dst = append(dst, t.added[m.token].ID)
		from = m.end
	}
}

// appendNormalized encodes a segment free of raw added tokens.
func (t *Tokenizer) appendNormalized(dst []int, s string) []int {
	if s == "" {
		return dst
	}
	if t.nfc && !isASCII(s) {
		s = norm.NFC.String(s)
	}
	if t.normMatch == nil {
		return t.appendPlain(dst, s)
	}
	from := 0
	for {
		m, ok := t.normMatch.find(s, from, t.added)
		if !ok {
			return t.appendPlain(dst, s[from:])
		}
		dst = t.appendPlain(dst, s[from:m.start])
		dst = append(dst, t.added[m.token].ID)
		from = m.end
	}
}

// appendPlain pre-tokenizes s and merges each piece.
func (t *Tokenizer) appendPlain(dst []int, s string) []int {
	for i := 0; i < len(s); {
		j := t.classes.nextPiece(s, i)
		dst = t.model.appendWord(dst, s[i:j])
		i = j
	}
	return dst
}

// Pieces returns the pre-tokens of text (after added-token matching and
// normalization) as raw strings, with the added tokens as their own pieces.
// It is for inspection and tests.
func (t *Tokenizer) Pieces(text string) []string {
	var out []string
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	plain := func(s string) {
		if t.nfc && !isASCII(s) {
			s = norm.NFC.String(s)
		}
		for i := 0; i < len(s); {
			j := t.classes.nextPiece(s, i)
			out = append(out, s[i:j])
			i = j
		}
	}
	from := 0
	for t.rawMatch != nil {
		m, ok := t.rawMatch.find(text, from, t.added)
		if !ok {
			break
		}
		plain(text[from:m.start])
		out = append(out, t.added[m.token].Content)
		from = m.end
	}
	plain(text[from:])
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// replaceInvalid replaces every byte that is not part of valid UTF-8 with
// U+FFFD.
func replaceInvalid(s string) string {
	buf := make([]byte, 0, len(s)+8)
	for _, r := range s {
		buf = utf8.AppendRune(buf, r)
	}
	return string(buf)
}

// Decode returns the text of ids. Ids that name no token are skipped, as the
// reference skips them; bytes that do not form valid UTF-8 become U+FFFD, one
// per maximal invalid subsequence, like Python's errors="replace".
func (t *Tokenizer) Decode(ids []int) string {
	var buf []byte
	for _, id := range ids {
		if id >= 0 && id < len(t.idBytes) {
			buf = append(buf, t.idBytes[id]...)
		}
	}
	return toValidUTF8(buf)
}

// toValidUTF8 converts bytes to a string, replacing each maximal subpart of an
// ill-formed sequence with U+FFFD (Unicode §3.9, the W3C/WHATWG practice that
// Python and Rust follow).
func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			out = append(out, b[i:i+w]...)
			i += w
			continue
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += maximalSubpart(b[i:])
	}
	return string(out)
}

// maximalSubpart returns the length of the longest prefix of b (which starts
// with an invalid sequence) that could begin a well-formed sequence, at least 1.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if x < lo || x > hi {
			break
		}
		n++
	}
	return n
}
