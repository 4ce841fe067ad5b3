package pyjson

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Options are the json.dumps arguments that change its output.
type Options struct {
	SortKeys    bool   // sort_keys: object members by key, in code point order
	EnsureASCII bool   // ensure_ascii: escape everything outside printable ASCII
	ItemSep     string // separators[0]
	KeySep      string // separators[1]
}

// Compact is json.dumps(ensure_ascii=False, separators=(",", ":"),
// sort_keys=True): the form Clef's render() gives every non-string value.
var Compact = Options{SortKeys: true, ItemSep: ",", KeySep: ":"}

// Default is json.dumps with no arguments: ", " and ": " separators, keys in
// order, non-ASCII escaped.
var Default = Options{EnsureASCII: true, ItemSep: ", ", KeySep: ": "}

// Render is Clef's render(): a string passes through unchanged, any other
// value is written with Compact.
func Render(v *Value) string {
	if v != nil && v.Kind == String {
		return v.Str
	}
	return string(Append(nil, v, Compact))
}

// Dumps returns json.dumps(v) under o.
func Dumps(v *Value, o Options) string { return string(Append(nil, v, o)) }

// Append appends json.dumps(v) under o to dst. A nil Value is written as
// null.
func Append(dst []byte, v *Value, o Options) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	switch v.Kind {
	case Null:
		return append(dst, "null"...)
	case Bool:
		if v.Bool {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case Int:
		return append(dst, v.Str...)
	case Float:
		return AppendFloat(dst, v.Num)
	case String:
		return AppendString(dst, v.Str, o.EnsureASCII)
	case Array:
		dst = append(dst, '[')
		for i, it := range v.Items {
			if i > 0 {
				dst = append(dst, o.ItemSep...)
			}
			dst = Append(dst, it, o)
		}
		return append(dst, ']')
	case Object:
		order := make([]int, len(v.Keys))
		for i := range order {
			order[i] = i
		}
		if o.SortKeys {
			// Go compares strings byte-wise; on valid UTF-8 that is code
			// point order, which is how Python sorts str.
			slices.SortFunc(order, func(a, b int) int {
				switch ka, kb := v.Keys[a], v.Keys[b]; {
				case ka < kb:
					return -1
				case ka > kb:
					return 1
				}
				return 0
			})
		}
		dst = append(dst, '{')
		for n, i := range order {
			if n > 0 {
				dst = append(dst, o.ItemSep...)
			}
			dst = AppendString(dst, v.Keys[i], o.EnsureASCII)
			dst = append(dst, o.KeySep...)
			dst = Append(dst, v.Vals[i], o)
		}
		return append(dst, '}')
	}
	return append(dst, "null"...)
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string literal with Python's escapes:
// \" \\ \n \r \t \b \f, \u00XX (lowercase hex) for the other control
// characters, and with ensureASCII also \uXXXX (surrogate pairs above the
// BMP) for everything outside space..tilde, DEL included. Without
// ensureASCII, DEL, U+2028 and all other non-ASCII text are written raw.
func AppendString(dst []byte, s string, ensureASCII bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && (c < 0x7f || (!ensureASCII && c >= 0x7f)) {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			if c < 0x80 {
				dst = appendU4(dst, rune(c))
				break
			}
			r, n := utf8.DecodeRuneInString(s[i:])
			if r >= 0x10000 {
				r -= 0x10000
				dst = appendU4(dst, 0xd800+(r>>10))
				dst = appendU4(dst, 0xdc00+(r&0x3ff))
			} else {
				dst = appendU4(dst, r)
			}
			i += n
			start = i
			continue
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendU4(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&15], hexDigits[r>>8&15], hexDigits[r>>4&15], hexDigits[r&15])
}

// AppendFloat appends Python's repr(f) as json.dumps writes it: the
// shortest digits that round-trip, in positional form when the decimal
// exponent is in [-4, 16) ("0.0001", "1e-05", "1000000000000000.0", "1e+16"),
// always with a fraction or an exponent, and NaN, Infinity, -Infinity for the
// non-finite values.
func AppendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // [-]d[.ddd]e±XX
	if e[0] == '-' {
		dst = append(dst, '-')
		e = e[1:]
	}
	var digits []byte
	k := 0
	for k < len(e) && e[k] != 'e' {
		if e[k] != '.' {
			digits = append(digits, e[k])
		}
		k++
	}
	exp, _ := strconv.Atoi(string(e[k+1:]))
	decpt := exp + 1 // value = 0.DIGITS × 10^decpt
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			dst = append(dst, '0', '.')
			for range -decpt {
				dst = append(dst, '0')
			}
			dst = append(dst, digits...)
		case decpt >= len(digits):
			dst = append(dst, digits...)
			for range decpt - len(digits) {
				dst = append(dst, '0')
			}
			dst = append(dst, '.', '0')
		default:
			dst = append(dst, digits[:decpt]...)
			dst = append(dst, '.')
			dst = append(dst, digits[decpt:]...)
		}
		return dst
	}
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'e')
	if exp < 0 {
		dst = append(dst, '-')
		exp = -exp
	} else {
		dst = append(dst, '+')
	}
	if exp < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(exp), 10)
}

// FormatFloat returns Python's repr(f).
func FormatFloat(f float64) string { return string(AppendFloat(nil, f)) }

// Round returns Python's round(x, ndigits) for ndigits >= 0: the double
// nearest to the correctly rounded decimal (ties to even on the exact binary
// value), so round(2.675, 2) is 2.67 as in Python.
func Round(x float64, ndigits int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return x
	}
	s := strconv.FormatFloat(x, 'f', ndigits, 64)
	r, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return x
	}
	if r == 0 {
		return math.Copysign(0, x) // round(-0.00001, 4) is -0.0
	}
	return r
}
