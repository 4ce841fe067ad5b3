package release_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// towerCheckpoint is a checkpoint holding towers, with its configuration.
type towerCheckpoint struct {
	name    string
	thinker release.Thinker
	w       weights.Model
}

// towerCheckpoints opens the checkpoints with towers: the tiny Qwen3-Omni
// of testdata/omni and the clef-tiny release.
func towerCheckpoints(t *testing.T) []towerCheckpoint {
	t.Helper()
	data, err := os.ReadFile(fixtureOmniConfig)
	if err != nil {
		t.Fatal(err)
	}
	th, err := release.ParseThinker(data)
	if err != nil {
		t.Fatal(err)
	}
	omni, err := weights.Open(fixtureOmniFile, weights.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { omni.Close() })
	tiny := openTiny(t)
	return []towerCheckpoint{{"omni", th, omni}, {"clef-tiny", tiny.Config.Thinker, tiny.Weights}}
}

// checkTowerTable checks a tower's table against a checkpoint: every row
// follows the table's conventions (checkRow), names a stored tensor under
// prefix, no two rows the same, Lookup finds it with the row's shape, and
// every stored tensor under prefix has a row.
func checkTowerTable(t *testing.T, w weights.Model, prefix string, rows []release.Tensor, checkRow func(*testing.T, release.Tensor)) {
	t.Helper()
	stored := map[string]bool{}
	for _, n := range w.Names() {
		if strings.HasPrefix(n, prefix) {
			stored[n] = false
		}
	}
	for _, row := range rows {
		checkRow(t, row)
		covered, ok := stored[row.Name]
		if !ok || covered {
			t.Errorf("%s: not stored, or covered twice (%v)", row.Name, covered)
			continue
		}
		stored[row.Name] = true
		tw, names, err := release.Lookup(w, row)
		if err != nil {
			t.Errorf("%s: %v", row.Name, err)
			continue
		}
		if !reflect.DeepEqual(names, []string{row.Name}) || !reflect.DeepEqual(tw.Shape, row.Shape) {
			t.Errorf("%s: found as %v with shape %v, the table says %v", row.Name, names, tw.Shape, row.Shape)
		}
	}
	for n, covered := range stored {
		if !covered {
			t.Errorf("%s: stored, not in the table", n)
		}
	}
}
