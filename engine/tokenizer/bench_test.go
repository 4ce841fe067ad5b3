package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// mixedCorpus returns about n bytes of mixed text: the golden strings (prose,
// code, JSON, numbers, CJK, emoji, ...) in turn with generated prose and JSON.
func mixedCorpus(t testing.TB, n int) string {
	lines := readGolden(t, qwen3Dir+"golden.jsonl")
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the of and to in is that for on with as was by it at from this be are or an which clef decision state schema option question score choice noul probability model token request response 2026 14.5 -3 42 café naïve Ärger Straße мир данные 数据 決定 ✓ 🚀")
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(lines[i%len(lines)].Text)
		b.WriteByte('\n')
		for k := 0; k < 40; k++ {
			b.WriteString(words[rng.IntN(len(words))])
			switch rng.IntN(12) {
			case 0:
				b.WriteString(", ")
			case 1:
				b.WriteString(".\n")
			case 2:
				b.WriteString(`": "`)
			default:
				b.WriteByte(' ')
			}
		}
	}
	return b.String()
}

func BenchmarkEncodeMixed(b *testing.B) {
	tok := qwen3(b)
	corpus := mixedCorpus(b, 1<<20)
	b.SetBytes(int64(len(corpus)))
	b.ReportAllocs()
	dst := make([]int, 0, len(corpus))
	for b.Loop() {
		dst = tok.AppendEncode(dst[:0], corpus)
	}
	b.ReportMetric(float64(len(corpus))/float64(len(dst)), "bytes/token")
}

// BenchmarkEncodeMixedCold measures the same corpus with the word cache
// emptied before each pass.
func BenchmarkEncodeMixedCold(b *testing.B) {
	tok := qwen3(b)
	corpus := mixedCorpus(b, 1<<20)
	b.SetBytes(int64(len(corpus)))
	dst := make([]int, 0, len(corpus))
	for b.Loop() {
		tok.model.mu.Lock()
		clear(tok.model.cache)
		tok.model.mu.Unlock()
		dst = tok.AppendEncode(dst[:0], corpus)
	}
}

func BenchmarkEncodeNoSpaces200K(b *testing.B) {
	tok := qwen3(b)
	s := noSpaces(200 << 10)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s)
	}
}

func BenchmarkEncodeDigits1M(b *testing.B) {
	tok := qwen3(b)
	s := strings.Repeat("8401273", 1<<20/7)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s)
	}
}

func BenchmarkDecodeMixed(b *testing.B) {
	tok := qwen3(b)
	corpus := mixedCorpus(b, 1<<20)
	ids := tok.Encode(corpus)
	b.SetBytes(int64(len(corpus)))
	for b.Loop() {
		tok.Decode(ids)
	}
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load(qwen3Dir + "tokenizer.json"); err != nil {
			b.Fatal(err)
		}
	}
}

// noSpaces returns n bytes of letters without a space: one huge pre-token.
func noSpaces(n int) string {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = "etaoinshrdlucmfwyp"[rng.IntN(18)]
	}
	return string(buf)
}

// TestLinearTime guards against quadratic behaviour on long inputs without a
// split point. The bounds are generous (seconds where a run takes
// milliseconds); a quadratic merge or split takes minutes.
func TestLinearTime(t *testing.T) {
	tok := qwen3(t)
	cases := []struct {
		name string
		text string
	}{
		{"200KB letters", noSpaces(200 << 10)},
		{"200KB one letter", strings.Repeat("a", 200<<10)},
		{"1MB digits", strings.Repeat("1234567890", 1<<20/10)},
		{"200KB punctuation", strings.Repeat("!?-", 200<<10/3)},
		{"200KB spaces", strings.Repeat(" ", 200<<10) + "x"},
		{"200KB newlines and tabs", strings.Repeat("\n\t ", 200<<10/3)},
		{"200KB markup", strings.Repeat("<|im_sta", 200<<10/8)},
		{"200KB CJK", strings.Repeat("决定状态", 200<<10/12)},
	}
	for _, c := range cases {
		start := time.Now()
		ids := tok.Encode(c.text)
		el := time.Since(start)
		if el > 10*time.Second {
			t.Errorf("%s: %v for %d bytes", c.name, el, len(c.text))
		}
		if got := tok.Decode(ids); got != c.text {
			t.Errorf("%s: decode does not give the text back", c.name)
		}
		t.Logf("%s: %d ids in %v", c.name, len(ids), el)
	}
}
