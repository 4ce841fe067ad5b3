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
func kSumsAVX2(q *int8, sc *int16, x *byte, nb int, sums *int32)

func kSums(r *kRow, x []byte) {
	nb := len(r.sums)
	if !useAVX2 || nb == 0 {
		kSumsGeneric(r, x)
		return
	}
	_ = x[292*nb-1]
	kSumsAVX2(&r.q[0], &r.sc[0], &x[0], nb, &r.sums[0])
}
