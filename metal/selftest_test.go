package metal

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
)

// TestThroughputReport runs the timed part of SelfTest on the CPU backend at
// a small size: the report must cover every format with both kernels.
func TestThroughputReport(t *testing.T) {
	var out bytes.Buffer
	b := cpu.New(backend.Options{Threads: 1})
	if err := throughput(context.Background(), &out, b, "Apple M4 Max", 64, 256); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"peak of M4 Max", "mul_mv q4_K", "mul_mm q4_K", "mul_mm f16", "GB/s", "TFLOP/s", "% of peak"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
