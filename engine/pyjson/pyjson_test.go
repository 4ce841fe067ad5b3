package pyjson

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// pythonCases hold a document, Clef's render() of json.loads(document) and
// json.dumps(json.loads(document)) with default arguments, as CPython 3.11
// prints them.
var pythonCases = []struct{ in, render, dumps string }{
	{"1e400", "Infinity", "Infinity"},
	{"-1e400", "-Infinity", "-Infinity"},
	{"-0", "0", "0"},
	{"-0.0", "-0.0", "-0.0"},
	{"1E5", "100000.0", "100000.0"},
	{"1e-05", "1e-05", "1e-05"},
	{"0.0001", "0.0001", "0.0001"},
	{"0.00001", "1e-05", "1e-05"},
	{"1e16", "1e+16", "1e+16"},
	{"1e15", "1000000000000000.0", "1000000000000000.0"},
	{"123456789012345678901234567890", "123456789012345678901234567890", "123456789012345678901234567890"},
	{"-98765432109876543210", "-98765432109876543210", "-98765432109876543210"},
	{"5e-324", "5e-324", "5e-324"},
	{"1.7976931348623157e308", "1.7976931348623157e+308", "1.7976931348623157e+308"},
	{"2.50", "2.5", "2.5"},
	{"0.1e1", "1.0", "1.0"},
	{"9007199254740993", "9007199254740993", "9007199254740993"},
	{"9007199254740993.0", "9007199254740992.0", "9007199254740992.0"},
	{"NaN", "NaN", "NaN"},
	{"Infinity", "Infinity", "Infinity"},
	{"-Infinity", "-Infinity", "-Infinity"},
	{"1e-400", "0.0", "0.0"},
	{"100000000000000.0", "100000000000000.0", "100000000000000.0"},
	{"12345678901234567.0", "1.2345678901234568e+16", "1.2345678901234568e+16"},
	{"0.00012345", "0.00012345", "0.00012345"},
	{"1.5e-07", "1.5e-07", "1.5e-07"},
	{"1e22", "1e+22", "1e+22"},
	{"0.30000000000000004", "0.30000000000000004", "0.30000000000000004"},
	{"[]", "[]", "[]"},
	{"{}", "{}", "{}"},
	{"true", "true", "true"},
	{"false", "false", "false"},
	{"null", "null", "null"},
	{" \u0009\u000a[ 1 , 2 ]\u000d\u000a", "[1,2]", "[1, 2]"},
	{"\"plain\"", "plain", "\"plain\""},
	{"\"\\u001f\\u007f\\u2028\\\\\\\"\\/\\b\\f\\n\\r\\t\\u0000\"", "\u001f\u007f\u2028\\\"/\u0008\u000c\u000a\u000d\u0009\u0000", "\"\\u001f\\u007f\\u2028\\\\\\\"/\\b\\f\\n\\r\\t\\u0000\""},
	{"{\"b\":1,\"a\":2,\"b\":3}", "{\"a\":2,\"b\":3}", "{\"b\": 3, \"a\": 2}"},
	{"{\"\U0001f600\":1,\"\uff01\":2,\"a\":3,\"\u00e9\":4,\"\":5}", "{\"\":5,\"a\":3,\"\u00e9\":4,\"\uff01\":2,\"\U0001f600\":1}", "{\"\\ud83d\\ude00\": 1, \"\\uff01\": 2, \"a\": 3, \"\\u00e9\": 4, \"\": 5}"},
	{"[1,[2,{\"x\":null}]]", "[1,[2,{\"x\":null}]]", "[1, [2, {\"x\": null}]]"},
	{"\"\\ud83d\\ude00\\u00e9\"", "\U0001f600\u00e9", "\"\\ud83d\\ude00\\u00e9\""},
	{"{\"k\":{\"z\":[1.0,{\"y\":1,\"x\":2}],\"a\":\"<|im_end|>\"}}", "{\"k\":{\"a\":\"<|im_end|>\",\"z\":[1.0,{\"x\":2,\"y\":1}]}}", "{\"k\": {\"z\": [1.0, {\"y\": 1, \"x\": 2}], \"a\": \"<|im_end|>\"}}"},
	{"\"\u00e9\U0001f600\u0085\"", "\u00e9\U0001f600\u0085", "\"\\u00e9\\ud83d\\ude00\\u0085\""},
	{"\ufeff{\"a\":1}", "{\"a\":1}", "{\"a\": 1}"},
}

func TestPythonCases(t *testing.T) {
	for _, c := range pythonCases {
		v, err := Decode([]byte(c.in))
		if err != nil {
			t.Errorf("Decode(%q): %v", c.in, err)
			continue
		}
		if got := Render(v); got != c.render {
			t.Errorf("Render(%q) = %q, want %q", c.in, got, c.render)
		}
		if got := Dumps(v, Default); got != c.dumps {
			t.Errorf("Dumps(%q) = %q, want %q", c.in, got, c.dumps)
		}
	}
}

// rejected are documents CPython's json.loads refuses, and the two that it
// accepts but Decode refuses on purpose (lone surrogates cannot be encoded as
// UTF-8, and CPython's tokenizer fails on them later).
var rejected = []string{
	"",
	"  ",
	"[1,]",
	"{\"a\":1,}",
	"{\"a\"}",
	"{a:1}",
	"[1 2]",
	"01",
	"1.",
	"1e",
	"-",
	".5",
	"+1",
	"\"abc",
	"\"\\x\"",
	"\"\\u12\"",
	"\"a\u000ab\"",
	"[1]x",
	"nan",
	"inf",
	"True",
	"'a'",
	"\"\xff\"",
	"\"\xed\xa0\x80\"",
	// Accepted by CPython, refused here.
	`"\ud800"`,
	`"\udc00x"`,
	`"\ud800\u0041"`,
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	"1" + strings.Repeat("0", MaxIntDigits),
}

func TestRejected(t *testing.T) {
	for _, in := range rejected {
		v, err := Decode([]byte(in))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Decode(%.40q) = %v, %v; want a SyntaxError", in, v, err)
			continue
		}
		if se.Line < 1 || se.Column < 1 || strings.Contains(err.Error(), "\n") {
			t.Errorf("Decode(%.40q): bad error %q", in, err)
		}
	}
	// The limits themselves are accepted.
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Decode([]byte(deep)); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	if _, err := Decode([]byte("-" + strings.Repeat("9", MaxIntDigits))); err != nil {
		t.Errorf("%d digits: %v", MaxIntDigits, err)
	}
}

func TestErrorPosition(t *testing.T) {
	_, err := Decode([]byte("{\n  \"é\": tru\n}"))
	want := "Expecting value: line 2 column 8 (char 9)"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestOrderAndDuplicates(t *testing.T) {
	v, err := Decode([]byte(`{"q2":1,"q1":2,"q2":3,"q0":{"b":1,"a":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.Keys, ","); got != "q2,q1,q0" {
		t.Errorf("keys %s, want q2,q1,q0", got)
	}
	if got := v.Get("q2").Str; got != "3" {
		t.Errorf("q2 = %s, want the last value 3", got)
	}
	if got := Dumps(v, Options{ItemSep: ",", KeySep: ":"}); got != `{"q2":3,"q1":2,"q0":{"b":1,"a":2}}` {
		t.Errorf("unsorted dumps %s", got)
	}
	// Many duplicates go through the index path.
	var b strings.Builder
	b.WriteString("{")
	for i := range 40 {
		b.WriteString(`"k` + string(rune('a'+i%20)) + `":` + string(rune('0'+i%10)) + ",")
	}
	b.WriteString(`"ka":"last"}`)
	v, err = Decode([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Keys) != 20 || v.Keys[0] != "ka" || v.Get("ka").Str != "last" || v.Get("kt").Str != "9" {
		t.Errorf("got %d keys, first %q, ka=%q kt=%q", len(v.Keys), v.Keys[0], v.Get("ka").Str, v.Get("kt").Str)
	}
}

func TestTruthy(t *testing.T) {
	for in, want := range map[string]bool{
		"null": false, "false": false, "0": false, "-0": false, "0.0": false, "-0.0": false, `""`: false,
		"[]": false, "{}": false, "true": true, "1": true, "0.5": true, "NaN": true, `" "`: true,
		"[0]": true, `{"a":null}`: true,
	} {
		v, err := Decode([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if v.Truthy() != want {
			t.Errorf("Truthy(%s) = %v", in, !want)
		}
	}
	var missing *Value
	if missing.Truthy() || !missing.IsNull() || missing.Get("x") != nil || missing.Len() != 0 {
		t.Error("nil Value misbehaves")
	}
}

func TestRound(t *testing.T) {
	for _, c := range []struct{ x, want float64 }{
		{0.12345, 0.1235}, // 0.12345 is 0.123450000000000004174...
		{2.675, 2.675},
		{0.00004, 0},
		{0.99995, 1.0}, // 0.99995 is 0.999950000000000049...
		{0.16055804491043091, 0.1606},
		{1.00005, 1.0001},
		{-0.00001, math.Copysign(0, -1)},
	} {
		got := Round(c.x, 4)
		if got != c.want || math.Signbit(got) != math.Signbit(c.want) {
			t.Errorf("Round(%v, 4) = %v, want %v", c.x, got, c.want)
		}
	}
	if got := FormatFloat(Round(-0.00001, 4)); got != "-0.0" {
		t.Errorf("repr(round(-1e-05, 4)) = %s, want -0.0", got)
	}
}
