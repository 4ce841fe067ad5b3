//go:build linux || darwin

package qwen3moe

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapFloats returns n float32 of zeroed anonymous memory mapped outside
// the Go heap (bytes long, a whole number of pages) and the function that
// unmaps it. The collector neither scans it nor counts it toward its heap
// goal, so a prefix cache of B bytes costs B bytes of resident memory,
// not the up to 2B that the same bytes on the heap cost at GOGC=100.
//
// When the kernel refuses the mapping (out of mappings, vm.max_map_count,
// or of address space) the floats come from the Go heap instead.
func mapFloats(n int) (f []float32, bytes int64, unmap func()) {
	size := hostBytes(n)
	if size == 0 {
		return nil, 0, func() {}
	}
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		// Out of mappings (vm.max_map_count) or address space: the Go heap
		// still holds it, at the collector's cost.
		return make([]float32, n), size, func() {}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), size, func() { unix.Munmap(b) }
}
