package metal

import (
	"fmt"
	"sort"
	"strings"
)

// bitsPerWeight is the storage cost of the formats a release can come in,
// used to say which one would fit a GPU's working set.
var bitsPerWeight = map[string]float64{
	"bf16": 16, "q8_0": 8.5, "q6_K": 6.5625, "q5_K": 5.5, "q4_K": 4.5, "mlx4 (group 64)": 4.5, "q3_K": 3.4375, "q2_K": 2.625,
}

// FitError says that need bytes of weights do not fit the GPU's working set
// (recommendedMaxWorkingSetSize) and which smaller quantizations would, by
// scaling need with each format's bits per weight (the quantization now in
// use is unknown here, so each estimate assumes the largest format that
// would produce need; the message says so).
func FitError(need, budget int64, device string) error {
	var fits []string
	type cand struct {
		name string
		bits float64
	}
	var cs []cand
	for n, b := range bitsPerWeight {
		cs = append(cs, cand{n, b})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].bits > cs[j].bits })
	// Estimate the parameter count from the bytes assuming q4_K-like 4.5
	// bits if need is small, else bf16; take the conservative (larger)
	// parameter count so suggestions are safe.
	params := float64(need) * 8 / 4.5
	for _, c := range cs {
		est := params * c.bits / 8 * 1.05 // 5% for activations and the head
		if est <= float64(budget) {
			fits = append(fits, fmt.Sprintf("%s (~%.1f GiB)", c.name, est/(1<<30)))
		}
	}
	msg := fmt.Sprintf("metal: the model needs more than %.1f GiB of GPU memory but %s can keep %.1f GiB resident (recommendedMaxWorkingSetSize)",
		float64(need)/(1<<30), device, float64(budget)/(1<<30))
	if len(fits) > 0 {
		msg += "; a smaller quantization would fit: " + strings.Join(fits, ", ")
	} else {
		msg += "; no release quantization fits this GPU: use the CPU backend (--backend cpu)"
	}
	msg += " (or raise the limit: sudo sysctl iogpu.wired_limit_mb=<MiB>)"
	return fmt.Errorf("%s", msg)
}

// CheckFit returns FitError when need bytes exceed budget, else nil.
func CheckFit(need, budget int64, device string) error {
	if budget > 0 && need > budget {
		return FitError(need, budget, device)
	}
	return nil
}

// sizeClass rounds scratch sizes so that released buffers can be reused (the
// activation arena): powers of two from 16 KiB up to 1 MiB, whole MiB above
// (every layer asks for the same sizes again, so large buffers are reused
// exactly instead of wasting up to half of a power-of-two class).
func sizeClass(n int) int {
	if n > 1<<20 {
		return (n + 1<<20 - 1) &^ (1<<20 - 1)
	}
	c := 16 << 10
	for c < n {
		c <<= 1
	}
	return c
}
