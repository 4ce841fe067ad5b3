//go:build !purego

#include "textflag.h"

// Constant: sixteen int16 ones for VPMADDWD.
DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

// ROWQ8 accumulates one weight row's block (at address reg) into acc:
// x signed by w, |w|·x' pairs (VPMADDUBSW), pairs summed to int32
// (VPMADDWD), converted, times d_w·d_x. Taking |w| (not |x|) keeps a
// weight code of -128 exact: |-128| is 128 unsigned, and the activation
// codes (our own q8_0, within ±127) never overflow when negated.
#define ROWQ8(reg, acc) \
	VMOVDQU 2(reg), Y2 \
	VPSIGNB Y2, Y0, Y1 \
	VPSIGNB Y2, Y2, Y2 \
	VPMADDUBSW Y1, Y2, Y2 \
	VPMADDWD Y5, Y2, Y2 \
	VCVTDQ2PS Y2, Y2 \
	MOVWLZX (reg), AX \
	VMOVD AX, X3 \
	VCVTPH2PS X3, X3 \
	VMULSS X4, X3, X3 \
	VBROADCASTSS X3, Y3 \
	VFMADD231PS Y3, Y2, acc

// HSUM reduces acc to its lane sum in the low float of acc's X register.
#define HSUM(acc, xacc) \
	VEXTRACTF128 $1, acc, X2 \
	VADDPS X2, xacc, xacc \
	VMOVHLPS xacc, X2, X2 \
	VADDPS X2, xacc, xacc \
	VMOVSHDUP xacc, X2 \
	VADDSS X2, xacc, xacc

// func dotQ8_0x4AVX2(w *byte, stride int, x *byte, nb int, r *[4]float32)
TEXT ·dotQ8_0x4AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ r+32(FP), DX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VMOVDQU ones16<>(SB), Y5
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop:
	VMOVDQU 2(DI), Y0
	MOVWLZX (DI), AX
	VMOVD AX, X4
	VCVTPH2PS X4, X4
	ROWQ8(SI, Y8)
	ROWQ8(R8, Y9)
	ROWQ8(R9, Y10)
	ROWQ8(R10, Y11)
	ADDQ $34, DI
	ADDQ $34, SI
	ADDQ $34, R8
	ADDQ $34, R9
	ADDQ $34, R10
	DECQ CX
	JNZ loop

	HSUM(Y8, X8)
	HSUM(Y9, X9)
	HSUM(Y10, X10)
	HSUM(Y11, X11)
	VMOVSS X8, 0(DX)
	VMOVSS X9, 4(DX)
	VMOVSS X10, 8(DX)
	VMOVSS X11, 12(DX)
	VZEROUPPER
	RET

// ROWQ8x4 loads weight row reg's block (|w| in Y8, w in Y9, d_w in Y11).
#define ROWQ8x4(reg) \
	VMOVDQU 2(reg), Y9 \
	VPSIGNB Y9, Y9, Y8 \
	MOVWLZX (reg), AX \
	VMOVD AX, X11 \
	VCVTPH2PS X11, X11 \
	VBROADCASTSS X11, Y11

// PAIRQ8 accumulates the current weight block times activation row x's
// block (scale d_x, float32, at xd) into acc.
#define PAIRQ8(x, xd, acc) \
	VMOVDQU 2(x), Y10 \
	VPSIGNB Y9, Y10, Y10 \
	VPMADDUBSW Y10, Y8, Y10 \
	VPMADDWD Y15, Y10, Y10 \
	VCVTDQ2PS Y10, Y10 \
	VBROADCASTSS (xd), Y12 \
	VMULPS Y11, Y12, Y12 \
	VFMADD231PS Y12, Y10, acc

#define HSUM13(acc, xacc) \
	VEXTRACTF128 $1, acc, X13 \
	VADDPS X13, xacc, xacc \
	VMOVHLPS xacc, X13, X13 \
	VADDPS X13, xacc, xacc \
	VMOVSHDUP xacc, X13 \
	VADDSS X13, xacc, xacc

// func dotQ8_0x2x4AVX2(w *byte, stride int, x *byte, xstride int, xd *float32, nb int, r *[8]float32)
// Two q8_0 weight rows (stride bytes apart) against four q8_0 activation
// rows (xstride bytes apart) whose block scales are given as float32 in xd
// (nb per row): r[4·row+act].
TEXT ·dotQ8_0x2x4AVX2(SB), NOSPLIT, $0-56
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
	VMOVDQU ones16<>(SB), Y15
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop2x4:
	ROWQ8x4(SI)
	PAIRQ8(DI, R12, Y0)
	PAIRQ8(R9, R13, Y1)
	PAIRQ8(R10, R14, Y2)
	PAIRQ8(R11, BX, Y3)
	ROWQ8x4(R8)
	PAIRQ8(DI, R12, Y4)
	PAIRQ8(R9, R13, Y5)
	PAIRQ8(R10, R14, Y6)
	PAIRQ8(R11, BX, Y7)
	ADDQ $34, SI
	ADDQ $34, R8
	ADDQ $34, DI
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $4, R12
	ADDQ $4, R13
	ADDQ $4, R14
	ADDQ $4, BX
	DECQ CX
	JNZ loop2x4

	MOVQ r+48(FP), DX
	HSUM13(Y0, X0)
	HSUM13(Y1, X1)
	HSUM13(Y2, X2)
	HSUM13(Y3, X3)
	HSUM13(Y4, X4)
	HSUM13(Y5, X5)
	HSUM13(Y6, X6)
	HSUM13(Y7, X7)
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

// func f16StridedAVX2(dst *float32, src *byte, stride int, n int)
// Widens n fp16 values stride bytes apart (the block scales of q8_0 rows)
// to float32.
TEXT ·f16StridedAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), BX
	MOVQ n+24(FP), CX

f16s:
	MOVWLZX (SI), AX
	VMOVD AX, X0
	VCVTPH2PS X0, X0
	VMOVSS X0, (DI)
	ADDQ BX, SI
	ADDQ $4, DI
	DECQ CX
	JNZ f16s
	RET
