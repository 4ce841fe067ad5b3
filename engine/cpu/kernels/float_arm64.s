//go:build !purego

#include "textflag.h"

// NEON float GEMM kernels: two weight rows × four float32 activation rows,
// 8 values per step, four partial sums per (row, activation) pair.
// FCVTL/FCVTL2 (fp16 widening) are emitted as WORDs, with the instruction
// they encode in a comment.

#define SETUP \
	MOVD w+0(FP), R0 \
	MOVD stride+8(FP), R1 \
	ADD R0, R1, R1 \
	MOVD x+16(FP), R4 \
	MOVD xstride+24(FP), R9 \
	ADD R4, R9, R5 \
	ADD R5, R9, R6 \
	ADD R6, R9, R7 \
	MOVD n8+32(FP), R3 \
	MOVD r+40(FP), R8 \
	VEOR V16.B16, V16.B16, V16.B16 \
	VEOR V17.B16, V17.B16, V17.B16 \
	VEOR V18.B16, V18.B16, V18.B16 \
	VEOR V19.B16, V19.B16, V19.B16 \
	VEOR V20.B16, V20.B16, V20.B16 \
	VEOR V21.B16, V21.B16, V21.B16 \
	VEOR V22.B16, V22.B16, V22.B16 \
	VEOR V23.B16, V23.B16, V23.B16 \
	VEOR V31.B16, V31.B16, V31.B16

// FMA8 multiplies the widened weights (row 0 in V1, V2; row 1 in V4, V5)
// with 8 values of each activation row.
#define FMA8 \
	VLD1.P 32(R4), [V6.S4, V7.S4] \
	VLD1.P 32(R5), [V8.S4, V9.S4] \
	VLD1.P 32(R6), [V10.S4, V11.S4] \
	VLD1.P 32(R7), [V12.S4, V13.S4] \
	VFMLA V1.S4, V6.S4, V16.S4 \
	VFMLA V2.S4, V7.S4, V16.S4 \
	VFMLA V1.S4, V8.S4, V17.S4 \
	VFMLA V2.S4, V9.S4, V17.S4 \
	VFMLA V1.S4, V10.S4, V18.S4 \
	VFMLA V2.S4, V11.S4, V18.S4 \
	VFMLA V1.S4, V12.S4, V19.S4 \
	VFMLA V2.S4, V13.S4, V19.S4 \
	VFMLA V4.S4, V6.S4, V20.S4 \
	VFMLA V5.S4, V7.S4, V20.S4 \
	VFMLA V4.S4, V8.S4, V21.S4 \
	VFMLA V5.S4, V9.S4, V21.S4 \
	VFMLA V4.S4, V10.S4, V22.S4 \
	VFMLA V5.S4, V11.S4, V22.S4 \
	VFMLA V4.S4, V12.S4, V23.S4 \
	VFMLA V5.S4, V13.S4, V23.S4 \
	SUB $1, R3, R3

#define STORE \
	VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R8) \
	VST1 [V20.S4, V21.S4, V22.S4, V23.S4], (R8)

// func dotF32x2x4NEON(w *byte, stride int, x *float32, xstride int, n8 int, r *[32]float32)
// Dots the first 8·n8 values of two float32 rows (stride bytes apart) with
// four float32 activation rows (xstride bytes apart): r[4·(4·row+act):]
// receives four partial sums.
TEXT ·dotF32x2x4NEON(SB), NOSPLIT, $0-48
	SETUP

f32loop:
	VLD1.P 32(R0), [V1.S4, V2.S4]
	VLD1.P 32(R1), [V4.S4, V5.S4]
	FMA8
	CBNZ R3, f32loop
	STORE
	RET

// func dotBF16x2x4NEON(w *byte, stride int, x *float32, xstride int, n8 int, r *[32]float32)
// The same for bf16 rows: interleaving zeros below each value widens it.
TEXT ·dotBF16x2x4NEON(SB), NOSPLIT, $0-48
	SETUP

bf16loop:
	VLD1.P 16(R0), [V0.H8]
	VZIP1 V0.H8, V31.H8, V1.H8
	VZIP2 V0.H8, V31.H8, V2.H8
	VLD1.P 16(R1), [V3.H8]
	VZIP1 V3.H8, V31.H8, V4.H8
	VZIP2 V3.H8, V31.H8, V5.H8
	FMA8
	CBNZ R3, bf16loop
	STORE
	RET

// func dotF16x2x4NEON(w *byte, stride int, x *float32, xstride int, n8 int, r *[32]float32)
// The same for fp16 rows.
TEXT ·dotF16x2x4NEON(SB), NOSPLIT, $0-48
	SETUP

f16loop:
	VLD1.P 16(R0), [V0.H8]
	WORD $0x0E217801 // FCVTL V1.4S, V0.4H
	WORD $0x4E217802 // FCVTL2 V2.4S, V0.8H
	VLD1.P 16(R1), [V3.H8]
	WORD $0x0E217864 // FCVTL V4.4S, V3.4H
	WORD $0x4E217865 // FCVTL2 V5.4S, V3.8H
	FMA8
	CBNZ R3, f16loop
	STORE
	RET
