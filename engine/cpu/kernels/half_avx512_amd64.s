//go:build !purego

#include "textflag.h"

// The float-weight kernels on AVX-512 F (VCVTPH2PS on ZMM is part of
// AVX-512 F; VPMOVZXWD and VPSLLD on YMM16-31 need VL and BW): the AVX2
// kernels of half_amd64.s and dotf32_amd64.s with 16 values per ZMM
// register, plus a 4×4 tile. Weights are widened in registers exactly as
// there (bf16: zero-extend to 32 bits, shift into the high half; f16:
// VCVTPH2PS) and multiplied with float32 activations by VFMADD231PS, so
// the products are the same; only the order of the sums differs (16 lanes
// instead of 8, folded high half onto low half at the end).
//
// The callers pass n8, the number of 8-value groups. The loops take 16
// values (32 in the 4×1 kernels) at a time; a last group of 8 is loaded
// with YMM loads (VEX- or EVEX-encoded), which zero the high half of the
// ZMM register, so its high lanes add 0·0 to the full-width sums and no
// byte past 8·n8 values is read.

// ZSUMS reduces the 16 lanes of z to the low float of x (y, x: the same
// register), with the scratch register ys / xs: the high half onto the low
// half until one lane is left. ZSUM uses Y14 / X14.
#define ZSUMS(z, y, x, ys, xs) \
	VEXTRACTF64X4 $1, z, ys \
	VADDPS ys, y, y \
	VEXTRACTF32X4 $1, y, xs \
	VADDPS xs, x, x \
	VMOVHLPS x, xs, xs \
	VADDPS xs, x, x \
	VMOVSHDUP x, xs \
	VADDSS xs, x, x

#define ZSUM(z, y, x) ZSUMS(z, y, x, Y14, X14)

// Two weight rows × four activation rows. Registers: SI, R8 the weight
// rows, DI, R9, R10, R11 the activation rows, AX the weight offset in
// 2-byte units (bytes for f16/bf16, doubled for f32), R13 the activation
// byte offset, Z0-Z3 / Z4-Z7 the sums of weight row 0 / 1 with the four
// activation rows.

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
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	XORQ AX, AX \
	XORQ R13, R13

// FMA2x4 multiplies the widened weights in Z8 (row 0) and Z9 (row 1) with
// the activations (Z10-Z13) of the four rows.
#define FMA2x4 \
	VFMADD231PS Z8, Z10, Z0 \
	VFMADD231PS Z8, Z11, Z1 \
	VFMADD231PS Z8, Z12, Z2 \
	VFMADD231PS Z8, Z13, Z3 \
	VFMADD231PS Z9, Z10, Z4 \
	VFMADD231PS Z9, Z11, Z5 \
	VFMADD231PS Z9, Z12, Z6 \
	VFMADD231PS Z9, Z13, Z7

// ACT16 loads 16 activations of each row; ACT8 loads 8 (the high lanes
// zero).
#define ACT16 \
	VMOVUPS (DI)(R13*1), Z10 \
	VMOVUPS (R9)(R13*1), Z11 \
	VMOVUPS (R10)(R13*1), Z12 \
	VMOVUPS (R11)(R13*1), Z13

#define ACT8 \
	VMOVUPS (DI)(R13*1), Y10 \
	VMOVUPS (R9)(R13*1), Y11 \
	VMOVUPS (R10)(R13*1), Y12 \
	VMOVUPS (R11)(R13*1), Y13

#define STORE8 \
	ZSUM(Z0, Y0, X0) \
	ZSUM(Z1, Y1, X1) \
	ZSUM(Z2, Y2, X2) \
	ZSUM(Z3, Y3, X3) \
	VMOVSS X0, 0(DX) \
	VMOVSS X1, 4(DX) \
	VMOVSS X2, 8(DX) \
	VMOVSS X3, 12(DX) \
	ZSUM(Z4, Y4, X4) \
	ZSUM(Z5, Y5, X5) \
	ZSUM(Z6, Y6, X6) \
	ZSUM(Z7, Y7, X7) \
	VMOVSS X4, 16(DX) \
	VMOVSS X5, 20(DX) \
	VMOVSS X6, 24(DX) \
	VMOVSS X7, 28(DX) \
	VZEROUPPER

// Four weight rows × four activation rows. Registers: SI, R8, R9, R10 the
// weight rows, DI, R11, R12, BX the activation rows, AX the weight offset
// in 2-byte units, R13 the activation byte offset, Z16-Z19 the widened
// weights, Z20-Z23 the activations, Z0-Z15 the sums (4·row + act). Each
// sum sees the same values in the same order as in the 2×4 kernels, so
// the results are the same bits; per 16 values four weight vectors are
// widened and four activation vectors loaded for 16 multiply-adds (2×4:
// two and four for 8), half the activation traffic per multiply-add.

#define SETUP4x4 \
	MOVQ w+0(FP), SI \
	MOVQ stride+8(FP), BX \
	MOVQ x+16(FP), DI \
	MOVQ xstride+24(FP), DX \
	MOVQ n8+32(FP), CX \
	LEAQ (SI)(BX*1), R8 \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	LEAQ (DI)(DX*1), R11 \
	LEAQ (R11)(DX*1), R12 \
	LEAQ (R12)(DX*1), BX \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15 \
	XORQ AX, AX \
	XORQ R13, R13

// ACT4x16 loads 16 activations of each row, ACT4x8 8 (EVEX-encoded YMM
// loads also zero the high half).
#define ACT4x16 \
	VMOVUPS (DI)(R13*1), Z20 \
	VMOVUPS (R11)(R13*1), Z21 \
	VMOVUPS (R12)(R13*1), Z22 \
	VMOVUPS (BX)(R13*1), Z23

#define ACT4x8 \
	VMOVUPS (DI)(R13*1), Y20 \
	VMOVUPS (R11)(R13*1), Y21 \
	VMOVUPS (R12)(R13*1), Y22 \
	VMOVUPS (BX)(R13*1), Y23

// FMAROW multiplies the weights in zw with the four activation vectors
// into a0-a3.
#define FMAROW(zw, a0, a1, a2, a3) \
	VFMADD231PS zw, Z20, a0 \
	VFMADD231PS zw, Z21, a1 \
	VFMADD231PS zw, Z22, a2 \
	VFMADD231PS zw, Z23, a3

#define FMA4x4 \
	FMAROW(Z16, Z0, Z1, Z2, Z3) \
	FMAROW(Z17, Z4, Z5, Z6, Z7) \
	FMAROW(Z18, Z8, Z9, Z10, Z11) \
	FMAROW(Z19, Z12, Z13, Z14, Z15)

// W4 widens the weights of the four rows at the current offset with W
// (one of the 4×1 kernels' macros below, index 0) into Z16-Z19.
#define W4(W) \
	W(SI, 0, Z16) \
	W(R8, 0, Z17) \
	W(R9, 0, Z18) \
	W(R10, 0, Z19)

#define W4x8(W8) \
	W8(SI, Y16) \
	W8(R8, Y17) \
	W8(R9, Y18) \
	W8(R10, Y19)

#define ZSUM4(z, y, x) ZSUMS(z, y, x, Y24, X24)

#define STORE16 \
	MOVQ r+40(FP), DX \
	ZSUM4(Z0, Y0, X0) \
	ZSUM4(Z1, Y1, X1) \
	ZSUM4(Z2, Y2, X2) \
	ZSUM4(Z3, Y3, X3) \
	VMOVSS X0, 0(DX) \
	VMOVSS X1, 4(DX) \
	VMOVSS X2, 8(DX) \
	VMOVSS X3, 12(DX) \
	ZSUM4(Z4, Y4, X4) \
	ZSUM4(Z5, Y5, X5) \
	ZSUM4(Z6, Y6, X6) \
	ZSUM4(Z7, Y7, X7) \
	VMOVSS X4, 16(DX) \
	VMOVSS X5, 20(DX) \
	VMOVSS X6, 24(DX) \
	VMOVSS X7, 28(DX) \
	ZSUM4(Z8, Y8, X8) \
	ZSUM4(Z9, Y9, X9) \
	ZSUM4(Z10, Y10, X10) \
	ZSUM4(Z11, Y11, X11) \
	VMOVSS X8, 32(DX) \
	VMOVSS X9, 36(DX) \
	VMOVSS X10, 40(DX) \
	VMOVSS X11, 44(DX) \
	ZSUM4(Z12, Y12, X12) \
	ZSUM4(Z13, Y13, X13) \
	ZSUM4(Z14, Y14, X14) \
	ZSUM4(Z15, Y15, X15) \
	VMOVSS X12, 48(DX) \
	VMOVSS X13, 52(DX) \
	VMOVSS X14, 56(DX) \
	VMOVSS X15, 60(DX) \
	VZEROUPPER

// LOOP4x4 is the 4×4 kernel for the widening macros W and W8 of the 4×1
// kernels (for float32 rows they index by R13, the activations' offset).
#define LOOP4x4(W, W8) \
	SETUP4x4 \
	SHRQ $1, CX \
	JZ   l8 \
l16: \
	ACT4x16 \
	W4(W) \
	FMA4x4 \
	ADDQ $32, AX \
	ADDQ $64, R13 \
	DECQ CX \
	JNZ  l16 \
l8: \
	MOVQ  n8+32(FP), CX \
	TESTQ $1, CX \
	JZ    ldone \
	ACT4x8 \
	W4x8(W8) \
	FMA4x4 \
ldone: \
	STORE16 \
	RET

// Four weight rows × one activation row. Registers: SI, R8, R9, R10 the
// weight rows (BX bytes apart), DI the activations, AX the weight offset
// in 2-byte units, R11 the activation byte offset (also the weights' for
// float32 rows); Z16-Z19 and Z20-Z23 two sets of sums per weight row (the
// first and second 16 values of each 32; a last 16 goes to the first set,
// a last 8 to the second), added lane by lane at the end, so that eight
// FMA chains are in flight.

#define SETUP4x1 \
	MOVQ w+0(FP), SI \
	MOVQ x+16(FP), DI \
	MOVQ n8+24(FP), CX \
	MOVQ r+32(FP), DX \
	LEAQ (SI)(BX*1), R8 \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19 \
	VPXORD Z20, Z20, Z20 \
	VPXORD Z21, Z21, Z21 \
	VPXORD Z22, Z22, Z22 \
	VPXORD Z23, Z23, Z23 \
	XORQ AX, AX \
	XORQ R11, R11

// STORE4 adds the two sets of sums and stores the four results.
#define STORE4 \
	VADDPS Z20, Z16, Z8 \
	VADDPS Z21, Z17, Z9 \
	VADDPS Z22, Z18, Z10 \
	VADDPS Z23, Z19, Z11 \
	ZSUM(Z8, Y8, X8) \
	ZSUM(Z9, Y9, X9) \
	ZSUM(Z10, Y10, X10) \
	ZSUM(Z11, Y11, X11) \
	VMOVSS X8, 0(DX) \
	VMOVSS X9, 4(DX) \
	VMOVSS X10, 8(DX) \
	VMOVSS X11, 12(DX) \
	VZEROUPPER

// BF16W widens the 16 bf16 weights at 16-value index i of the row at reg
// into z; BF16W8 the 8 at index 0 into y (the high lanes zero). F16W,
// F16W8 and F32W, F32W8 are the same for fp16 and float32 rows.
#define BF16W(reg, i, z) \
	VPMOVZXWD (i*32)(reg)(AX*1), z \
	VPSLLD    $16, z, z

#define BF16W8(reg, y) \
	VPMOVZXWD (reg)(AX*1), y \
	VPSLLD    $16, y, y

#define F16W(reg, i, z) \
	VCVTPH2PS (i*32)(reg)(AX*1), z

#define F16W8(reg, y) \
	VCVTPH2PS (reg)(AX*1), y

#define F32W(reg, i, z) \
	VMOVUPS (i*64)(reg)(R11*1), z

#define F32W8(reg, y) \
	VMOVUPS (reg)(R11*1), y

// F32W4 and F32W48 are F32W and F32W8 for the 4×4 kernel (offset R13).
#define F32W4(reg, i, z) \
	VMOVUPS (i*64)(reg)(R13*1), z

#define F32W48(reg, y) \
	VMOVUPS (reg)(R13*1), y

// ROW4 multiplies the weights at 16-value index i of the four rows,
// widened by W, with the activations in zx into the sums a0-a3.
#define ROW4(W, i, zx, a0, a1, a2, a3) \
	W(SI, i, Z2) \
	VFMADD231PS Z2, zx, a0 \
	W(R8, i, Z3) \
	VFMADD231PS Z3, zx, a1 \
	W(R9, i, Z4) \
	VFMADD231PS Z4, zx, a2 \
	W(R10, i, Z5) \
	VFMADD231PS Z5, zx, a3

// LOOP4x1 is the 4×1 kernel for the widening macros W and W8 (labels are
// per function). It takes 32 values a loop, then 16 and 8 as n8 asks.
#define LOOP4x1(W, W8) \
	SETUP4x1 \
	SHRQ $2, CX \
	JZ   l16 \
l32: \
	VMOVUPS (DI)(R11*1), Z0 \
	VMOVUPS 64(DI)(R11*1), Z1 \
	ROW4(W, 0, Z0, Z16, Z17, Z18, Z19) \
	ROW4(W, 1, Z1, Z20, Z21, Z22, Z23) \
	ADDQ $64, AX \
	ADDQ $128, R11 \
	DECQ CX \
	JNZ  l32 \
l16: \
	MOVQ  n8+24(FP), CX \
	TESTQ $2, CX \
	JZ    l8 \
	VMOVUPS (DI)(R11*1), Z0 \
	ROW4(W, 0, Z0, Z16, Z17, Z18, Z19) \
	ADDQ $32, AX \
	ADDQ $64, R11 \
l8: \
	TESTQ $1, CX \
	JZ    ldone \
	VMOVUPS (DI)(R11*1), Y0 \
	W8(SI, Y2) \
	VFMADD231PS Z2, Z0, Z20 \
	W8(R8, Y3) \
	VFMADD231PS Z3, Z0, Z21 \
	W8(R9, Y4) \
	VFMADD231PS Z4, Z0, Z22 \
	W8(R10, Y5) \
	VFMADD231PS Z5, Z0, Z23 \
ldone: \
	STORE4 \
	RET

// func dotBF16x2x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)
// Dots the first 8·n8 values of two bf16 rows (stride bytes apart) with
// four float32 activation rows (xstride bytes apart): r[4·row+act].
TEXT ·dotBF16x2x4AVX512(SB), NOSPLIT, $0-48
	SETUP2x4
	SHRQ $1, CX
	JZ   bf2x4tail

bf2x4:
	VPMOVZXWD (SI)(AX*1), Z8
	VPSLLD    $16, Z8, Z8
	VPMOVZXWD (R8)(AX*1), Z9
	VPSLLD    $16, Z9, Z9
	ACT16
	FMA2x4
	ADDQ $32, AX
	ADDQ $64, R13
	DECQ CX
	JNZ  bf2x4

bf2x4tail:
	MOVQ  n8+32(FP), CX
	TESTQ $1, CX
	JZ    bf2x4done
	VPMOVZXWD (SI)(AX*1), Y8
	VPSLLD    $16, Y8, Y8
	VPMOVZXWD (R8)(AX*1), Y9
	VPSLLD    $16, Y9, Y9
	ACT8
	FMA2x4

bf2x4done:
	STORE8
	RET

// func dotF16x2x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)
// The same for fp16 rows.
TEXT ·dotF16x2x4AVX512(SB), NOSPLIT, $0-48
	SETUP2x4
	SHRQ $1, CX
	JZ   h2x4tail

h2x4:
	VCVTPH2PS (SI)(AX*1), Z8
	VCVTPH2PS (R8)(AX*1), Z9
	ACT16
	FMA2x4
	ADDQ $32, AX
	ADDQ $64, R13
	DECQ CX
	JNZ  h2x4

h2x4tail:
	MOVQ  n8+32(FP), CX
	TESTQ $1, CX
	JZ    h2x4done
	VCVTPH2PS (SI)(AX*1), Y8
	VCVTPH2PS (R8)(AX*1), Y9
	ACT8
	FMA2x4

h2x4done:
	STORE8
	RET

// func dotF32x2x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)
// The same for float32 rows.
TEXT ·dotF32x2x4AVX512(SB), NOSPLIT, $0-48
	SETUP2x4
	SHRQ $1, CX
	JZ   f2x4tail

f2x4:
	VMOVUPS (SI)(AX*2), Z8
	VMOVUPS (R8)(AX*2), Z9
	ACT16
	FMA2x4
	ADDQ $32, AX
	ADDQ $64, R13
	DECQ CX
	JNZ  f2x4

f2x4tail:
	MOVQ  n8+32(FP), CX
	TESTQ $1, CX
	JZ    f2x4done
	VMOVUPS (SI)(AX*2), Y8
	VMOVUPS (R8)(AX*2), Y9
	ACT8
	FMA2x4

f2x4done:
	STORE8
	RET

// func dotBF16x4x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[16]float32)
// Dots the first 8·n8 values of four bf16 rows (stride bytes apart) with
// four float32 activation rows (xstride bytes apart): r[4·row+act].
TEXT ·dotBF16x4x4AVX512(SB), NOSPLIT, $0-48
	LOOP4x4(BF16W, BF16W8)

// func dotF16x4x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[16]float32)
// The same for fp16 rows.
TEXT ·dotF16x4x4AVX512(SB), NOSPLIT, $0-48
	LOOP4x4(F16W, F16W8)

// func dotF32x4x4AVX512(w *byte, stride int, x *float32, xstride int, n8 int, r *[16]float32)
// The same for float32 rows.
TEXT ·dotF32x4x4AVX512(SB), NOSPLIT, $0-48
	LOOP4x4(F32W4, F32W48)

// func dotBF16x4AVX512(w *byte, stride int, x *float32, n8 int, r *[4]float32)
// Dots the first 8·n8 values of four bf16 rows (stride bytes apart) with
// float32 activations.
TEXT ·dotBF16x4AVX512(SB), NOSPLIT, $0-40
	MOVQ stride+8(FP), BX
	LOOP4x1(BF16W, BF16W8)

// func dotF16x4AVX512(w *byte, stride int, x *float32, n8 int, r *[4]float32)
// The same for fp16 rows.
TEXT ·dotF16x4AVX512(SB), NOSPLIT, $0-40
	MOVQ stride+8(FP), BX
	LOOP4x1(F16W, F16W8)

// func dotF32x4AVX512(w *float32, k int, x *float32, n8 int, r *[4]float32)
// Dots the first 8·n8 values of four float32 rows (k values apart) with x.
TEXT ·dotF32x4AVX512(SB), NOSPLIT, $0-40
	MOVQ k+8(FP), BX
	SHLQ $2, BX
	LOOP4x1(F32W, F32W8)

// Widening: 16 values a loop, then 8 if n8 is odd.

// func widenBF16AVX512(dst *float32, src *byte, n8 int)
// Widens 8·n8 bf16 values to float32.
TEXT ·widenBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	SHRQ $1, CX
	JZ   wbf8

wbf16:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  wbf16

wbf8:
	MOVQ  n8+16(FP), CX
	TESTQ $1, CX
	JZ    wbfdone
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)

wbfdone:
	VZEROUPPER
	RET

// func widenF16AVX512(dst *float32, src *byte, n8 int)
// Widens 8·n8 fp16 values to float32.
TEXT ·widenF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	SHRQ $1, CX
	JZ   wf16x8

wf16x16:
	VCVTPH2PS (SI), Z0
	VMOVUPS   Z0, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  wf16x16

wf16x8:
	MOVQ  n8+16(FP), CX
	TESTQ $1, CX
	JZ    wf16done
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)

wf16done:
	VZEROUPPER
	RET

// func widenF32AVX512(dst *float32, src *byte, n8 int)
// Copies 8·n8 little-endian float32 values.
TEXT ·widenF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	SHRQ $1, CX
	JZ   wf32x8

wf32x16:
	VMOVUPS (SI), Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  wf32x16

wf32x8:
	MOVQ  n8+16(FP), CX
	TESTQ $1, CX
	JZ    wf32done
	VMOVUPS (SI), Y0
	VMOVUPS Y0, (DI)

wf32done:
	VZEROUPPER
	RET
