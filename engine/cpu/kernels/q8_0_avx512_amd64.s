//go:build !purego

#include "textflag.h"
#include "q8_0_amd64.h"

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

// The 2×4 kernel reads the activations prepared by q8ActsAVX512: each
// row's codes + 128 without the scales, 64 bytes per two blocks, and the
// block scales as float32, eight per two blocks and four rows
// (q8ScalesQuad with pairs: 2·act + block). Per two blocks the scale
// products of a weight row with the four activation rows are formed with
// one VMULPS (eight floats), and each pair's [s_b ×8 | s_b+1 ×8] is taken
// from them with one VPERMPS (index in Z24-Z27).

// Lane indices for VPERMPS: activation row a's scales of the two blocks,
// lanes 0-7 ← 2a, lanes 8-15 ← 2a+1.
DATA q8sel<>+0(SB)/8, $0
DATA q8sel<>+8(SB)/8, $0
DATA q8sel<>+16(SB)/8, $0
DATA q8sel<>+24(SB)/8, $0
DATA q8sel<>+32(SB)/8, $0x0000000100000001
DATA q8sel<>+40(SB)/8, $0x0000000100000001
DATA q8sel<>+48(SB)/8, $0x0000000100000001
DATA q8sel<>+56(SB)/8, $0x0000000100000001
DATA q8sel<>+64(SB)/8, $0x0000000200000002
DATA q8sel<>+72(SB)/8, $0x0000000200000002
DATA q8sel<>+80(SB)/8, $0x0000000200000002
DATA q8sel<>+88(SB)/8, $0x0000000200000002
DATA q8sel<>+96(SB)/8, $0x0000000300000003
DATA q8sel<>+104(SB)/8, $0x0000000300000003
DATA q8sel<>+112(SB)/8, $0x0000000300000003
DATA q8sel<>+120(SB)/8, $0x0000000300000003
DATA q8sel<>+128(SB)/8, $0x0000000400000004
DATA q8sel<>+136(SB)/8, $0x0000000400000004
DATA q8sel<>+144(SB)/8, $0x0000000400000004
DATA q8sel<>+152(SB)/8, $0x0000000400000004
DATA q8sel<>+160(SB)/8, $0x0000000500000005
DATA q8sel<>+168(SB)/8, $0x0000000500000005
DATA q8sel<>+176(SB)/8, $0x0000000500000005
DATA q8sel<>+184(SB)/8, $0x0000000500000005
DATA q8sel<>+192(SB)/8, $0x0000000600000006
DATA q8sel<>+200(SB)/8, $0x0000000600000006
DATA q8sel<>+208(SB)/8, $0x0000000600000006
DATA q8sel<>+216(SB)/8, $0x0000000600000006
DATA q8sel<>+224(SB)/8, $0x0000000700000007
DATA q8sel<>+232(SB)/8, $0x0000000700000007
DATA q8sel<>+240(SB)/8, $0x0000000700000007
DATA q8sel<>+248(SB)/8, $0x0000000700000007
GLOBL q8sel<>(SB), RODATA|NOPTR, $256

// WT2 loads two blocks of the weight row at CX(reg): codes in zw, lane
// corrections in zn. WT1 loads the last (odd) block (high half zero).
#define WT2(reg, yw, zw, zn) \
	VMOVDQU 2(reg)(CX*1), yw \
	VINSERTI64X4 $1, 36(reg)(CX*1), zw, zw \
	WCORR(zw, zn)

#define WT1(reg, yw, zw, zn) \
	VMOVDQU 2(reg)(CX*1), yw \
	WCORR(zw, zn)

// SC2 forms the scale products of the two weight rows with the four
// activation rows for two blocks: Y12 (row 0) and Y13 (row 1), lane
// 2·act + block. SC1 does so for the last (odd) block (its weight scale in
// both lanes of a pair; the activation side's second lanes are zero).
#define SC2 \
	VMOVUPS (R12), Y15 \
	VBROADCASTSD (AX), Y12 \
	VBROADCASTSD (AX)(DX*1), Y13 \
	VMULPS Y15, Y12, Y12 \
	VMULPS Y15, Y13, Y13

#define SC1 \
	VMOVUPS (R12), Y15 \
	VBROADCASTSS (AX), Y12 \
	VBROADCASTSS (AX)(DX*1), Y13 \
	VMULPS Y15, Y12, Y12 \
	VMULPS Y15, Y13, Y13

// PAIRT accumulates weight blocks (zw, zn) times activation blocks (codes
// + 128 in Z14) with the pair's scales (selected by idx from s) into acc.
#define PAIRT(zw, zn, s, idx, zt, za, acc) \
	VPERMPS s, idx, zt \
	VMOVDQA64 zn, za \
	VPDPBUSD zw, Z14, za \
	VCVTDQ2PS za, za \
	VFMADD231PS zt, za, acc

// STEP2x4 runs one step (W: WT2 or WT1, load: VMOVDQU64 Z or VMOVDQU Y)
// of the 2×4 kernel; activation rows at R13 offset from DI, R9-R11.
#define STEP2x4(W, SC, XL, xz) \
	W(SI, Y8, Z8, Z10) \
	W(R8, Y9, Z9, Z11) \
	SC \
	XL (DI)(R13*1), xz \
	PAIRT(Z8, Z10, Z12, Z24, Z16, Z17, Z0) \
	PAIRT(Z9, Z11, Z13, Z24, Z18, Z19, Z4) \
	XL (R9)(R13*1), xz \
	PAIRT(Z8, Z10, Z12, Z25, Z20, Z21, Z1) \
	PAIRT(Z9, Z11, Z13, Z25, Z22, Z23, Z5) \
	XL (R10)(R13*1), xz \
	PAIRT(Z8, Z10, Z12, Z26, Z16, Z17, Z2) \
	PAIRT(Z9, Z11, Z13, Z26, Z18, Z19, Z6) \
	XL (R11)(R13*1), xz \
	PAIRT(Z8, Z10, Z12, Z27, Z20, Z21, Z3) \
	PAIRT(Z9, Z11, Z13, Z27, Z22, Z23, Z7)

// func dotQ8_0x2x4AVX512(w *byte, stride int, wd *float32, x *byte, xstride int, xd *float32, nb, np, nq int, out *float32, ldo int)
// np pairs of q8_0 weight rows (stride bytes apart, block scales as
// float32 in wd, nb per row) against nq quads of activation rows as
// q8ActsAVX512 writes them (xstride bytes apart) with their scales in xd
// (q8ScalesQuad with pairs, q8QuadFloats(nb) per quad): quad q, pair p
// write out[(4·q+act)·ldo+2·p+row]. nb, np, nq >= 1.
// Locals: 0 x of the quad, 8 xd of the quad, 16 quads left, 24 pair, 32
// out of the quad.
TEXT ·dotQ8_0x2x4AVX512(SB), NOSPLIT, $40-88
	MOVQ x+24(FP), AX
	MOVQ AX, 0(SP)
	MOVQ xd+40(FP), AX
	MOVQ AX, 8(SP)
	MOVQ nq+64(FP), AX
	MOVQ AX, 16(SP)
	MOVQ out+72(FP), AX
	MOVQ AX, 32(SP)
	CONSTS
	VMOVDQU32 q8sel<>+0(SB), Z24
	VMOVDQU32 q8sel<>+64(SB), Z25
	VMOVDQU32 q8sel<>+128(SB), Z26
	VMOVDQU32 q8sel<>+192(SB), Z27

quad2x4:
	MOVQ $0, 24(SP)

pair2x4:
	MOVQ 24(SP), BX
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), AX
	IMULQ BX, AX
	LEAQ (SI)(AX*2), SI
	MOVQ stride+8(FP), AX
	LEAQ (SI)(AX*1), R8
	MOVQ nb+48(FP), DX
	SHLQ $2, DX
	MOVQ DX, AX
	IMULQ BX, AX
	SHLQ $1, AX
	ADDQ wd+16(FP), AX
	MOVQ 0(SP), DI
	MOVQ xstride+32(FP), BX
	LEAQ (DI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	MOVQ 8(SP), R12
	XORQ CX, CX
	XORQ R13, R13
	MOVQ nb+48(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	SHRQ $1, BX
	JZ tail2x4

loop2x4:
	STEP2x4(WT2, SC2, VMOVDQU64, Z14)
	ADDQ $68, CX
	ADDQ $64, R13
	ADDQ $32, R12
	ADDQ $8, AX
	DECQ BX
	JNZ loop2x4

tail2x4:
	TESTQ $4, DX
	JZ done2x4
	STEP2x4(WT1, SC1, VMOVDQU, Y14)

done2x4:
	MOVQ 32(SP), DX
	HSUMZ(Z0, Y0, X0)
	HSUMZ(Z1, Y1, X1)
	HSUMZ(Z2, Y2, X2)
	HSUMZ(Z3, Y3, X3)
	HSUMZ(Z4, Y4, X4)
	HSUMZ(Z5, Y5, X5)
	HSUMZ(Z6, Y6, X6)
	HSUMZ(Z7, Y7, X7)
	MOVQ 24(SP), BX
	Q8STORE2X4
	VZEROUPPER
	RET

// func q8ActsAVX512(dst *byte, src *byte, xstride int, nb, rows int)
// Writes rows q8_0 rows of nb blocks (xstride bytes apart) as the 2×4
// kernel reads them: each block's 32 codes + 128 (XOR 0x80), row after
// row, 64·ceil(nb/2) bytes per row (an odd row's last 32 bytes unwritten).
TEXT ·q8ActsAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+32(FP), DX
	MOVL $0x80, AX
	VPBROADCASTB AX, Y1

actrow:
	MOVQ nb+24(FP), CX
	MOVQ SI, R8
	MOVQ DI, R9

actblk:
	VMOVDQU 2(R8), Y0
	VPXOR Y1, Y0, Y0
	VMOVDQU Y0, (R9)
	ADDQ $34, R8
	ADDQ $32, R9
	DECQ CX
	JNZ actblk

	ADDQ xstride+16(FP), SI
	MOVQ nb+24(FP), CX
	INCQ CX
	SHRQ $1, CX
	SHLQ $6, CX
	ADDQ CX, DI
	DECQ DX
	JNZ actrow
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
