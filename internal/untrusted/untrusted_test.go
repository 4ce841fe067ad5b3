package untrusted

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// clean reports whether s holds only printable characters (no control
// bytes, no invalid UTF-8).
func clean(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", `""`},
		{"blk.0.attn_q.weight", `"blk.0.attn_q.weight"`},
		{"a\x00b\n\"c\\", `"a\x00b\n\"c\\"`},
		{"é€😀", `"é€😀"`},
		{"\xff\xfe", `"\xff\xfe"`},
		{"\u202e\x1b[31m", `"\u202e\x1b[31m"`},
		{strings.Repeat("x", MaxRunes), `"` + strings.Repeat("x", MaxRunes) + `"`},
		{strings.Repeat("x", MaxRunes+1), `"` + strings.Repeat("x", MaxRunes) + `…" (81 bytes)`},
		{strings.Repeat("é", 100), `"` + strings.Repeat("é", MaxRunes) + `…" (200 bytes)`},
		{strings.Repeat("\x00", 100), `"` + strings.Repeat(`\x00`, 2*MaxRunes/4) + `…" (100 bytes)`},
	} {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%.40q) = %s, want %s", c.in, got, c.want)
		}
	}
	// The quoted form of a string without cut agrees with strconv.Quote
	// (which escapes the same characters).
	for _, s := range []string{"tokenizer.ggml.tokens", "a\tb\x7f", "\u00a0x\u2028"} {
		if Quote(s) != strconv.Quote(s) {
			t.Errorf("Quote(%q) = %s, strconv.Quote %s", s, Quote(s), strconv.Quote(s))
		}
	}
}

// Whatever the input, the result is bounded and printable.
func TestBounded(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("\x00", 30000),
		strings.Repeat("\U0010fffe", 1000),
		strings.Repeat("\xff", 5000),
		strings.Repeat("a\"\\", 5000),
	} {
		for name, got := range map[string]string{"Quote": Quote(s), "Clip": Clip(s, 160), "Value": Value([]string{s, s, s, s, s, s}),
			"Error": Error(errors.New(s))} {
			if len(got) > 400 || !clean(got) || !strings.Contains(got, "bytes)") {
				t.Errorf("%s of %d bytes: %d bytes %.60q", name, len(s), len(got), got)
			}
		}
	}
}

func TestClip(t *testing.T) {
	if got := Clip(`question "q": unknown type`, 80); got != `question "q": unknown type` {
		t.Errorf("Clip changed a clean message: %s", got)
	}
	if got := Clip("ab\x00cdefgh", 6); got != `ab\x00cde… (9 bytes)` {
		t.Errorf("Clip = %s", got)
	}
}

func TestValue(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{uint32(7), "7"},
		{float32(1.5), "1.5"},
		{true, "true"},
		{nil, "<nil>"},
		{"x\x00", `"x\x00"`},
		{[]int32{1, 2}, "[1 2]"},
		{[]string{"a", "b", "c", "d", "e"}, `["a" "b" "c" "d" … (5 elements)]`},
		{[]string{strings.Repeat("y", 30)}, `["` + strings.Repeat("y", MaxRunes/MaxElems) + `…" (30 bytes)]`},
		{[]uint64{1, 2, 3, 4, 5, 6}, "[1 2 3 4 … (6 elements)]"},
	} {
		if got := Value(c.in); got != c.want {
			t.Errorf("Value(%v) = %s, want %s", c.in, got, c.want)
		}
	}
	if Error(nil) != "" {
		t.Error("Error(nil)")
	}
}
