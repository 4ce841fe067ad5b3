package chips

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for name, chip := range map[string]string{"Apple M4 Max": "M4 Max", "Apple M4": "M4", "Apple M1 Ultra": "M1 Ultra", "Apple M2 Pro": "M2 Pro", "Apple M3 Max": "M3 Max"} {
		c, ok := Of(name)
		if !ok || c.Name != chip {
			t.Errorf("Of(%q) = %+v, %v; want %s", name, c, ok, chip)
		}
	}
	if _, ok := Of("AMD Radeon Pro"); ok {
		t.Error("Of matched a non-Apple GPU")
	}
}

// TestOrder: no name is preceded by a name it contains, which would shadow it.
func TestOrder(t *testing.T) {
	for i, c := range Table {
		for _, d := range Table[:i] {
			if strings.Contains(c.Name, d.Name) {
				t.Errorf("%s is listed after %s, which shadows it", c.Name, d.Name)
			}
		}
		if !(c.GBs > 0 && c.TFLOPs > 0) {
			t.Errorf("%s: bad peaks %+v", c.Name, c)
		}
	}
}
