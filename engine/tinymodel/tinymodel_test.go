package tinymodel

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestSameAsGolden checks that the embedded release is byte for byte the
// clef-tiny golden release, so the goldens vouch for the demo model.
func TestSameAsGolden(t *testing.T) {
	dir, cleanup, err := WriteDir()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	golden := "../../testdata/clef-tiny/release"
	entries, err := os.ReadDir(golden)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want, err := os.ReadFile(filepath.Join(golden, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("embedded release lacks %s: %v", e.Name(), err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("embedded %s differs from the golden release", e.Name())
		}
	}
	got, _ := os.ReadDir(dir)
	if len(got) != len(entries) {
		t.Errorf("embedded release has %d files, golden %d", len(got), len(entries))
	}
	cleanup()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s", dir)
	}
}
