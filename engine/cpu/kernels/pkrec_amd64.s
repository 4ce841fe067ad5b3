//go:build !purego

#include "textflag.h"

// Scale-record decoders of the packed K kernels: one weight row (nb blocks)
// into nb records of 72 bytes (see packed.go); the Go version is
// decodePkRecs.

DATA w000f<>+0(SB)/8, $0x000f000f000f000f
DATA w000f<>+8(SB)/8, $0x000f000f000f000f
DATA w000f<>+16(SB)/8, $0x000f000f000f000f
DATA w000f<>+24(SB)/8, $0x000f000f000f000f
GLOBL w000f<>(SB), RODATA|NOPTR, $32

DATA w0020<>+0(SB)/8, $0x0020002000200020
DATA w0020<>+8(SB)/8, $0x0020002000200020
DATA w0020<>+16(SB)/8, $0x0020002000200020
DATA w0020<>+24(SB)/8, $0x0020002000200020
GLOBL w0020<>(SB), RODATA|NOPTR, $32

#define ARGS \
	MOVQ blk+0(FP), SI \
	MOVQ nb+8(FP), CX \
	MOVQ rec+16(FP), DI

// PAIRS16 widens the 8 bytes of GPR reg to int16 lanes, each twice, into
// off(DI) (32 bytes).
#define PAIRS16(reg, off) \
	VMOVQ reg, X0 \
	VPMOVZXBW X0, X0 \
	VPUNPCKLWD X0, X0, X1 \
	VPUNPCKHWD X0, X0, X2 \
	VMOVDQU X1, off(DI) \
	VMOVDQU X2, (off+16)(DI)

// func pkRecQ45AVX2(blk *byte, nb int, rec *byte, bb int)
// q4_K and q5_K (bb bytes per block): 6-bit scales and minimums, each
// applying to two groups of 16; fS = d, fB = dmin.
TEXT ·pkRecQ45AVX2(SB), NOSPLIT, $0-32
	ARGS
	MOVQ bb+24(FP), R13

q45:
	MOVL 4(SI), AX
	MOVL 8(SI), BX
	MOVL 12(SI), DX
	MOVL AX, R8
	ANDL $0x3f3f3f3f, R8
	MOVL BX, R9
	ANDL $0x3f3f3f3f, R9
	MOVL DX, R10
	ANDL $0x0f0f0f0f, R10
	MOVL AX, R11
	SHRL $6, R11
	ANDL $0x03030303, R11
	SHLL $4, R11
	ORL R11, R10
	MOVL DX, R12
	SHRL $4, R12
	ANDL $0x0f0f0f0f, R12
	MOVL BX, R11
	SHRL $6, R11
	ANDL $0x03030303, R11
	SHLL $4, R11
	ORL R11, R12
	SHLQ $32, R10
	ORQ R10, R8
	SHLQ $32, R12
	ORQ R12, R9
	PAIRS16(R8, 0)
	PAIRS16(R9, 32)
	VMOVD 0(SI), X3
	VCVTPH2PS X3, X3
	VMOVQ X3, 64(DI)
	ADDQ R13, SI
	ADDQ $72, DI
	DECQ CX
	JNZ q45
	RET

// func pkRecQ6AVX2(blk *byte, nb int, rec *byte)
// q6_K: int8 group scales; coef = 32·scale; fS = fB = d.
TEXT ·pkRecQ6AVX2(SB), NOSPLIT, $0-24
	ARGS

q6:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(DI)
	VPSLLW $5, Y0, Y1
	VMOVDQU Y1, 32(DI)
	VPBROADCASTW 208(SI), X3
	VCVTPH2PS X3, X3
	VMOVQ X3, 64(DI)
	ADDQ $210, SI
	ADDQ $72, DI
	DECQ CX
	JNZ q6
	VZEROUPPER
	RET

// func pkRecQ2AVX2(blk *byte, nb int, rec *byte)
// q2_K: 4-bit scale (low) and minimum (high) per group; fS = d, fB = dmin.
TEXT ·pkRecQ2AVX2(SB), NOSPLIT, $0-24
	ARGS
	VMOVDQU w000f<>(SB), Y5

q2:
	VPMOVZXBW 0(SI), Y0
	VPAND Y5, Y0, Y1
	VMOVDQU Y1, 0(DI)
	VPSRLW $4, Y0, Y2
	VMOVDQU Y2, 32(DI)
	VMOVD 80(SI), X3
	VCVTPH2PS X3, X3
	VMOVQ X3, 64(DI)
	ADDQ $84, SI
	ADDQ $72, DI
	DECQ CX
	JNZ q2
	VZEROUPPER
	RET

// Q3WORD builds 4 biased 6-bit scales in R8: (lo & 0x0f0f0f0f) |
// ((DX >> hs) & 0x03030303) << 4, lo in reg shifted right by ls.
#define Q3WORD(reg, ls, hs, dst) \
	MOVL reg, dst \
	SHRL $ls, dst \
	ANDL $0x0f0f0f0f, dst \
	MOVL DX, R11 \
	SHRL $hs, R11 \
	ANDL $0x03030303, R11 \
	SHLL $4, R11 \
	ORL R11, dst

// func pkRecQ3AVX2(blk *byte, nb int, rec *byte)
// q3_K: 6-bit scales biased by 32; coef = 4·scale; fS = fB = d.
TEXT ·pkRecQ3AVX2(SB), NOSPLIT, $0-24
	ARGS
	VMOVDQU w0020<>(SB), Y5

q3:
	MOVL 96(SI), AX
	MOVL 100(SI), BX
	MOVL 104(SI), DX
	Q3WORD(AX, 0, 0, R8)
	Q3WORD(BX, 0, 2, R9)
	Q3WORD(AX, 4, 4, R10)
	Q3WORD(BX, 4, 6, R12)
	SHLQ $32, R9
	ORQ R9, R8
	SHLQ $32, R12
	ORQ R12, R10
	VMOVQ R8, X0
	VPINSRQ $1, R10, X0, X0
	VPMOVZXBW X0, Y0
	VPSUBW Y5, Y0, Y0
	VMOVDQU Y0, 0(DI)
	VPSLLW $2, Y0, Y1
	VMOVDQU Y1, 32(DI)
	VPBROADCASTW 108(SI), X3
	VCVTPH2PS X3, X3
	VMOVQ X3, 64(DI)
	ADDQ $110, SI
	ADDQ $72, DI
	DECQ CX
	JNZ q3
	VZEROUPPER
	RET

// PKHSUM reduces the 8 partial sums at off(SI) to x (X0-X7) as hsum8 does:
// ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)).
#define PKHSUM(off, y, x) \
	VMOVUPS off(SI), y \
	VEXTRACTF128 $1, y, X9 \
	VADDPS X9, x, x \
	VMOVHLPS x, X9, X9 \
	VADDPS X9, x, x \
	VMOVSHDUP x, X9 \
	VADDSS X9, x, x

// func pkFlush2x4(acc *float32, out *float32, ldo int)
// Writes the results of a two-row × four-activation packed kernel call
// (8 partial sums per pair at acc[8·(4r+a):]) to out[a·ldo+r], each
// reduced as hsum8 does, and zeroes the 64 partial sums.
TEXT ·pkFlush2x4(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), SI
	MOVQ out+8(FP), DI
	MOVQ ldo+16(FP), AX
	SHLQ $2, AX
	PKHSUM(0, Y0, X0)
	PKHSUM(32, Y1, X1)
	PKHSUM(64, Y2, X2)
	PKHSUM(96, Y3, X3)
	PKHSUM(128, Y4, X4)
	PKHSUM(160, Y5, X5)
	PKHSUM(192, Y6, X6)
	PKHSUM(224, Y7, X7)
	VUNPCKLPS X4, X0, X0
	VMOVQ X0, (DI)
	VUNPCKLPS X5, X1, X1
	VMOVQ X1, (DI)(AX*1)
	VUNPCKLPS X6, X2, X2
	VMOVQ X2, (DI)(AX*2)
	ADDQ AX, DI
	VUNPCKLPS X7, X3, X3
	VMOVQ X3, (DI)(AX*2)
	VXORPS Y8, Y8, Y8
	VMOVUPS Y8, 0(SI)
	VMOVUPS Y8, 32(SI)
	VMOVUPS Y8, 64(SI)
	VMOVUPS Y8, 96(SI)
	VMOVUPS Y8, 128(SI)
	VMOVUPS Y8, 160(SI)
	VMOVUPS Y8, 192(SI)
	VMOVUPS Y8, 224(SI)
	VZEROUPPER
	RET
