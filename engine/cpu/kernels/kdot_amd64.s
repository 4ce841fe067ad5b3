//go:build !purego

#include "textflag.h"

// CHUNK multiplies activation chunk c (in Y0) with the codes of one row
// record (base reg) and accumulates Σ scale·u·a into the int32 lanes of acc.
#define CHUNK(reg, c, acc) \
	VMOVDQU (c*32)(reg), Y1 \
	VPMADDUBSW Y0, Y1, Y1 \
	VPMADDWD (256+c*32)(reg), Y1, Y1 \
	VPADDD Y1, acc, acc

// CHUNK4 runs CHUNK for the four rows after loading activation chunk c.
#define CHUNK4(c) \
	VMOVDQU (4+c*32)(DI), Y0 \
	CHUNK(SI, c, Y8) \
	CHUNK(R8, c, Y9) \
	CHUNK(R9, c, Y10) \
	CHUNK(R10, c, Y11)

// FINISH folds one row's block into its float accumulator:
// facc += dx·fS·S − dx·fB·Σ coef·bsum.
#define FINISH(reg, acc, facc) \
	VPMADDWD 512(reg), Y5, Y1 \
	VCVTDQ2PS acc, Y2 \
	VCVTDQ2PS Y1, Y1 \
	VBROADCASTSS 544(reg), Y3 \
	VMULPS Y4, Y3, Y3 \
	VFMADD231PS Y3, Y2, facc \
	VBROADCASTSS 548(reg), Y3 \
	VMULPS Y4, Y3, Y3 \
	VFNMADD231PS Y3, Y1, facc

#define HSUM(acc, xacc) \
	VEXTRACTF128 $1, acc, X2 \
	VADDPS X2, xacc, xacc \
	VMOVHLPS xacc, X2, X2 \
	VADDPS X2, xacc, xacc \
	VMOVSHDUP xacc, X2 \
	VADDSS X2, xacc, xacc

// func kDot4AVX2(tile *byte, rowStride int, x *byte, nb int, r *[4]float32)
TEXT ·kDot4AVX2(SB), NOSPLIT, $0-40
	MOVQ tile+0(FP), SI
	MOVQ rowStride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ r+32(FP), DX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15

block:
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	CHUNK4(0)
	CHUNK4(1)
	CHUNK4(2)
	CHUNK4(3)
	CHUNK4(4)
	CHUNK4(5)
	CHUNK4(6)
	CHUNK4(7)
	VBROADCASTSS (DI), Y4
	VMOVDQU 260(DI), Y5
	FINISH(SI, Y8, Y12)
	FINISH(R8, Y9, Y13)
	FINISH(R9, Y10, Y14)
	FINISH(R10, Y11, Y15)
	ADDQ $552, SI
	ADDQ $552, R8
	ADDQ $552, R9
	ADDQ $552, R10
	ADDQ $292, DI
	DECQ CX
	JNZ block

	HSUM(Y12, X12)
	HSUM(Y13, X13)
	HSUM(Y14, X14)
	HSUM(Y15, X15)
	VMOVSS X12, 0(DX)
	VMOVSS X13, 4(DX)
	VMOVSS X14, 8(DX)
	VMOVSS X15, 12(DX)
	VZEROUPPER
	RET
