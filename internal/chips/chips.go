// Package chips is the one table of Apple silicon GPU rooflines: memory
// bandwidth, the FP32 and FP16 shader FLOP rates of the top GPU bin of each
// chip, and on M5 the rate of the GPU's neural accelerators (Metal 4 tensor
// ops). `clef selftest`, `clef bench kernels` and its --estimate read it to
// put measurements and estimates next to the chip's peak.
package chips

import "strings"

// Chip is one chip's roofline.
type Chip struct {
	Name   string  // "M3 Max"
	GBs    float64 // memory bandwidth, GB/s
	TFLOPs float64 // FP32 shader TFLOP/s
	// F16TFLOPs is the FP16 shader rate; 0 means the FP32 rate (M1–M4
	// issue FP16 and FP32 FMAs at the same rate).
	F16TFLOPs float64
	// TensorTFLOPs is the FP16 matrix rate of the neural accelerators
	// (Metal 4 tensor ops, matmul2d); 0 on chips without them.
	TensorTFLOPs float64
	// TensorInt8TOPs is the accelerators' int8 x int8 -> int32 rate (tera
	// operations a second, a multiply-add counted as two); 0 without them.
	TensorInt8TOPs float64
	Derived        bool // estimated from clocks (±10%), not published by Apple
}

// F16 returns the FP16 shader rate in TFLOP/s.
func (c Chip) F16() float64 {
	if c.F16TFLOPs > 0 {
		return c.F16TFLOPs
	}
	return c.TFLOPs
}

// Key is the chip's name as a command-line value: "m4-max".
func (c Chip) Key() string { return strings.ToLower(strings.ReplaceAll(c.Name, " ", "-")) }

// Table lists the chips, longest names first so that "M4 Max" matches
// before "M4". Source: the Apple M-series roofline table of the Metal
// spec (§5): Apple published the M1 and M2 figures; the others are derived
// from measured GPU clocks (cores × 128 FP32 lanes × 2 × clock), given
// there as a range, of which this is the midpoint (M3 Max: 14.3–16.4,
// so 15.4). Bandwidths are Apple's press figures (M5 Max: 614 GB/s as
// reported by third-party summaries of the March 2026 launch).
//
// The M5 generation (per T. Zakharko, "Investigating the GPU Neural
// Accelerators on Apple A19/M5", Oct 2025, microbenchmarks on an A19 with
// the same GPU core): the neural accelerators do ~1024 FP16 matrix FLOPs
// per GPU core per cycle, 4× the 256 FP32 shader FLOPs, so TensorTFLOPs is
// 4 × TFLOPs (M5 Max: 40 cores × 1024 × ~1.71 GHz ≈ 70; his estimate is
// ~70); FP16 SIMD FMAs dual-issue and measured ~1.7× the FP32 rate on the
// A19 (his M5 Max estimate: ~30 TFLOP/s). Whether simdgroup_matrix FP16
// multiply-accumulates get that rate is not measured: the shader estimates
// on M5 use F16 and say so. INT8 matrix products accumulating into INT32
// measured 13.5 TOPS on the A19's 5 cores, ~1.8x its FP16 matrix rate
// (his "<~2048 ops per core per cycle, with caveats"; M5 Max estimate
// ~130): TensorInt8TOPs is 1.8 x TensorTFLOPs, rounded. His table has no
// FP32 matrix rate: float operands are not counted as accelerated.
var Table = []Chip{
	{Name: "M1 Ultra", GBs: 800, TFLOPs: 21.2}, {Name: "M2 Ultra", GBs: 800, TFLOPs: 27.2}, {Name: "M3 Ultra", GBs: 819, TFLOPs: 30, Derived: true},
	{Name: "M1 Max", GBs: 400, TFLOPs: 10.6}, {Name: "M2 Max", GBs: 400, TFLOPs: 13.6}, {Name: "M3 Max", GBs: 400, TFLOPs: 15.4, Derived: true},
	{Name: "M4 Max", GBs: 546, TFLOPs: 17.5, Derived: true},
	{Name: "M5 Max", GBs: 614, TFLOPs: 17.5, F16TFLOPs: 30, TensorTFLOPs: 70, TensorInt8TOPs: 126, Derived: true},
	{Name: "M1 Pro", GBs: 200, TFLOPs: 5.3}, {Name: "M2 Pro", GBs: 200, TFLOPs: 6.8}, {Name: "M3 Pro", GBs: 150, TFLOPs: 6.9, Derived: true}, {Name: "M4 Pro", GBs: 273, TFLOPs: 8.5, Derived: true},
	{Name: "M1", GBs: 68.25, TFLOPs: 2.6}, {Name: "M2", GBs: 100, TFLOPs: 3.6}, {Name: "M3", GBs: 100, TFLOPs: 3.8, Derived: true}, {Name: "M4", GBs: 120, TFLOPs: 4.0, Derived: true},
	{Name: "M5", GBs: 153, TFLOPs: 4.0, F16TFLOPs: 6.8, TensorTFLOPs: 16, TensorInt8TOPs: 29, Derived: true},
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

// ByKey returns the chip whose Key is key ("m5-max", case-insensitive).
func ByKey(key string) (Chip, bool) {
	key = strings.ToLower(strings.TrimSpace(key))
	for _, c := range Table {
		if c.Key() == key {
			return c, true
		}
	}
	return Chip{}, false
}
