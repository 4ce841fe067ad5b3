package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/clefrt/clef/internal/untrusted"
)

// The parts of tokenizer.json this package reads. Anything that would change
// the ids and that is not implemented is rejected with an error naming it.
type fileJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

type modelJSON struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  []mergeJSON    `json:"merges"`
}

// mergeJSON is one merge, written either as ["a", "b"] or as "a b".
type mergeJSON struct{ a, b string }

func (m *mergeJSON) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		if a, b, ok := quickPair(data); ok {
			m.a, m.b = a, b
			return nil
		}
		var pair []string
		if err := json.Unmarshal(data, &pair); err != nil {
			return err
		}
		if len(pair) != 2 {
			return fmt.Errorf("merge %s has %d parts, want 2", untrusted.QuoteBytes(data), len(pair))
		}
		m.a, m.b = pair[0], pair[1]
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	parts := strings.Split(s, " ")
	if len(parts) != 2 {
		return fmt.Errorf("merge %s is not two tokens separated by one space", untrusted.Quote(s))
	}
	m.a, m.b = parts[0], parts[1]
	return nil
}

// quickPair reads ["a","b"] without the reflection of encoding/json, for the
// usual case of two strings free of escapes; ok is false for anything else.
// The decoder has already checked that data is valid JSON.
func quickPair(data []byte) (a, b string, ok bool) {
	if bytes.IndexByte(data, '\\') >= 0 || !utf8.Valid(data) {
		return "", "", false
	}
	var parts [2]string
	n, commas := 0, 0
	for i := 1; i < len(data)-1; i++ {
		switch c := data[i]; c {
		case '"':
			j := bytes.IndexByte(data[i+1:], '"')
			if j < 0 || n == 2 {
				return "", "", false
			}
			parts[n] = string(data[i+1 : i+1+j])
			n++
			i += j + 1
		case ',':
			commas++
		case ' ', '\t', '\n', '\r':
		default:
			return "", "", false
		}
	}
	if n != 2 || commas != 1 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

type typed struct {
	Type string `json:"type"`
}

// Limits on what a tokenizer.json may declare, so that a damaged file gives
// an error instead of an absurd allocation.
const (
	maxVocab = 1 << 22 // ids at or above this are rejected
	maxHoles = 1 << 16 // ids may run this far past the tokens there are
)

// FromJSON builds a tokenizer from the bytes of a tokenizer.json.
func FromJSON(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", untrusted.Wrap(err))
	}
	t := &Tokenizer{}
	var err error
	if t.nfc, err = checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	variant, err := checkPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	t.classes = classesFor(variant)
	t.splitLabel = splitVariant[variant]
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := checkPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.buildModel(f.Model); err != nil {
		return nil, err
	}
	if err := t.AddSpecialTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func checkNormalizer(raw json.RawMessage) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return false, fmt.Errorf("tokenizer.json: normalizer: %w", untrusted.Wrap(err))
	}
	switch n.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		nfc := false
		for _, sub := range n.Normalizers {
			ok, err := checkNormalizer(sub)
			if err != nil {
				return false, err
			}
			nfc = nfc || ok
		}
		return nfc, nil
	}
	return false, fmt.Errorf("tokenizer.json: normalizer %s is not supported (only NFC)", untrusted.Quote(n.Type))
}

// The Split regexes this package implements by hand, each with its variant.
var knownSplits = map[string]int{
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                                          0,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:             1,
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                              2,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: 3,
}

// checkPreTokenizer accepts Sequence[Split(regex, Isolated), ByteLevel(use_regex
// false)] with one of the known regexes and returns its variant.
func checkPreTokenizer(raw json.RawMessage) (int, error) {
	if isNull(raw) {
		return 0, errors.New("tokenizer.json: pre_tokenizer is missing (want the Qwen Split + ByteLevel)")
	}
	var seq struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return 0, fmt.Errorf("tokenizer.json: pre_tokenizer: %w", untrusted.Wrap(err))
	}
	if seq.Type != "Sequence" || len(seq.PreTokenizers) != 2 {
		return 0, fmt.Errorf("tokenizer.json: pre_tokenizer %s is not supported (want Sequence of Split and ByteLevel)", untrusted.Quote(seq.Type))
	}
	var split struct {
		Type    string `json:"type"`
		Pattern struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(seq.PreTokenizers[0], &split); err != nil {
		return 0, fmt.Errorf("tokenizer.json: pre_tokenizer Split: %w", untrusted.Wrap(err))
	}
	if split.Type != "Split" || split.Behavior != "Isolated" || split.Invert || split.Pattern.Regex == nil {
		return 0, fmt.Errorf("tokenizer.json: pre_tokenizer %s (behavior %s) is not supported (want an Isolated regex Split)", untrusted.Quote(split.Type), untrusted.Quote(split.Behavior))
	}
	variant, ok := knownSplits[*split.Pattern.Regex]
	if !ok {
		return 0, fmt.Errorf("tokenizer.json: pre_tokenizer regex %s is not the Qwen2/Qwen3/Qwen3.5 pattern", untrusted.Quote(*split.Pattern.Regex))
	}
	var bl struct {
		Type     string `json:"type"`
		UseRegex *bool  `json:"use_regex"`
		Prefix   bool   `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(seq.PreTokenizers[1], &bl); err != nil {
		return 0, fmt.Errorf("tokenizer.json: pre_tokenizer ByteLevel: %w", untrusted.Wrap(err))
	}
	if bl.Type != "ByteLevel" || bl.UseRegex == nil || *bl.UseRegex || bl.Prefix {
		return 0, fmt.Errorf("tokenizer.json: second pre_tokenizer %s is not supported (want ByteLevel with use_regex and add_prefix_space false)", untrusted.Quote(bl.Type))
	}
	return variant / 2, nil
}

func checkDecoder(raw json.RawMessage) error {
	var d typed
	if isNull(raw) {
		return errors.New("tokenizer.json: decoder is missing (want ByteLevel)")
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("tokenizer.json: decoder: %w", untrusted.Wrap(err))
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("tokenizer.json: decoder %s is not supported (want ByteLevel)", untrusted.Quote(d.Type))
	}
	return nil
}

// checkPostProcessor accepts what changes nothing without special tokens:
// encoding here is always add_special_tokens=false.
func checkPostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var p typed
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("tokenizer.json: post_processor: %w", untrusted.Wrap(err))
	}
	switch p.Type {
	case "ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing", "Sequence":
		return nil
	}
	return fmt.Errorf("tokenizer.json: post_processor %s is not supported", untrusted.Quote(p.Type))
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// buildModel reads the BPE vocabulary and merges.
func (t *Tokenizer) buildModel(m *modelJSON) error {
	if m == nil {
		return errors.New("tokenizer.json: model is missing")
	}
	if m.Type != "BPE" && m.Type != "" {
		return fmt.Errorf("tokenizer.json: model type %s is not supported (want BPE)", untrusted.Quote(m.Type))
	}
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return errors.New("tokenizer.json: BPE dropout is not supported")
	case m.ByteFallback:
		return errors.New("tokenizer.json: BPE byte_fallback is not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return errors.New("tokenizer.json: BPE continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return errors.New("tokenizer.json: BPE end_of_word_suffix is not supported")
	case len(m.Vocab) == 0:
		return errors.New("tokenizer.json: model vocab is empty")
	}
	size := 0
	for tok, id := range m.Vocab {
		if id < 0 || id >= maxVocab {
			return fmt.Errorf("tokenizer.json: vocab token %s has id %d, outside [0, %d)", untrusted.Quote(tok), id, maxVocab)
		}
		size = max(size, id+1)
	}
	if size > len(m.Vocab)+maxHoles {
		return fmt.Errorf("tokenizer.json: vocab has %d tokens but ids up to %d", len(m.Vocab), size-1)
	}
	t.vocab = m.Vocab // the added tokens join it below
	t.idBytes = make([][]byte, size)
	t.idText = make([]string, size)
	t.special = make([]bool, size)
	b := &bpe{merges: make(map[uint64]uint64, len(m.Merges)), cache: make(map[string][]int32)}
	for i := range b.byteID {
		b.byteID[i] = -1
	}
	if m.IgnoreMerges {
		b.direct = make(map[string]int32, len(m.Vocab))
	}
	total := 0
	for tok := range m.Vocab {
		total += len(tok)
	}
	slab := make([]byte, 0, total) // one allocation for the bytes of every token
	for tok, id := range m.Vocab {
		if t.idBytes[id] != nil {
			return fmt.Errorf("tokenizer.json: vocab tokens %s and %s share id %d", untrusted.Quote(t.idText[id]), untrusted.Quote(tok), id)
		}
		t.idText[id] = tok
		start := len(slab)
		var ok bool
		slab, ok = appendByteLevelDecode(slab, tok)
		raw := slab[start:len(slab):len(slab)]
		t.idBytes[id] = raw
		if ok && len(raw) == 1 {
			b.byteID[raw[0]] = int32(id)
		}
		if ok && b.direct != nil {
			b.direct[string(raw)] = int32(id)
		}
	}
	var buf []byte
	for i, mg := range m.Merges {
		a, ok1 := m.Vocab[mg.a]
		c, ok2 := m.Vocab[mg.b]
		buf = append(append(buf[:0], mg.a...), mg.b...)
		merged, ok3 := m.Vocab[string(buf)]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("tokenizer.json: merge %d (%s %s) names a token missing from the vocab", i, untrusted.Quote(mg.a), untrusted.Quote(mg.b))
		}
		b.merges[pairKey(int32(a), int32(c))] = uint64(i)<<32 | uint64(uint32(merged))
	}
	t.model = b
	t.vocabSize = size
	return nil
}

// AddSpecialTokens registers added tokens, to be matched in the text before
// normalization and BPE. A token whose content is already an added token or
// a vocabulary token keeps the id it has; a token with ID < 0 gets the next
// free id. It is an error for two different contents to claim one id. It is
// how the 7 Qwen3-Omni tokens (OmniAddedTokens) are put on top of a Qwen3
// tokenizer.json. Not safe to call while other goroutines encode.
func (t *Tokenizer) AddSpecialTokens(tokens []AddedToken) error {
	changed := false
	for _, tok := range tokens {
		if tok.Content == "" {
			return fmt.Errorf("tokenizer: added token %d has empty content", tok.ID)
		}
		if t.findAdded(tok.Content) >= 0 {
			continue
		}
		id, inVocab := t.vocab[tok.Content]
		switch {
		case inVocab:
			if tok.ID >= 0 && tok.ID != id {
				return fmt.Errorf("tokenizer: added token %s wants id %d but the vocab has it at %d", untrusted.Quote(tok.Content), tok.ID, id)
			}
		case tok.ID < 0:
			id = t.vocabSize
		case tok.ID >= maxVocab || tok.ID > t.vocabSize+maxHoles:
			return fmt.Errorf("tokenizer: added token %s has id %d, far past the vocabulary (size %d)", untrusted.Quote(tok.Content), tok.ID, t.vocabSize)
		default:
			id = tok.ID
			if id < len(t.idBytes) && t.idBytes[id] != nil {
				return fmt.Errorf("tokenizer: added token %s wants id %d, which is already %s", untrusted.Quote(tok.Content), id, untrusted.Quote(t.idText[id]))
			}
		}
		tok.ID = id
		if t.addedIdx == nil {
			t.addedIdx = map[string]int{}
		}
		t.addedIdx[tok.Content] = len(t.added)
		t.added = append(t.added, tok)
		t.vocab[tok.Content] = id
		for id >= len(t.idBytes) {
			t.idBytes = append(t.idBytes, nil)
			t.idText = append(t.idText, "")
			t.special = append(t.special, false)
		}
		raw, _ := byteLevelDecode(tok.Content)
		t.idBytes[id], t.idText[id], t.special[id] = raw, tok.Content, tok.Special
		t.vocabSize = max(t.vocabSize, id+1)
		changed = true
	}
	if changed {
		t.rawMatch = newMatcher(t.added, false)
		t.normMatch = newMatcher(t.added, true)
	}
	return nil
}

func (t *Tokenizer) findAdded(content string) int {
	if i, ok := t.addedIdx[content]; ok {
		return i
	}
	return -1
}
