//go:build !purego

#include "textflag.h"
#include "sum4_amd64.h"

#define SETUP \
	MOVQ w+0(FP), SI \
	MOVQ stride+8(FP), BX \
	MOVQ x+16(FP), DI \
	MOVQ n8+24(FP), CX \
	MOVQ r+32(FP), DX \
	LEAQ (SI)(BX*1), R8 \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
	XORQ AX, AX \
	XORQ R11, R11

// BF16ROW widens 8 bf16 weights (zero-extend, shift into the high half)
// and accumulates their products with the activations in Y0.
#define BF16ROW(reg, acc) \
	VPMOVZXWD (reg)(AX*1), Y1 \
	VPSLLD $16, Y1, Y1 \
	VFMADD231PS Y1, Y0, acc

// F16ROW converts 8 fp16 weights (F16C) and accumulates likewise.
#define F16ROW(reg, acc) \
	VCVTPH2PS (reg)(AX*1), Y1 \
	VFMADD231PS Y1, Y0, acc

// Two weight rows × four activation rows: the widened weights are used
// four times, the activations twice, all from registers.

#define SETUP2x4 \
	MOVQ w+0(FP), SI \
	MOVQ stride+8(FP), BX \
	MOVQ x+16(FP), DI \
	MOVQ xstride+24(FP), R12 \
	MOVQ n8+32(FP), CX \
	MOVQ r+40(FP), DX \
	LEAQ (SI)(BX*1), R8 \
	LEAQ (DI)(R12*1), R9 \
	LEAQ (R9)(R12*1), R10 \
	LEAQ (R10)(R12*1), R11 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	XORQ AX, AX \
	XORQ R13, R13

// FMA2x4 multiplies the weights in Y8 (row 0) and Y9 (row 1) with the
// activations at R13 of the four rows.
#define FMA2x4 \
	VMOVUPS (DI)(R13*1), Y10 \
	VMOVUPS (R9)(R13*1), Y11 \
	VMOVUPS (R10)(R13*1), Y12 \
	VMOVUPS (R11)(R13*1), Y13 \
	VFMADD231PS Y8, Y10, Y0 \
	VFMADD231PS Y8, Y11, Y1 \
	VFMADD231PS Y8, Y12, Y2 \
	VFMADD231PS Y8, Y13, Y3 \
	VFMADD231PS Y9, Y10, Y4 \
	VFMADD231PS Y9, Y11, Y5 \
	VFMADD231PS Y9, Y12, Y6 \
	VFMADD231PS Y9, Y13, Y7 \
	ADDQ $32, R13

#define STORE8 \
	SUM4(Y0, Y1, Y2, Y3, X0, X1, X2, X3, 0, X14) \
	SUM4(Y4, Y5, Y6, Y7, X4, X5, X6, X7, 16, X14) \
	VZEROUPPER

// func dotBF16x4AVX2(w *byte, stride int, x *float32, n8 int, r *[4]float32)
// Dots the first 8·n8 values of four bf16 rows (stride bytes apart) with
// float32 activations.
TEXT ·dotBF16x4AVX2(SB), NOSPLIT, $0-40
	SETUP

bfloop:
	VMOVUPS (DI)(R11*1), Y0
	BF16ROW(SI, Y8)
	BF16ROW(R8, Y9)
	BF16ROW(R9, Y10)
	BF16ROW(R10, Y11)
	ADDQ $16, AX
	ADDQ $32, R11
	DECQ CX
	JNZ bfloop
	STORE4
	RET

// func dotF16x4AVX2(w *byte, stride int, x *float32, n8 int, r *[4]float32)
// The same for fp16 rows.
TEXT ·dotF16x4AVX2(SB), NOSPLIT, $0-40
	SETUP

hloop:
	VMOVUPS (DI)(R11*1), Y0
	F16ROW(SI, Y8)
	F16ROW(R8, Y9)
	F16ROW(R9, Y10)
	F16ROW(R10, Y11)
	ADDQ $16, AX
	ADDQ $32, R11
	DECQ CX
	JNZ hloop
	STORE4
	RET

// func dotBF16x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)
// Dots the first 8·n8 values of two bf16 rows (stride bytes apart) with
// four float32 activation rows (xstride bytes apart): r[4·row+act].
TEXT ·dotBF16x2x4AVX2(SB), NOSPLIT, $0-48
	SETUP2x4

bf2x4:
	VPMOVZXWD (SI)(AX*1), Y8
	VPSLLD $16, Y8, Y8
	VPMOVZXWD (R8)(AX*1), Y9
	VPSLLD $16, Y9, Y9
	FMA2x4
	ADDQ $16, AX
	DECQ CX
	JNZ bf2x4
	STORE8
	RET

// func dotF16x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)
// The same for fp16 rows.
TEXT ·dotF16x2x4AVX2(SB), NOSPLIT, $0-48
	SETUP2x4

h2x4:
	VCVTPH2PS (SI)(AX*1), Y8
	VCVTPH2PS (R8)(AX*1), Y9
	FMA2x4
	ADDQ $16, AX
	DECQ CX
	JNZ h2x4
	STORE8
	RET

// func dotF32x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)
// The same for float32 rows.
TEXT ·dotF32x2x4AVX2(SB), NOSPLIT, $0-48
	SETUP2x4

f2x4:
	VMOVUPS (SI)(AX*2), Y8
	VMOVUPS (R8)(AX*2), Y9
	FMA2x4
	ADDQ $16, AX
	DECQ CX
	JNZ f2x4
	STORE8
	RET

// func widenBF16AVX2(dst *float32, src *byte, n8 int)
// Widens 8·n8 bf16 values to float32.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX

wbf:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ wbf
	VZEROUPPER
	RET

// func widenF16AVX2(dst *float32, src *byte, n8 int)
// Widens 8·n8 fp16 values to float32.
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX

wf16:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ wf16
	VZEROUPPER
	RET

// func widenF32AVX2(dst *float32, src *byte, n8 int)
// Copies 8·n8 little-endian float32 values.
TEXT ·widenF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX

wf32:
	VMOVUPS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ wf32
	VZEROUPPER
	RET
