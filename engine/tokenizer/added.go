package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token matched as a whole in the text before normalization
// and BPE, as the added_tokens of a Hugging Face tokenizer.json are. Both the
// special ones (<|im_start|>) and the others (<think>) are matched, also when
// encoding without special tokens: that is how the reference behaves.
type AddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	// Special marks control tokens; it changes nothing in Encode.
	Special bool `json:"special"`
	// SingleWord matches the token only when no word character touches it.
	SingleWord bool `json:"single_word"`
	// LStrip and RStrip make the match take in the whitespace on its left or
	// right.
	LStrip bool `json:"lstrip"`
	RStrip bool `json:"rstrip"`
	// Normalized tokens are matched in the normalized text instead of the raw
	// text.
	Normalized bool `json:"normalized"`
}

// matcher finds added tokens in text: leftmost match, longest at that
// position, with a byte trie. It looks at each byte a bounded number of
// times (at most the length of the longest token).
type matcher struct {
	first [256]bool
	nodes []trieNode
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into the token list + 1; 0 when no token ends here
}

type match struct {
	start, end int // the bytes the match replaces, whitespace of lstrip/rstrip included
	token      int // index into the token list
}

func newMatcher(tokens []AddedToken, normalized bool) *matcher {
	m := &matcher{nodes: []trieNode{{}}}
	n := 0
	for i, t := range tokens {
		if t.Normalized != normalized || t.Content == "" {
			continue
		}
		n++
		cur := int32(0)
		for j := 0; j < len(t.Content); j++ {
			b := t.Content[j]
			nx, ok := m.nodes[cur].next[b]
			if !ok {
				if m.nodes[cur].next == nil {
					m.nodes[cur].next = map[byte]int32{}
				}
				nx = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{})
				m.nodes[cur].next[b] = nx
			}
			cur = nx
		}
		m.nodes[cur].token = int32(i + 1)
		m.first[t.Content[0]] = true
	}
	if n == 0 {
		return nil
	}
	return m
}

// longestAt returns the token that matches longest at s[i] and its end.
func (m *matcher) longestAt(s string, i int) (tok, end int) {
	tok, cur := -1, int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[cur].next[s[j]]
		if !ok {
			break
		}
		cur = nx
		if t := m.nodes[cur].token; t > 0 {
			tok, end = int(t-1), j+1
		}
	}
	return tok, end
}

// find returns the next match in s at or after byte from, or ok=false.
func (m *matcher) find(s string, from int, tokens []AddedToken) (match, bool) {
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		tok, end := m.longestAt(s, i)
		if tok < 0 {
			continue
		}
		t := &tokens[tok]
		if t.SingleWord && (isWordBefore(s, i) || isWordAfter(s, end)) {
			continue
		}
		start := i
		if t.LStrip {
			for start > from {
				r, w := utf8.DecodeLastRuneInString(s[from:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if t.RStrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		return match{start: start, end: end, token: tok}, true
	}
	return match{}, false
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r)
}

func isWordBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isWordRune(r)
}

func isWordAfter(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isWordRune(r)
}
