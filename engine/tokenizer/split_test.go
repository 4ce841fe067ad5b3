package tokenizer

import (
	"slices"
	"testing"
	"unicode"
	"unicode/utf8"
)

// A slow reference for the pre-tokenizer: the Split regex written as data and
// run by a small backtracking matcher, alternatives tried in order at each
// position, as Oniguruma does. It shares nothing with pretokenize.go but the
// definition of \s.

type item struct {
	in       func(r rune) bool
	min, max int
}

type alternative struct {
	items     []item
	notBefore func(r rune) bool // negative lookahead on the next rune (nil: none); end of text passes
}

func one(f func(rune) bool) item  { return item{f, 1, 1} }
func opt(f func(rune) bool) item  { return item{f, 0, 1} }
func plus(f func(rune) bool) item { return item{f, 1, 1 << 30} }
func star(f func(rune) bool) item { return item{f, 0, 1 << 30} }
func is(c ...rune) func(rune) bool {
	return func(r rune) bool { return slices.Contains(c, r) }
}

func referenceRegex(marks bool) []alternative {
	L := func(r rune) bool { return unicode.IsLetter(r) }
	LM := L
	if marks {
		LM = func(r rune) bool { return unicode.IsLetter(r) || unicode.IsMark(r) }
	}
	N := func(r rune) bool { return unicode.IsNumber(r) }
	S := isSpace
	NL := is('\r', '\n')
	var alts []alternative
	for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
		items := []item{one(is('\''))}
		for _, ch := range c {
			items = append(items, one(is(ch, unicode.ToUpper(ch))))
		}
		alts = append(alts, alternative{items: items})
	}
	return append(alts,
		alternative{items: []item{opt(func(r rune) bool { return !NL(r) && !L(r) && !N(r) }), plus(LM)}},
		alternative{items: []item{one(N)}},
		alternative{items: []item{opt(is(' ')), plus(func(r rune) bool { return !S(r) && !LM(r) && !N(r) }), star(NL)}},
		alternative{items: []item{star(S), plus(NL)}},
		alternative{items: []item{plus(S)}, notBefore: func(r rune) bool { return !S(r) }},
		alternative{items: []item{plus(S)}},
	)
}

// matchItems returns the end of the greedy, backtracking match of items at
// rs[i:], or -1.
func matchItems(items []item, rs []rune, i int, notBefore func(rune) bool) int {
	if len(items) == 0 {
		if notBefore != nil && i < len(rs) && notBefore(rs[i]) {
			return -1
		}
		return i
	}
	it := items[0]
	n := 0
	for n < it.max && i+n < len(rs) && it.in(rs[i+n]) {
		n++
	}
	for ; n >= it.min; n-- {
		if e := matchItems(items[1:], rs, i+n, notBefore); e >= 0 {
			return e
		}
	}
	return -1
}

func referenceSplit(s string, marks bool) []string {
	alts := referenceRegex(marks)
	rs := []rune(s)
	var out []string
	gap := -1
	for i := 0; i < len(rs); {
		end := -1
		for _, a := range alts {
			if e := matchItems(a.items, rs, i, a.notBefore); e > i {
				end = e
				break
			}
		}
		if end < 0 { // no alternative matches: the reference keeps the gap as a piece
			if gap < 0 {
				gap = i
			}
			i++
			continue
		}
		if gap >= 0 {
			out = append(out, string(rs[gap:i]))
			gap = -1
		}
		out = append(out, string(rs[i:end]))
		i = end
	}
	if gap >= 0 {
		out = append(out, string(rs[gap:]))
	}
	return out
}

func fastSplit(s string, variant int) []string {
	ct := classesFor(variant)
	var out []string
	for i := 0; i < len(s); {
		j := ct.nextPiece(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

var splitSeeds = []string{
	"", "a", "Hello, world!", "a  b", "foo  \nbar", "abc   ", "I'M You'Re x'ſfoo _'s 'll 'LL 'lL",
	" \t\n\r\n  x", "\u00a0\u3000x\u2028y\u0085z", "12345 ١٢٣ ½ Ⅻ", "e\u0301 q\u0307\u0323 \u0915\u093c",
	"!!!abc (hello) ' hi", "  !!\n\n  ?", "\u200b\ufeff\u180e\u001c", "😀🚀 👍🏽 x", "a\u0300\u0301b", " \u0301abc",
	"\n\n\n", "   \n \n  ", "x   ", "'", "''s", "\r\n\r\n", "\t\tfoo", "a\u2000\u2001b",
}

func TestSplitMatchesReference(t *testing.T) {
	lines := readGolden(t, qwen3Dir+"golden.jsonl")
	texts := append([]string(nil), splitSeeds...)
	for _, g := range lines {
		texts = append(texts, g.Text)
	}
	for variant := 0; variant < 2; variant++ {
		for _, s := range texts {
			want := referenceSplit(s, variant == 1)
			if got := fastSplit(s, variant); !slices.Equal(got, want) {
				t.Errorf("variant %d %q:\n got %q\nwant %q", variant, trunc(s), got, want)
			}
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > 160 {
			return
		}
		for variant := 0; variant < 2; variant++ {
			want := referenceSplit(s, variant == 1)
			if got := fastSplit(s, variant); !slices.Equal(got, want) {
				t.Fatalf("variant %d %q:\n got %q\nwant %q", variant, s, got, want)
			}
		}
	})
}
