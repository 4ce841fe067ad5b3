//go:build !linux && !darwin

package qwen3moe

// mapFloats returns n float32 on the Go heap where the platform has no
// anonymous mappings this package uses (see hostmem_mmap.go); unmap does
// nothing, the collector reclaims them.
func mapFloats(n int) (f []float32, bytes int64, unmap func()) {
	return make([]float32, n), hostBytes(n), func() {}
}
