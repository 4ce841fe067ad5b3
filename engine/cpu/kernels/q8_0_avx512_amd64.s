//go:build !purego

#include "textflag.h"

// The q8_0 × q8_0 kernels on AVX-512 VNNI: two q8_0 blocks (64 codes) per
// ZMM register, VPDPBUSD for the integer dot products.
//
// VPDPBUSD multiplies unsigned bytes by signed bytes. The activation codes
// are made unsigned by adding 128 (XOR 0x80, exact for every int8, -128
// included) and the excess 128·Σw is taken off through the accumulator's
// starting value: each int32 lane starts at -128·(sum of the four weight
// codes it covers), computed once per weight block (VPDPBUSD of 0x80 bytes
// against the weights) and shared by every activation row. Every product
// (0..255 × -128..127) and every lane sum is exact whatever the codes, so
// weight code -128 against activation codes ±127 (or -128) needs no care.
// Lanes 0-7 hold the first block and lanes 8-15 the second; each lane is
// converted to float32 and multiplied by its block's d_w·d_x, and the
// lanes are summed once at the end.

// Lane index for VPERMPS: lanes 0-7 take float 0, lanes 8-15 float 1.
DATA q8halves<>+0(SB)/8, $0
DATA q8halves<>+8(SB)/8, $0
DATA q8halves<>+16(SB)/8, $0
DATA q8halves<>+24(SB)/8, $0
DATA q8halves<>+32(SB)/8, $0x0000000100000001
DATA q8halves<>+40(SB)/8, $0x0000000100000001
DATA q8halves<>+48(SB)/8, $0x0000000100000001
DATA q8halves<>+56(SB)/8, $0x0000000100000001
GLOBL q8halves<>(SB), RODATA|NOPTR, $64

// Register conventions: Z31 = 0x80 bytes, Z30 = q8halves, Z29 = zero.
#define CONSTS \
	MOVL $0x80, AX \
	VPBROADCASTB AX, Z31 \
	VPXORD Z29, Z29, Z29 \
	VMOVDQU32 q8halves<>(SB), Z30

// WCORR sets zn to -128·Σ4 w per lane of the weight codes in zw.
#define WCORR(zw, zn) \
	VPXORD zn, zn, zn \
	VPDPBUSD zw, Z31, zn \
	VPSUBD zn, Z29, zn

// W2 loads two blocks of the weight row at reg: codes in zw, lane
// corrections in zn, the two scales over the lane halves in zd.
#define W2(reg, yw, zw, zn, xd, zd) \
	VMOVDQU 2(reg), yw \
	VINSERTI64X4 $1, 36(reg), zw, zw \
	WCORR(zw, zn) \
	VMOVD (reg), xd \
	VPINSRW $1, 34(reg), xd, xd \
	VCVTPH2PS xd, xd \
	VPERMPS zd, Z30, zd

// W1 loads the last (odd) block of the weight row at reg: codes in the
// low half of zw, zero in the high half (whose lanes so add zero).
#define W1(reg, yw, zw, zn, xd, zd) \
	VMOVDQU 2(reg), yw \
	WCORR(zw, zn) \
	MOVWLZX (reg), AX \
	VMOVD AX, xd \
	VCVTPH2PS xd, xd \
	VBROADCASTSS xd, zd

// PAIR accumulates weight blocks (zw, zn, zd) times activation blocks
// (codes + 128 in zx, scales in zs) into acc.
#define PAIR(zw, zn, zd, zx, zs, zt, za, acc) \
	VMULPS zd, zs, zt \
	VMOVDQA64 zn, za \
	VPDPBUSD zw, zx, za \
	VCVTDQ2PS za, za \
	VFMADD231PS zt, za, acc

// HSUMZ reduces the 16 lanes of z to the low float of x (y, x: the same
// register); Y28 and X13 are scratch.
#define HSUMZ(z, y, x) \
	VEXTRACTF64X4 $1, z, Y28 \
	VADDPS Y28, y, y \
	VEXTRACTF128 $1, y, X13 \
	VADDPS X13, x, x \
	VMOVHLPS x, X13, X13 \
	VADDPS X13, x, x \
	VMOVSHDUP x, X13 \
	VADDSS X13, x, x

// XS2 loads two activation blocks at reg (codes + 128 in Z14) with their
// float32 scales at xs (spread over the halves in Z15).
#define XS2(reg, xs) \
	VMOVDQU 2(reg), Y14 \
	VINSERTI64X4 $1, 36(reg), Z14, Z14 \
	VPXORD Z31, Z14, Z14 \
	VMOVQ (xs), X15 \
	VPERMPS Z15, Z30, Z15

// XS1 loads the last (odd) activation block: the high half's codes are
// 0 + 128, against zero weights.
#define XS1(reg, xs) \
	VMOVDQU 2(reg), Y14 \
	VPXORD Z31, Z14, Z14 \
	VBROADCASTSS (xs), Z15

// STEP2x4 runs one step (W: W2 or W1, X: XS2 or XS1) of the 2×4 kernel.
#define STEP2x4(W, X) \
	W(SI, Y8, Z8, Z10, X12, Z12) \
	W(R8, Y9, Z9, Z11, X13, Z13) \
	X(DI, R12) \
	PAIR(Z8, Z10, Z12, Z14, Z15, Z16, Z17, Z0) \
	PAIR(Z9, Z11, Z13, Z14, Z15, Z18, Z19, Z4) \
	X(R9, R13) \
	PAIR(Z8, Z10, Z12, Z14, Z15, Z20, Z21, Z1) \
	PAIR(Z9, Z11, Z13, Z14, Z15, Z22, Z23, Z5) \
	X(R10, R14) \
	PAIR(Z8, Z10, Z12, Z14, Z15, Z16, Z17, Z2) \
	PAIR(Z9, Z11, Z13, Z14, Z15, Z18, Z19, Z6) \
	X(R11, BX) \
	PAIR(Z8, Z10, Z12, Z14, Z15, Z20, Z21, Z3) \
	PAIR(Z9, Z11, Z13, Z14, Z15, Z22, Z23, Z7)

// func dotQ8_0x2x4AVX512(w *byte, stride int, x *byte, xstride int, xd *float32, nb int, r *[8]float32)
// Two q8_0 weight rows (stride bytes apart) against four q8_0 activation
// rows (xstride bytes apart) whose block scales are given as float32 in xd
// (nb per row): r[4·row+act]. nb >= 1.
TEXT ·dotQ8_0x2x4AVX512(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), AX
	LEAQ (SI)(AX*1), R8
	MOVQ x+16(FP), DI
	MOVQ xstride+24(FP), AX
	LEAQ (DI)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ xd+32(FP), R12
	MOVQ nb+40(FP), CX
	LEAQ (R12)(CX*4), R13
	LEAQ (R13)(CX*4), R14
	LEAQ (R14)(CX*4), BX
	MOVQ CX, DX
	CONSTS
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	SHRQ $1, CX
	JZ tail2x4

loop2x4:
	STEP2x4(W2, XS2)
	ADDQ $68, SI
	ADDQ $68, R8
	ADDQ $68, DI
	ADDQ $68, R9
	ADDQ $68, R10
	ADDQ $68, R11
	ADDQ $8, R12
	ADDQ $8, R13
	ADDQ $8, R14
	ADDQ $8, BX
	DECQ CX
	JNZ loop2x4

tail2x4:
	TESTQ $1, DX
	JZ done2x4
	STEP2x4(W1, XS1)

done2x4:
	MOVQ r+48(FP), DX
	HSUMZ(Z0, Y0, X0)
	HSUMZ(Z1, Y1, X1)
	HSUMZ(Z2, Y2, X2)
	HSUMZ(Z3, Y3, X3)
	HSUMZ(Z4, Y4, X4)
	HSUMZ(Z5, Y5, X5)
	HSUMZ(Z6, Y6, X6)
	HSUMZ(Z7, Y7, X7)
	VMOVSS X0, 0(DX)
	VMOVSS X1, 4(DX)
	VMOVSS X2, 8(DX)
	VMOVSS X3, 12(DX)
	VMOVSS X4, 16(DX)
	VMOVSS X5, 20(DX)
	VMOVSS X6, 24(DX)
	VMOVSS X7, 28(DX)
	VZEROUPPER
	RET

// XH2 loads two activation blocks at reg with their fp16 scales.
#define XH2(reg) \
	VMOVDQU 2(reg), Y14 \
	VINSERTI64X4 $1, 36(reg), Z14, Z14 \
	VPXORD Z31, Z14, Z14 \
	VMOVD (reg), X15 \
	VPINSRW $1, 34(reg), X15, X15 \
	VCVTPH2PS X15, X15 \
	VPERMPS Z15, Z30, Z15

// XH1 loads the last (odd) activation block at reg with its fp16 scale.
#define XH1(reg) \
	VMOVDQU 2(reg), Y14 \
	VPXORD Z31, Z14, Z14 \
	MOVWLZX (reg), AX \
	VMOVD AX, X15 \
	VCVTPH2PS X15, X15 \
	VBROADCASTSS X15, Z15

// STEP4x1 runs one step (W: W2 or W1, X: XH2 or XH1) of the 4×1 kernel.
#define STEP4x1(W, X) \
	X(DI) \
	W(SI, Y8, Z8, Z10, X12, Z12) \
	PAIR(Z8, Z10, Z12, Z14, Z15, Z16, Z17, Z0) \
	W(R8, Y9, Z9, Z11, X13, Z13) \
	PAIR(Z9, Z11, Z13, Z14, Z15, Z18, Z19, Z1) \
	W(R9, Y8, Z8, Z10, X12, Z12) \
	PAIR(Z8, Z10, Z12, Z14, Z15, Z20, Z21, Z2) \
	W(R10, Y9, Z9, Z11, X13, Z13) \
	PAIR(Z9, Z11, Z13, Z14, Z15, Z22, Z23, Z3)

// func dotQ8_0x4AVX512(w *byte, stride int, x *byte, nb int, r *[4]float32)
// Four q8_0 weight rows (stride bytes apart) against one q8_0 activation
// row: r[row]. nb >= 1.
TEXT ·dotQ8_0x4AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	MOVQ CX, DX
	CONSTS
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	SHRQ $1, CX
	JZ tail4x1

loop4x1:
	STEP4x1(W2, XH2)
	ADDQ $68, SI
	ADDQ $68, R8
	ADDQ $68, R9
	ADDQ $68, R10
	ADDQ $68, DI
	DECQ CX
	JNZ loop4x1

tail4x1:
	TESTQ $1, DX
	JZ done4x1
	STEP4x1(W1, XH1)

done4x1:
	MOVQ r+32(FP), DX
	HSUMZ(Z0, Y0, X0)
	HSUMZ(Z1, Y1, X1)
	HSUMZ(Z2, Y2, X2)
	HSUMZ(Z3, Y3, X3)
	VMOVSS X0, 0(DX)
	VMOVSS X1, 4(DX)
	VMOVSS X2, 8(DX)
	VMOVSS X3, 12(DX)
	VZEROUPPER
	RET
