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
