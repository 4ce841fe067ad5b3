//go:build !purego

#include "textflag.h"

// Decoders of q4_0, q4_1, q5_0, q5_1 weight rows into q8_0-shaped blocks
// (fp16 scale, then 32 code bytes) for the q8_0 kernel; the Go version is
// decodeLegacy.

DATA lnib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lnib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL lnib<>(SB), RODATA|NOPTR, $16

DATA leight<>+0(SB)/8, $0x0808080808080808
DATA leight<>+8(SB)/8, $0x0808080808080808
GLOBL leight<>(SB), RODATA|NOPTR, $16

DATA lsixteen<>+0(SB)/8, $0x1010101010101010
DATA lsixteen<>+8(SB)/8, $0x1010101010101010
GLOBL lsixteen<>(SB), RODATA|NOPTR, $16

// lbits holds bit i%8 in byte i; lsel01/lsel23 spread qh bytes 0-1 / 2-3
// over 8 bytes each.
DATA lbits<>+0(SB)/8, $0x8040201008040201
DATA lbits<>+8(SB)/8, $0x8040201008040201
GLOBL lbits<>(SB), RODATA|NOPTR, $16

DATA lsel01<>+0(SB)/8, $0x0000000000000000
DATA lsel01<>+8(SB)/8, $0x0101010101010101
GLOBL lsel01<>(SB), RODATA|NOPTR, $16

DATA lsel23<>+0(SB)/8, $0x0202020202020202
DATA lsel23<>+8(SB)/8, $0x0303030303030303
GLOBL lsel23<>(SB), RODATA|NOPTR, $16

#define SETUP \
	MOVQ src+0(FP), SI \
	MOVQ nb+8(FP), CX \
	MOVQ dst+16(FP), DI \
	VMOVDQU lnib<>(SB), X15 \
	VMOVDQU lbits<>(SB), X13 \
	VMOVDQU lsel01<>(SB), X12 \
	VMOVDQU lsel23<>(SB), X11 \
	VMOVDQU lsixteen<>(SB), X10

// NIBBLES splits the 16 code bytes at qsoff(SI) into X0 (low nibbles,
// codes 0-15) and X1 (high nibbles, codes 16-31) and copies the scale.
#define NIBBLES(qsoff) \
	MOVWLZX (SI), AX \
	MOVW AX, (DI) \
	VMOVDQU qsoff(SI), X0 \
	VPSRLW $4, X0, X1 \
	VPAND X15, X0, X0 \
	VPAND X15, X1, X1

// HIGHBITS ors bit 4 from the 32 bits at qhoff(SI) (bit i for code i).
#define HIGHBITS(qhoff) \
	VPBROADCASTD qhoff(SI), X2 \
	VPSHUFB X12, X2, X3 \
	VPAND X13, X3, X3 \
	VPCMPEQB X13, X3, X3 \
	VPAND X10, X3, X3 \
	VPOR X3, X0, X0 \
	VPSHUFB X11, X2, X3 \
	VPAND X13, X3, X3 \
	VPCMPEQB X13, X3, X3 \
	VPAND X10, X3, X3 \
	VPOR X3, X1, X1

#define SUB(off) \
	VPSUBB off, X0, X0 \
	VPSUBB off, X1, X1

#define STORE(bb) \
	VMOVDQU X0, 2(DI) \
	VMOVDQU X1, 18(DI) \
	ADDQ $bb, SI \
	ADDQ $34, DI \
	DECQ CX

// func decodeQ4_0AVX2(src *byte, nb int, dst *byte)
TEXT ·decodeQ4_0AVX2(SB), NOSPLIT, $0-24
	SETUP
	VMOVDQU leight<>(SB), X14

q40:
	NIBBLES(2)
	SUB(X14)
	STORE(18)
	JNZ q40
	RET

// func decodeQ4_1AVX2(src *byte, nb int, dst *byte)
TEXT ·decodeQ4_1AVX2(SB), NOSPLIT, $0-24
	SETUP

q41:
	NIBBLES(4)
	STORE(20)
	JNZ q41
	RET

// func decodeQ5_0AVX2(src *byte, nb int, dst *byte)
TEXT ·decodeQ5_0AVX2(SB), NOSPLIT, $0-24
	SETUP

q50:
	NIBBLES(6)
	HIGHBITS(2)
	SUB(X10)
	STORE(22)
	JNZ q50
	RET

// func decodeQ5_1AVX2(src *byte, nb int, dst *byte)
TEXT ·decodeQ5_1AVX2(SB), NOSPLIT, $0-24
	SETUP

q51:
	NIBBLES(8)
	HIGHBITS(4)
	STORE(24)
	JNZ q51
	RET
