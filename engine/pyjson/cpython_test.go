package pyjson

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// cpythonScript reads one JSON document per line and prints, for each,
// Clef's render() form and json.dumps with default arguments.
const cpythonScript = `
import json, sys
out = sys.stdout
for line in sys.stdin.buffer:
    v = json.loads(line)
    out.write(json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n")
    out.write(json.dumps(v) + "\n")
`

// TestCPythonDifferential compares Decode + Dumps with CPython's json on
// random documents (number literals of every form, escapes, control and
// astral characters, duplicate keys, nesting). It runs only when
// CLEF_PYTHON names a Python 3 interpreter; CLEF_PYTHON_DOCS sets the count
// (default 60000):
//
//	CLEF_PYTHON=python3 go test -run CPython -v ./engine/pyjson
func TestCPythonDifferential(t *testing.T) {
	py := os.Getenv("CLEF_PYTHON")
	if py == "" {
		t.Skip("set CLEF_PYTHON=python3 to compare with CPython's json")
	}
	n := 60000
	if s := os.Getenv("CLEF_PYTHON_DOCS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			t.Fatalf("CLEF_PYTHON_DOCS=%q", s)
		}
	}
	rng := rand.New(rand.NewSource(1))
	docs := make([]string, n)
	var in bytes.Buffer
	for i := range docs {
		var b strings.Builder
		genValue(&b, rng, 0)
		docs[i] = b.String()
		in.WriteString(docs[i])
		in.WriteByte('\n')
	}
	cmd := exec.Command(py, "-c", cpythonScript)
	cmd.Stdin = &in
	cmd.Env = append(os.Environ(), "PYTHONIOENCODING=utf-8", "PYTHONUTF8=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", py, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	bad := 0
	for i, d := range docs {
		var want [2]string
		for k := range want {
			if !sc.Scan() {
				t.Fatalf("CPython gave %d of %d documents", i, n)
			}
			want[k] = sc.Text()
		}
		v, err := Decode([]byte(d))
		if err != nil {
			t.Errorf("document %d: %v\n%s", i, err, d)
			bad++
		} else if got := Dumps(v, Compact); got != want[0] {
			t.Errorf("document %d, compact sorted:\n in   %s\n got  %s\n want %s", i, d, got, want[0])
			bad++
		} else if got := Dumps(v, Default); got != want[1] {
			t.Errorf("document %d, default:\n in   %s\n got  %s\n want %s", i, d, got, want[1])
			bad++
		}
		if bad > 10 {
			t.FailNow()
		}
	}
	t.Logf("%d documents: Decode and Dumps (compact sorted, default) agree with %s", n, py)
}

// genValue writes a random JSON value.
func genValue(b *strings.Builder, rng *rand.Rand, depth int) {
	k := rng.Intn(10)
	if depth >= 4 {
		k = rng.Intn(6)
	}
	switch k {
	case 0:
		b.WriteString([]string{"null", "true", "false"}[rng.Intn(3)])
	case 1, 2:
		genNumber(b, rng)
	case 3, 4, 5:
		genString(b, rng)
	case 6, 7:
		b.WriteByte('[')
		for i, m := 0, rng.Intn(5); i < m; i++ {
			if i > 0 {
				b.WriteString(sep(rng, ","))
			}
			genValue(b, rng, depth+1)
		}
		b.WriteByte(']')
	default:
		b.WriteByte('{')
		var keys []string
		for i, m := 0, rng.Intn(5); i < m; i++ {
			if i > 0 {
				b.WriteString(sep(rng, ","))
			}
			var kb strings.Builder
			if len(keys) > 0 && rng.Intn(5) == 0 {
				kb.WriteString(keys[rng.Intn(len(keys))]) // a duplicate key
			} else {
				genString(&kb, rng)
			}
			keys = append(keys, kb.String())
			b.WriteString(kb.String())
			b.WriteString(sep(rng, ":"))
			genValue(b, rng, depth+1)
		}
		b.WriteByte('}')
	}
}

// sep is s with optional JSON whitespace around it.
func sep(rng *rand.Rand, s string) string {
	ws := []string{"", "", " ", "\t", "\r", "  "}
	return ws[rng.Intn(len(ws))] + s + ws[rng.Intn(len(ws))]
}

// genNumber writes a number literal: integers (big ones included), decimals,
// exponents in both cases, floats from random bits, edge values and the
// non-standard NaN and Infinity CPython accepts.
func genNumber(b *strings.Builder, rng *rand.Rand) {
	switch rng.Intn(8) {
	case 0:
		fmt.Fprint(b, rng.Int63n(2000)-1000)
	case 1:
		if rng.Intn(2) == 0 {
			b.WriteByte('-')
		}
		b.WriteByte(byte('1' + rng.Intn(9)))
		for i, m := 0, rng.Intn(40); i < m; i++ {
			b.WriteByte(byte('0' + rng.Intn(10)))
		}
	case 2:
		fmt.Fprintf(b, "%d.%0*d", rng.Intn(1000)-500, rng.Intn(6)+1, rng.Intn(1000))
	case 3:
		fmt.Fprintf(b, "%d%s%d", rng.Intn(100), []string{"e", "E", "e+", "E-", "e-"}[rng.Intn(5)], rng.Intn(400))
	case 4, 5:
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = rng.NormFloat64()
		}
		b.WriteString(strconv.FormatFloat(f, []byte("eEg")[rng.Intn(3)], -1, 64))
	case 6:
		b.WriteString([]string{"-0", "-0.0", "0.0", "1e400", "-1e400", "1e-400", "5e-324", "2.50", "1E5", "1e16", "1e15",
			"9007199254740993", "9007199254740993.0", "0.1e1", "123456789012345678901234567890.5"}[rng.Intn(15)])
	default:
		b.WriteString([]string{"NaN", "Infinity", "-Infinity"}[rng.Intn(3)])
	}
}

// genString writes a string literal: ASCII, control characters (raw ones
// are invalid JSON, so escaped), two-letter and \u escapes, non-ASCII and
// astral characters raw or as surrogate pairs, DEL and U+2028.
func genString(b *strings.Builder, rng *rand.Rand) {
	b.WriteByte('"')
	for i, m := 0, rng.Intn(12); i < m; i++ {
		switch rng.Intn(10) {
		case 0:
			fmt.Fprintf(b, `\u%04x`, rng.Intn(0x20))
		case 1:
			b.WriteString([]string{`\n`, `\t`, `\r`, `\b`, `\f`, `\"`, `\\`, `\/`}[rng.Intn(8)])
		case 2:
			r := rune(0xa0 + rng.Intn(0xd7ff-0xa0))
			if rng.Intn(2) == 0 {
				b.WriteRune(r)
			} else {
				fmt.Fprintf(b, `\u%04X`, r)
			}
		case 3:
			r := rune(0x10000 + rng.Intn(0x10ffff-0x10000))
			if rng.Intn(2) == 0 {
				b.WriteRune(r)
			} else {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			}
		case 4:
			b.WriteString([]string{"\u007f", "\u2028", "\u2029", "\u0085", "é", "😀", "！"}[rng.Intn(7)])
		default:
			c := byte(' ' + rng.Intn(95))
			if c == '"' || c == '\\' {
				c = 'x' // raw, they would end the string or start an escape
			}
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
