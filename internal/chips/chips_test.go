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
		if !(c.GBs > 0 && c.TFLOPs > 0) || c.F16() < c.TFLOPs || c.TensorTFLOPs < 0 || (c.TensorTFLOPs > 0 && c.TensorTFLOPs < c.F16()) {
			t.Errorf("%s: bad peaks %+v", c.Name, c)
		}
	}
}

// TestByKey: every chip is found by its key, and the neural accelerators
// are listed exactly for the M5 generation.
func TestByKey(t *testing.T) {
	for _, c := range Table {
		got, ok := ByKey(strings.ToUpper(c.Key()))
		if !ok || got.Name != c.Name {
			t.Errorf("ByKey(%q) = %+v, %v", c.Key(), got, ok)
		}
		if m5 := strings.HasPrefix(c.Name, "M5"); m5 != (c.TensorTFLOPs > 0) || m5 != (c.TensorInt8TOPs > 0) {
			t.Errorf("%s: tensor rates %v, int8 %v", c.Name, c.TensorTFLOPs, c.TensorInt8TOPs)
		}
		if c.TensorInt8TOPs > 0 && c.TensorInt8TOPs < c.TensorTFLOPs {
			t.Errorf("%s: int8 rate %v below the f16 matrix rate %v", c.Name, c.TensorInt8TOPs, c.TensorTFLOPs)
		}
	}
	if c, _ := ByKey("m4-max"); c.F16() != c.TFLOPs {
		t.Errorf("M4 Max: FP16 %v != FP32 %v", c.F16(), c.TFLOPs)
	}
	if _, ok := ByKey("m9-max"); ok {
		t.Error("ByKey found an unknown chip")
	}
}
