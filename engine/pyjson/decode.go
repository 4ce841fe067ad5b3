package pyjson

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects Decode accepts.
// CPython's decoder stops near its recursion limit (1000) with a
// RecursionError; a fixed bound keeps every input from exhausting the stack.
const MaxDepth = 1000

// MaxIntDigits is the longest integer literal Decode accepts, in digits:
// CPython 3.11+ refuses to convert longer decimal strings to int
// (sys.get_int_max_str_digits() defaults to 4300).
const MaxIntDigits = 4300

// SyntaxError is a document that CPython's json.loads rejects. Its message
// follows Python's wording ("Expecting value", "Extra data", ...) with the
// 1-based line and column and the 0-based character offset of the problem.
type SyntaxError struct {
	Msg    string
	Line   int // 1-based
	Column int // 1-based, in characters
	Offset int // 0-based, in characters
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s: line %d column %d (char %d)", e.Msg, e.Line, e.Column, e.Offset)
}

// Decode parses one JSON document as CPython's json.loads(bytes) does:
// leading and trailing whitespace (space, tab, CR, LF) is allowed, a UTF-8
// byte-order mark at the start is skipped, NaN, Infinity and -Infinity are
// accepted, a float literal beyond the double range becomes ±Inf (1e400),
// object keys keep their order and a duplicated key keeps its first position
// with its last value. It is stricter than CPython in two places, both of
// which CPython rejects later anyway (its tokenizer cannot encode them):
// bytes that are not UTF-8 and lone UTF-16 surrogate escapes are errors.
func Decode(data []byte) (*Value, error) {
	d := decoder{data: data}
	if len(data) >= 3 && string(data[:3]) == "\ufeff" { // no copy of data
		d.pos = 3
	}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return nil, d.errorf(d.pos, "Extra data")
	}
	return v, nil
}

type decoder struct {
	data []byte
	pos  int
	slab []Value // Values are carved from chunks: one allocation per 64
}

// alloc returns a new Value of kind k.
func (d *decoder) alloc(k Kind) *Value {
	if len(d.slab) == 0 {
		d.slab = make([]Value, 64)
	}
	v := &d.slab[0]
	d.slab = d.slab[1:]
	v.Kind = k
	return v
}

// errorf builds a SyntaxError for byte offset off, counting lines and
// characters the way Python reports them.
func (d *decoder) errorf(off int, format string, args ...any) error {
	if off > len(d.data) {
		off = len(d.data)
	}
	prefix := d.data[:off]
	line, col, chars := 1, 1, 0
	for i := 0; i < len(prefix); {
		r, n := utf8.DecodeRune(prefix[i:])
		i += n
		chars++
		col++
		if r == '\n' {
			line++
			col = 1
		}
	}
	return &SyntaxError{Msg: fmt.Sprintf(format, args...), Line: line, Column: col, Offset: chars}
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) hasPrefix(s string) bool {
	return len(d.data)-d.pos >= len(s) && string(d.data[d.pos:d.pos+len(s)]) == s
}

func (d *decoder) value(depth int) (*Value, error) {
	if d.pos >= len(d.data) {
		return nil, d.errorf(d.pos, "Expecting value")
	}
	switch c := d.data[d.pos]; {
	case c == '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		v := d.alloc(String)
		v.Str = s
		return v, nil
	case c == '{':
		if depth >= MaxDepth {
			return nil, d.errorf(d.pos, "Nesting deeper than %d levels", MaxDepth)
		}
		return d.object(depth + 1)
	case c == '[':
		if depth >= MaxDepth {
			return nil, d.errorf(d.pos, "Nesting deeper than %d levels", MaxDepth)
		}
		return d.array(depth + 1)
	case c == 'n' && d.hasPrefix("null"):
		d.pos += 4
		return d.alloc(Null), nil
	case c == 't' && d.hasPrefix("true"):
		d.pos += 4
		v := d.alloc(Bool)
		v.Bool = true
		return v, nil
	case c == 'f' && d.hasPrefix("false"):
		d.pos += 5
		return d.alloc(Bool), nil
	case c == 'N' && d.hasPrefix("NaN"):
		d.pos += 3
		return &Value{Kind: Float, Num: math.NaN()}, nil
	case c == 'I' && d.hasPrefix("Infinity"):
		d.pos += 8
		return &Value{Kind: Float, Num: math.Inf(1)}, nil
	case c == '-' && d.hasPrefix("-Infinity"):
		d.pos += 9
		return &Value{Kind: Float, Num: math.Inf(-1)}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, d.errorf(d.pos, "Expecting value")
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? like
// Python's NUMBER_RE: a literal with a fraction or exponent is a float,
// otherwise an int.
func (d *decoder) number() (*Value, error) {
	start := d.pos
	p := d.pos
	if d.data[p] == '-' {
		p++
	}
	intStart := p
	if p < len(d.data) && d.data[p] == '0' {
		p++
	} else {
		for p < len(d.data) && d.data[p] >= '0' && d.data[p] <= '9' {
			p++
		}
	}
	if p == intStart {
		return nil, d.errorf(start, "Expecting value")
	}
	intEnd := p
	isFloat := false
	if p+1 < len(d.data) && d.data[p] == '.' && d.data[p+1] >= '0' && d.data[p+1] <= '9' {
		isFloat = true
		p += 2
		for p < len(d.data) && d.data[p] >= '0' && d.data[p] <= '9' {
			p++
		}
	}
	if p < len(d.data) && (d.data[p] == 'e' || d.data[p] == 'E') {
		q := p + 1
		if q < len(d.data) && (d.data[q] == '+' || d.data[q] == '-') {
			q++
		}
		if q < len(d.data) && d.data[q] >= '0' && d.data[q] <= '9' {
			isFloat = true
			for q < len(d.data) && d.data[q] >= '0' && d.data[q] <= '9' {
				q++
			}
			p = q
		}
	}
	d.pos = p
	lit := string(d.data[start:p])
	if !isFloat {
		if n := intEnd - intStart; n > MaxIntDigits {
			return nil, d.errorf(start, "Integer literal has %d digits, more than Python's limit of %d", n, MaxIntDigits)
		}
		if lit == "-0" {
			lit = "0"
		}
		v := d.alloc(Int)
		v.Str = lit
		return v, nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		// Only a range error is possible on this grammar: ParseFloat has
		// already returned the ±Inf that Python's float() gives.
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return nil, d.errorf(start, "Invalid number %q", lit)
		}
	}
	v := d.alloc(Float)
	v.Num = f
	return v, nil
}

func (d *decoder) array(depth int) (*Value, error) {
	v := d.alloc(Array)
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return v, nil
	}
	for {
		d.skipSpace()
		item, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		v.Items = append(v.Items, item)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.errorf(d.pos, "Expecting ',' delimiter")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return v, nil
		default:
			return nil, d.errorf(d.pos, "Expecting ',' delimiter")
		}
	}
}

func (d *decoder) object(depth int) (*Value, error) {
	v := d.alloc(Object)
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return v, nil
	}
	var index map[string]int // built lazily for large objects
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.errorf(d.pos, "Expecting property name enclosed in double quotes")
		}
		key, err := d.str()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.errorf(d.pos, "Expecting ':' delimiter")
		}
		d.pos++
		d.skipSpace()
		val, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		// Python builds a dict from the pairs: a repeated key keeps its
		// first position and takes the later value.
		if index == nil && len(v.Keys) >= 16 {
			index = make(map[string]int, 2*len(v.Keys))
			for i, k := range v.Keys {
				index[k] = i
			}
		}
		at := -1
		if index != nil {
			if i, ok := index[key]; ok {
				at = i
			}
		} else {
			for i, k := range v.Keys {
				if k == key {
					at = i
					break
				}
			}
		}
		if at >= 0 {
			v.Vals[at] = val
		} else {
			if index != nil {
				index[key] = len(v.Keys)
			}
			v.Keys = append(v.Keys, key)
			v.Vals = append(v.Vals, val)
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.errorf(d.pos, "Expecting ',' delimiter")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return v, nil
		default:
			return nil, d.errorf(d.pos, "Expecting ',' delimiter")
		}
	}
}

// str scans a string literal starting at the opening quote.
func (d *decoder) str() (string, error) {
	start := d.pos
	d.pos++ // "
	// Fast path: no escapes.
	p := d.pos
	for p < len(d.data) {
		c := d.data[p]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		p++
	}
	if p < len(d.data) && d.data[p] == '"' {
		s := d.data[d.pos:p]
		if !utf8.Valid(s) {
			return "", d.errorf(d.pos+invalidAt(s), "Invalid UTF-8 in string")
		}
		d.pos = p + 1
		return string(s), nil
	}
	var b strings.Builder
	b.Write(d.data[d.pos:p])
	if !utf8.Valid(d.data[d.pos:p]) {
		return "", d.errorf(d.pos+invalidAt(d.data[d.pos:p]), "Invalid UTF-8 in string")
	}
	d.pos = p
	for {
		if d.pos >= len(d.data) {
			return "", d.errorf(start, "Unterminated string starting at")
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return b.String(), nil
		case c < 0x20:
			return "", d.errorf(d.pos, "Invalid control character at")
		case c == '\\':
			if d.pos+1 >= len(d.data) {
				return "", d.errorf(start, "Unterminated string starting at")
			}
			e := d.data[d.pos+1]
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, n, err := d.unicodeEscape()
				if err != nil {
					return "", err
				}
				b.WriteRune(r)
				d.pos += n
				continue
			default:
				return "", d.errorf(d.pos, "Invalid \\escape")
			}
			d.pos += 2
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			d.pos++
		default:
			r, n := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && n <= 1 {
				return "", d.errorf(d.pos, "Invalid UTF-8 in string")
			}
			b.Write(d.data[d.pos : d.pos+n])
			d.pos += n
		}
	}
}

// unicodeEscape reads \uXXXX (and a following low surrogate escape when the
// first is a high surrogate) at d.pos; it returns the rune and the bytes used.
func (d *decoder) unicodeEscape() (rune, int, error) {
	hi, ok := hex4(d.data[d.pos+2:])
	if !ok {
		return 0, 0, d.errorf(d.pos, "Invalid \\uXXXX escape")
	}
	if hi < 0xd800 || hi > 0xdfff {
		return hi, 6, nil
	}
	if hi <= 0xdbff && d.pos+12 <= len(d.data) && d.data[d.pos+6] == '\\' && d.data[d.pos+7] == 'u' {
		if lo, ok := hex4(d.data[d.pos+8:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
			return 0x10000 + (hi-0xd800)<<10 + (lo - 0xdc00), 12, nil
		}
	}
	return 0, 0, d.errorf(d.pos, "Lone surrogate \\u%04x (not encodable as UTF-8)", hi)
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// invalidAt returns the byte offset of the first invalid UTF-8 sequence in s.
func invalidAt(s []byte) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(s)
}
