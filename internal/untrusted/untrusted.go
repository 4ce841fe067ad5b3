// Package untrusted renders strings that come from outside the program —
// names, keys and values read from model files, paths written inside them,
// request fields — for error messages and logs: control bytes and invalid
// UTF-8 escaped as strconv.Quote does, and cut to a bounded length with the
// full size said, so a damaged file or a hostile request cannot put raw
// bytes or megabytes into a message.
package untrusted

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxRunes bounds the characters Quote keeps of its input. The escaped
// form is bounded too, at 2*MaxRunes bytes (a kept "\x00" takes 4).
const MaxRunes = 80

// MaxElems is how many elements of a slice Value shows.
const MaxElems = 4

// Quote returns s quoted like strconv.Quote, cut after MaxRunes characters;
// a cut string ends with `…" (N bytes)`.
func Quote(s string) string { return quote(s, MaxRunes) }

func quote(s string, max int) string {
	body, cut := escape(s, max, true)
	if !cut {
		return `"` + body + `"`
	}
	return `"` + body + `…" (` + strconv.Itoa(len(s)) + " bytes)"
}

// QuoteBytes is Quote for a byte slice.
func QuoteBytes(b []byte) string { return Quote(string(b)) }

// Clip returns s with control bytes and invalid UTF-8 escaped (as inside a
// strconv.Quote string, without the quotes) and cut after max characters
// with "… (N bytes)": for messages that are already sentences (an error of
// another package, a refusal) on their way into a log or a longer error.
func Clip(s string, max int) string {
	body, cut := escape(s, max, false)
	if !cut {
		return body
	}
	return body + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Value renders a decoded value (a GGUF metadata value, a JSON scalar or
// array) bounded: strings as Quote, slices and arrays as their first
// MaxElems elements (each cut shorter) and their length, anything else as
// fmt's %v cut to MaxRunes characters.
func Value(v any) string { return value(v, MaxRunes) }

func value(v any, max int) string {
	switch x := v.(type) {
	case nil:
		return "<nil>"
	case string:
		return quote(x, max)
	case []byte:
		return quote(string(x), max)
	}
	rv := reflect.ValueOf(v)
	if k := rv.Kind(); k == reflect.Slice || k == reflect.Array {
		n := rv.Len()
		var b strings.Builder
		b.WriteByte('[')
		for i := 0; i < n && i < MaxElems; i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(value(rv.Index(i).Interface(), max/MaxElems))
		}
		if n > MaxElems {
			fmt.Fprintf(&b, " … (%d elements)", n)
		}
		b.WriteByte(']')
		return b.String()
	}
	return Clip(fmt.Sprint(v), max)
}

// Error is err's message through Clip with a limit of 2*MaxRunes
// characters ("" for nil): for wrapping an error of a parser that may
// echo its input (encoding/json's messages name unknown fields, for one).
func Error(err error) string {
	if err == nil {
		return ""
	}
	return Clip(err.Error(), 2*MaxRunes)
}

// escape returns the escaped form of s's first max characters and whether
// s was cut. The escaped form is bounded in bytes too (2*max), so a string
// of control bytes cannot grow past the bound by escaping. quoted escapes
// '"' and '\\' as well, for a string between quotes.
func escape(s string, max int, quoted bool) (string, bool) {
	limit := 2 * max
	var b []byte
	n := 0
	for i := 0; i < len(s); {
		if n == max || len(b) >= limit {
			return string(b), true
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\x`...)
			b = append(b, "0123456789abcdef"[s[i]>>4], "0123456789abcdef"[s[i]&0xf])
		case quoted && (r == '"' || r == '\\'):
			b = append(b, '\\', byte(r))
		case r < utf8.RuneSelf && strconv.IsPrint(r):
			b = append(b, byte(r))
		case strconv.IsPrint(r):
			b = append(b, s[i:i+size]...)
		default:
			q := strconv.QuoteRune(r) // 'x' with x escaped
			b = append(b, q[1:len(q)-1]...)
		}
		i += size
		n++
	}
	return string(b), false
}

// Wrap returns err with its message bounded as Error does; errors.Is and
// errors.As still see err (nil for nil).
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return wrapped{err}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return Error(w.err) }
func (w wrapped) Unwrap() error { return w.err }
