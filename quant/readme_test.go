package quant

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's claim of bit-exact dequantization lists exactly the GGUF
// types this package implements and checks against ggml's fixtures (no
// "every GGUF type": IQ4_NL and IQ4_XS have fixtures and no implementation).
func TestReadmeDequantClaim(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`dequantization bit-exact with ggml for ([^(;|]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md: no \"dequantization bit-exact with ggml for ...\" claim")
	}
	var claimed []string
	for _, s := range strings.FieldsFunc(strings.ReplaceAll(string(m[1]), " and ", ","), func(r rune) bool { return r == ',' }) {
		if s = strings.TrimSpace(s); s != "" {
			claimed = append(claimed, strings.ToLower(s))
		}
	}
	var checked []string
	for _, e := range fixtureTypes(t) {
		checked = append(checked, strings.ToLower(e.Type))
	}
	slices.Sort(claimed)
	slices.Sort(checked)
	if !slices.Equal(claimed, checked) {
		t.Errorf("README.md claims bit-exact dequantization for %v; the fixtures check %v", claimed, checked)
	}
}
