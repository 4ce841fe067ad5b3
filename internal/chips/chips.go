// Package chips is the one table of Apple silicon GPU rooflines: memory
// bandwidth and FP32 (= FP16 shader) FLOP rate of the top GPU bin of each
// chip. `clef selftest` and `clef bench kernels` both read it to put their
// measurements next to the chip's peak.
package chips

import "strings"

// Chip is one chip's roofline.
type Chip struct {
	Name    string  // "M3 Max"
	GBs     float64 // memory bandwidth, GB/s
	TFLOPs  float64 // FP32 = FP16 shader TFLOP/s
	Derived bool    // estimated from clocks (±10%), not published by Apple
}

// Table lists the chips, longest names first so that "M4 Max" matches
// before "M4". Source: the Apple M-series roofline table of the Metal
// spec (§5): Apple published the M1 and M2 figures; the others are derived
// from measured GPU clocks (cores × 128 FP32 lanes × 2 × clock), given
// there as a range, of which this is the midpoint (M3 Max: 14.3–16.4,
// so 15.4).
var Table = []Chip{
	{"M1 Ultra", 800, 21.2, false}, {"M2 Ultra", 800, 27.2, false}, {"M3 Ultra", 819, 30, true},
	{"M1 Max", 400, 10.6, false}, {"M2 Max", 400, 13.6, false}, {"M3 Max", 400, 15.4, true}, {"M4 Max", 546, 17.5, true}, {"M5 Max", 614, 17.5, true},
	{"M1 Pro", 200, 5.3, false}, {"M2 Pro", 200, 6.8, false}, {"M3 Pro", 150, 6.9, true}, {"M4 Pro", 273, 8.5, true},
	{"M1", 68.25, 2.6, false}, {"M2", 100, 3.6, false}, {"M3", 100, 3.8, true}, {"M4", 120, 4.0, true}, {"M5", 153, 4.0, true},
}

// Of returns the chip a device name ("Apple M3 Max") describes.
func Of(device string) (Chip, bool) {
	for _, c := range Table {
		if strings.Contains(device, c.Name) {
			return c, true
		}
	}
	return Chip{}, false
}
