// sum4_amd64.h: the horizontal sums of the AVX2 four-row dot kernels
// (dotf32_amd64.s, half_amd64.s, q8_0_amd64.s).

// HSUM reduces the eight floats of acc to the low float of xacc (acc's
// low half; X2 is clobbered).
#define HSUM(acc, xacc) \
	VEXTRACTF128 $1, acc, X2 \
	VADDPS X2, xacc, xacc \
	VMOVHLPS xacc, X2, X2 \
	VADDPS X2, xacc, xacc \
	VMOVSHDUP xacc, X2 \
	VADDSS X2, xacc, xacc

// STORE4 stores the sums of the four rows' accumulators Y8..Y11 as four
// floats at DX.
#define STORE4 \
	HSUM(Y8, X8) \
	HSUM(Y9, X9) \
	HSUM(Y10, X10) \
	HSUM(Y11, X11) \
	VMOVSS X8, 0(DX) \
	VMOVSS X9, 4(DX) \
	VMOVSS X10, 8(DX) \
	VMOVSS X11, 12(DX) \
	VZEROUPPER
