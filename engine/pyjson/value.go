// Package pyjson decodes JSON the way CPython's json.loads does and renders it
// the way json.dumps does, byte for byte.
//
// Go's encoding/json loses what the Clef record encoding depends on: object
// key order (questions keep the request's order), the int/float distinction
// (1.0 stays 1.0, integers are arbitrary precision), duplicate keys (the last
// value wins at the first key's position), and Python's number and string
// spelling on output (1e-05, 1e+16, 100000000000000.0, -0.0, Infinity,
// \u001f). Decode keeps all of it in a Value tree; Render writes it back.
package pyjson

// Kind is the JSON type of a Value, with numbers split into Python's int and
// float.
type Kind uint8

// The kinds of a Value.
const (
	Null Kind = iota
	Bool
	Int    // arbitrary-precision integer, kept as its canonical decimal literal
	Float  // IEEE double, possibly NaN or ±Inf
	String // valid UTF-8 text
	Array
	Object
)

var kindNames = [...]string{"null", "bool", "int", "float", "string", "array", "object"}

// String returns the kind's name: "null", "bool", "int", "float", "string",
// "array" or "object".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Value is one decoded JSON value. Only the fields of its Kind are meaningful.
type Value struct {
	Kind Kind
	// Bool is the value of a Bool.
	Bool bool
	// Str is the text of a String, or the canonical decimal literal of an
	// Int as Python's int() would print it ("-0" becomes "0").
	Str string
	// Num is the value of a Float.
	Num float64
	// Items are the elements of an Array.
	Items []*Value
	// Keys and Vals are the members of an Object, in order of each key's
	// first appearance; for a duplicated key, Vals holds the last value.
	Keys []string
	Vals []*Value
}

// NewString returns a String value.
func NewString(s string) *Value { return &Value{Kind: String, Str: s} }

// NewFloat returns a Float value.
func NewFloat(f float64) *Value { return &Value{Kind: Float, Num: f} }

// NewObject returns an empty Object value.
func NewObject() *Value { return &Value{Kind: Object} }

// Get returns the value of key in an Object, or nil when v is not an Object
// or has no such key.
func (v *Value) Get(key string) *Value {
	if v == nil || v.Kind != Object {
		return nil
	}
	for i, k := range v.Keys {
		if k == key {
			return v.Vals[i]
		}
	}
	return nil
}

// Has reports whether v is an Object holding key.
func (v *Value) Has(key string) bool { return v.Get(key) != nil }

// Set stores key in an Object with Python dict semantics: an existing key
// keeps its position and takes the new value, a new key goes last.
func (v *Value) Set(key string, val *Value) {
	for i, k := range v.Keys {
		if k == key {
			v.Vals[i] = val
			return
		}
	}
	v.Keys = append(v.Keys, key)
	v.Vals = append(v.Vals, val)
}

// Len returns the number of elements of an Array, members of an Object or
// bytes of a String, and 0 for other kinds.
func (v *Value) Len() int {
	if v == nil {
		return 0
	}
	switch v.Kind {
	case Array:
		return len(v.Items)
	case Object:
		return len(v.Keys)
	case String:
		return len(v.Str)
	}
	return 0
}

// Truthy reports whether Python's bool() of the value is true: null, false,
// 0, 0.0, "", [] and {} are false, everything else (NaN included) is true.
func (v *Value) Truthy() bool {
	if v == nil {
		return false
	}
	switch v.Kind {
	case Null:
		return false
	case Bool:
		return v.Bool
	case Int:
		return v.Str != "0"
	case Float:
		return v.Num != 0
	case String, Array, Object:
		return v.Len() > 0
	}
	return false
}

// IsNull reports whether v is missing (nil) or JSON null.
func (v *Value) IsNull() bool { return v == nil || v.Kind == Null }
