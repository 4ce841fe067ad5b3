//go:build !purego

#include "textflag.h"

#define HSUM(acc, xacc) \
	VEXTRACTF128 $1, acc, X2 \
	VADDPS X2, xacc, xacc \
	VMOVHLPS xacc, X2, X2 \
	VADDPS X2, xacc, xacc \
	VMOVSHDUP xacc, X2 \
	VADDSS X2, xacc, xacc

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
