// sum4_amd64.h: the horizontal sums of the AVX2 four-row dot kernels
// (dotf32_amd64.s, half_amd64.s, q8_0_amd64.s).

// HSUM reduces the eight floats of acc to the low float of xacc (acc's
// low half); the X register tmp is clobbered.
#define HSUM(acc, xacc, tmp) \
	VEXTRACTF128 $1, acc, tmp \
	VADDPS tmp, xacc, xacc \
	VMOVHLPS xacc, tmp, tmp \
	VADDPS tmp, xacc, xacc \
	VMOVSHDUP xacc, tmp \
	VADDSS tmp, xacc, xacc

// SUM4 stores the sums of the accumulators y0..y3 (low halves x0..x3) as
// four floats at off(DX); tmp is clobbered.
#define SUM4(y0, y1, y2, y3, x0, x1, x2, x3, off, tmp) \
	HSUM(y0, x0, tmp) \
	HSUM(y1, x1, tmp) \
	HSUM(y2, x2, tmp) \
	HSUM(y3, x3, tmp) \
	VMOVSS x0, off(DX) \
	VMOVSS x1, off+4(DX) \
	VMOVSS x2, off+8(DX) \
	VMOVSS x3, off+12(DX)

// STORE4 stores the sums of the four rows' accumulators Y8..Y11 as four
// floats at DX.
#define STORE4 \
	SUM4(Y8, Y9, Y10, Y11, X8, X9, X10, X11, 0, X2) \
	VZEROUPPER
