//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2+FMA+F16C kernels.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// accelerated names the fast kernels in use.
var accelerated = map[bool]string{true: "avx2", false: "generic"}[useAVX2]

//go:noescape
func dotQ8_0x4AVX2(w *byte, stride int, x *byte, nb int, r *[4]float32)

func dotQ8_0x4(w []byte, stride int, x []byte, nb int, r *[4]float32) {
	if !useAVX2 || nb == 0 {
		dotQ8_0x4Generic(w, stride, x, nb, r)
		return
	}
	_ = w[3*stride+34*nb-1]
	_ = x[34*nb-1]
	dotQ8_0x4AVX2(&w[0], stride, &x[0], nb, r)
}

//go:noescape
func kDot4AVX2(tile *byte, rowStride int, x *byte, nb int, r *[4]float32)

func kDot4(tile []byte, nb int, x []byte, r *[4]float32) {
	if !useAVX2 || nb == 0 {
		kDot4Generic(tile, nb, x, r)
		return
	}
	_ = tile[4*nb*kRec-1]
	_ = x[292*nb-1]
	kDot4AVX2(&tile[0], nb*kRec, &x[0], nb, r)
}
