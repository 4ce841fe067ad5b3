package conformance

import (
	"bytes"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
)

// TestCheck: a Reporter collects errors, ends the case at Fatal and Skip,
// and turns a panic into an error.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		run     func(T, backend.Backend)
		errors  int
		skipped bool
	}{
		{func(t T, _ backend.Backend) {}, 0, false},
		{func(t T, _ backend.Backend) { t.Errorf("a %d", 1); t.Error("b") }, 2, false},
		{func(t T, _ backend.Backend) { t.Fatal("stop"); t.Error("not reached") }, 1, false},
		{func(t T, _ backend.Backend) { t.Fatalf("stop %s", "here"); t.Error("not reached") }, 1, false},
		{func(t T, _ backend.Backend) { t.Skip("no"); t.Error("not reached") }, 0, true},
		{func(t T, _ backend.Backend) { panic("boom") }, 1, false},
	} {
		r := Check(Case{Name: "x", Run: c.run}, nil)
		if len(r.Errors) != c.errors || (r.Skipped != "") != c.skipped {
			t.Errorf("errors %q skipped %q, want %d errors, skipped %v", r.Errors, r.Skipped, c.errors, c.skipped)
		}
	}
}

// TestCasesNamed: every case has a distinct name.
func TestCasesNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Cases() {
		if c.Name == "" || seen[c.Name] || c.Run == nil {
			t.Errorf("case %q: empty, repeated or without Run", c.Name)
		}
		seen[c.Name] = true
	}
}

// TestReportLines: Report writes one line per case.
func TestReportLines(t *testing.T) {
	var w bytes.Buffer
	// A nil backend makes every case fail (a panic inside each) or skip
	// (an optional interface), which Report must survive.
	failed := Report(&w, nil)
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != len(Cases()) || failed == 0 {
		t.Fatalf("%d lines, %d failed for %d cases:\n%s", len(lines), failed, len(Cases()), w.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "FAIL conformance ") && !strings.HasPrefix(l, "SKIP conformance ") {
			t.Errorf("line %q", l)
		}
	}
}
