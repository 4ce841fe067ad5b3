//go:build arm64 && !purego

#include "textflag.h"

// func dot4NEON(x, w *float32, stride, n int, acc *[32]float32)
// acc[8j+l] holds lane l of two 4-lane partial sums of Σ x[i]·w[j*stride+i]
// for row j < 4 (lanes 0-3 even blocks, 4-7 odd blocks); n is a multiple
// of 8. The caller adds the lanes.
TEXT ·dot4NEON(SB), NOSPLIT, $0-40
	MOVD x+0(FP), R0
	MOVD w+8(FP), R1
	MOVD stride+16(FP), R2
	LSL  $2, R2, R2
	MOVD n+24(FP), R3
	MOVD acc+32(FP), R4
	ADD  R2, R1, R5
	ADD  R2, R5, R6
	ADD  R2, R6, R7
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	LSR  $3, R3, R3
	CBZ  R3, done4

loop4:
	VLD1.P 32(R0), [V0.S4, V1.S4]
	VLD1.P 32(R1), [V2.S4, V3.S4]
	VLD1.P 32(R5), [V4.S4, V5.S4]
	VLD1.P 32(R6), [V6.S4, V7.S4]
	VLD1.P 32(R7), [V8.S4, V9.S4]
	VFMLA  V0.S4, V2.S4, V16.S4
	VFMLA  V1.S4, V3.S4, V17.S4
	VFMLA  V0.S4, V4.S4, V18.S4
	VFMLA  V1.S4, V5.S4, V19.S4
	VFMLA  V0.S4, V6.S4, V20.S4
	VFMLA  V1.S4, V7.S4, V21.S4
	VFMLA  V0.S4, V8.S4, V22.S4
	VFMLA  V1.S4, V9.S4, V23.S4
	SUBS   $1, R3, R3
	BNE    loop4

done4:
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R4)
	VST1   [V20.S4, V21.S4, V22.S4, V23.S4], (R4)
	RET

// func dot2x4NEON(x *float32, ldx int, w *float32, stride, n int, acc *[32]float32)
// acc[4(i*4+j)+l] holds lane l of Σ x[i*ldx+t]·w[j*stride+t] for i < 2,
// j < 4; n is a multiple of 4. The caller adds the lanes.
TEXT ·dot2x4NEON(SB), NOSPLIT, $0-48
	MOVD x+0(FP), R0
	MOVD ldx+8(FP), R8
	LSL  $2, R8, R8
	MOVD w+16(FP), R1
	MOVD stride+24(FP), R2
	LSL  $2, R2, R2
	MOVD n+32(FP), R3
	MOVD acc+40(FP), R4
	ADD  R8, R0, R9
	ADD  R2, R1, R5
	ADD  R2, R5, R6
	ADD  R2, R6, R7
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16
	VEOR V20.B16, V20.B16, V20.B16
	VEOR V21.B16, V21.B16, V21.B16
	VEOR V22.B16, V22.B16, V22.B16
	VEOR V23.B16, V23.B16, V23.B16
	LSR  $2, R3, R3
	CBZ  R3, done24

loop24:
	VLD1.P 16(R0), [V0.S4]
	VLD1.P 16(R9), [V1.S4]
	VLD1.P 16(R1), [V2.S4]
	VLD1.P 16(R5), [V3.S4]
	VLD1.P 16(R6), [V4.S4]
	VLD1.P 16(R7), [V5.S4]
	VFMLA  V0.S4, V2.S4, V16.S4
	VFMLA  V0.S4, V3.S4, V17.S4
	VFMLA  V0.S4, V4.S4, V18.S4
	VFMLA  V0.S4, V5.S4, V19.S4
	VFMLA  V1.S4, V2.S4, V20.S4
	VFMLA  V1.S4, V3.S4, V21.S4
	VFMLA  V1.S4, V4.S4, V22.S4
	VFMLA  V1.S4, V5.S4, V23.S4
	SUBS   $1, R3, R3
	BNE    loop24

done24:
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R4)
	VST1   [V20.S4, V21.S4, V22.S4, V23.S4], (R4)
	RET

// func axpyNEON(y, x *float32, n int, a float32)
// y[i] += a·x[i] for i < n; n is a multiple of 8.
TEXT ·axpyNEON(SB), NOSPLIT, $0-28
	MOVD  y+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  n+16(FP), R3
	MOVD  $a+24(FP), R2
	VLD1R (R2), [V1.S4]
	LSR   $3, R3, R3
	CBZ   R3, doneaxpy

loopaxpy:
	VLD1   (R0), [V2.S4, V3.S4]
	VLD1.P 32(R1), [V4.S4, V5.S4]
	VFMLA  V4.S4, V1.S4, V2.S4
	VFMLA  V5.S4, V1.S4, V3.S4
	VST1.P [V2.S4, V3.S4], 32(R0)
	SUBS   $1, R3, R3
	BNE    loopaxpy

doneaxpy:
	RET

// func axpy4NEON(y, x *float32, stride, n int, p *[4]float32)
// y[i] += p[0]·x[i] + p[1]·x[stride+i] + p[2]·x[2·stride+i] + p[3]·x[3·stride+i]
// for i < n, fused in that order; n is a multiple of 8.
TEXT ·axpy4NEON(SB), NOSPLIT, $0-40
	MOVD  y+0(FP), R0
	MOVD  x+8(FP), R1
	MOVD  stride+16(FP), R2
	LSL   $2, R2, R2
	MOVD  n+24(FP), R3
	MOVD  p+32(FP), R4
	VLD1R (R4), [V0.S4]
	ADD   $4, R4
	VLD1R (R4), [V1.S4]
	ADD   $4, R4
	VLD1R (R4), [V2.S4]
	ADD   $4, R4
	VLD1R (R4), [V3.S4]
	ADD   R2, R1, R5
	ADD   R2, R5, R6
	ADD   R2, R6, R7
	LSR   $3, R3, R3
	CBZ   R3, doneaxpy4

loopaxpy4:
	VLD1   (R0), [V4.S4, V5.S4]
	VLD1.P 32(R1), [V6.S4, V7.S4]
	VFMLA  V6.S4, V0.S4, V4.S4
	VFMLA  V7.S4, V0.S4, V5.S4
	VLD1.P 32(R5), [V6.S4, V7.S4]
	VFMLA  V6.S4, V1.S4, V4.S4
	VFMLA  V7.S4, V1.S4, V5.S4
	VLD1.P 32(R6), [V6.S4, V7.S4]
	VFMLA  V6.S4, V2.S4, V4.S4
	VFMLA  V7.S4, V2.S4, V5.S4
	VLD1.P 32(R7), [V6.S4, V7.S4]
	VFMLA  V6.S4, V3.S4, V4.S4
	VFMLA  V7.S4, V3.S4, V5.S4
	VST1.P [V4.S4, V5.S4], 32(R0)
	SUBS   $1, R3, R3
	BNE    loopaxpy4

doneaxpy4:
	RET
