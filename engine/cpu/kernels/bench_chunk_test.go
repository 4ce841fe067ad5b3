package kernels

import (
	"fmt"
	"testing"

	"github.com/clefrt/clef/quant"
)

// BenchmarkGEMMChunk16 calls GEMM as engine/cpu's worker pool does: 16
// weight rows per call, so per-call work (scale records, activation scales)
// weighs more than in BenchmarkGEMM.
func BenchmarkGEMMChunk16(b *testing.B) {
	const n, k = 768, 2048
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q8_0, quant.BF16, quant.F32} {
		for _, m := range []int{8, 32} {
			b.Run(fmt.Sprintf("%v/m=%d", typ, m), func(b *testing.B) {
				w, x, _, _ := operands(b, typ, n, m, k, 1)
				wRow, _ := quant.RowBytes(typ, k)
				out := make([]float32, m*n)
				c0 := cpuTime()
				for b.Loop() {
					for j := 0; j < n; j += 16 {
						GEMM(typ, w[j*wRow:], 16, k, x, m, out[j:], n)
					}
				}
				flops := 2 * float64(m*n*k) * float64(b.N)
				b.ReportMetric(flops/(cpuTime()-c0).Seconds()/1e9, "GFLOP/cpu-s")
			})
		}
	}
}
