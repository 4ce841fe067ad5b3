package cpu

import (
	"math"
	"testing"
)

// TestExpf checks expf against math.Exp over the softmax range to 2 ulp
// and its edge cases.
func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x <= 10; x += 0.00731 {
		got := float64(expf(x))
		want := math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
		if e := math.Abs(got-want) / ulp; e > worst {
			worst = e
		}
	}
	if worst > 2 {
		t.Errorf("expf error %.2f ulp > 2", worst)
	}
	if expf(float32(math.Inf(-1))) != 0 || expf(-100) != 0 || expf(0) != 1 {
		t.Error("expf edge cases")
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Error("expf(NaN) is not NaN")
	}
	if !math.IsInf(float64(expf(100)), 1) {
		t.Error("expf(100) is not +Inf")
	}
}
