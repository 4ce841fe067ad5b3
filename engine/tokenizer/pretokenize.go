package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer of the Qwen2/Qwen3 family is a Split on this regex, with
// each match kept as its own piece ("Isolated"):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)      1 contraction (ASCII letters only)
//	|[^\r\n\p{L}\p{N}]?\p{L}+         2 letters, with one leading non-letter
//	|\p{N}                            3 one number character
//	| ?[^\s\p{L}\p{N}]+[\r\n]*        4 punctuation run, its newlines
//	|\s*[\r\n]+                       5 blanks up to the last newline
//	|\s+(?!\S)                        6 blanks, leaving the last one
//	|\s+                              7 blanks
//
// Go's regexp has no lookahead and its \s is ASCII-only, so the split is
// written by hand over runes. The alternatives are tried in order at each
// position, as a backtracking engine would; every character is looked at a
// bounded number of times, so the split is linear in the text.
//
// \s is Oniguruma's Unicode whitespace: U+0009-000D, U+0020, U+0085, U+00A0,
// U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F and U+3000.
//
// The Qwen3.5 family uses the same regex with [\p{L}\p{M}]+ for letter runs
// and \p{M} taken out of the punctuation class; marksAreLetters selects it.

// Character classes of the pre-tokenizer.
const (
	clsOther   uint8 = iota // none of the below: punctuation, symbols, marks, controls
	clsLetter               // \p{L} (and \p{M} in the Qwen3.5 variant)
	clsNumber               // \p{N}
	clsSpace                // \s other than \r and \n
	clsNewline              // \r or \n
)

// classTable holds the class of every code point of the Basic Multilingual
// Plane; code points above it are classified with the unicode tables.
type classTable struct {
	bmp            [0x10000]uint8
	marksAreLetter bool
}

var (
	classOnce    [2]sync.Once
	classTables  [2]*classTable
	splitVariant = [2]string{"qwen2", "qwen3.5"}
)

func isSpace(r rune) bool {
	switch {
	case r >= 0x09 && r <= 0x0D, r == 0x20, r == 0x85, r == 0xA0, r == 0x1680,
		r >= 0x2000 && r <= 0x200A, r == 0x2028, r == 0x2029, r == 0x202F,
		r == 0x205F, r == 0x3000:
		return true
	}
	return false
}

func classify(r rune, marks bool) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case isSpace(r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case marks && unicode.IsMark(r):
		return clsLetter
	}
	return clsOther
}

// classesFor returns the class table of a variant (0 Qwen2/3, 1 Qwen3.5),
// building it on first use.
func classesFor(variant int) *classTable {
	classOnce[variant].Do(func() {
		t := &classTable{marksAreLetter: variant == 1}
		for r := range t.bmp {
			t.bmp[r] = classify(rune(r), t.marksAreLetter)
		}
		classTables[variant] = t
	})
	return classTables[variant]
}

// at returns the class of the rune at s[i] and its width. s must be valid
// UTF-8; at the end of s it returns clsOther with width 0.
func (t *classTable) at(s string, i int) (uint8, int) {
	if i >= len(s) {
		return clsOther, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return t.bmp[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return t.bmp[r], w
	}
	return classify(r, t.marksAreLetter), w
}

// run returns the end of the run of class cls that starts at i.
func (t *classTable) run(s string, i int, cls uint8) int {
	for i < len(s) {
		c, w := t.at(s, i)
		if c != cls {
			break
		}
		i += w
	}
	return i
}

// isContraction reports the length of a contraction ('s 't 're 've 'm 'll
// 'd, any case) at s[i], which holds an apostrophe; 0 if there is none.
func isContraction(s string, i int) int {
	if i+1 >= len(s) {
		return 0
	}
	switch s[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return 3
		}
	}
	return 0
}

// nextPiece returns the end of the pre-token that starts at s[i] (i < len(s)).
func (t *classTable) nextPiece(s string, i int) int {
	c0 := s[i]
	if c0 == '\'' {
		if n := isContraction(s, i); n > 0 {
			return i + n
		}
	}
	cls, w := t.at(s, i)
	switch cls {
	case clsLetter:
		return t.run(s, i+w, clsLetter)
	case clsNumber:
		return i + w
	case clsOther:
		if next, _ := t.at(s, i+w); next == clsLetter {
			return t.run(s, i+w, clsLetter)
		}
		return t.run(s, t.run(s, i, clsOther), clsNewline) // alternative 4
	}
	// Whitespace.
	next, _ := t.at(s, i+w)
	if cls == clsSpace && next == clsLetter {
		return t.run(s, i+w, clsLetter) // alternative 2
	}
	if c0 == ' ' && next == clsOther {
		return t.run(s, t.run(s, i+w, clsOther), clsNewline) // alternative 4
	}
	// Alternatives 5-7 over the whole whitespace run [i, j).
	j, lastNL, lastStart := i, -1, i
	for j < len(s) {
		c, cw := t.at(s, j)
		if c != clsSpace && c != clsNewline {
			break
		}
		if c == clsNewline {
			lastNL = j
		}
		lastStart = j
		j += cw
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case j == len(s) || lastStart == i:
		return j
	default:
		return lastStart
	}
}
