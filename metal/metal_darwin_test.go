//go:build darwin && arm64

package metal

import (
	"testing"

	"github.com/clefrt/clef/engine/backend/conformance"
)

// TestConformanceMetal runs the shared conformance suite on the real GPU.
// It is the first thing to run on a Mac: nothing in this package has been
// executed on Apple hardware before.
func TestConformanceMetal(t *testing.T) {
	if ok, why := Available(); !ok {
		t.Skipf("no Metal device: %s", why)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conformance.Run(t, b)
}
