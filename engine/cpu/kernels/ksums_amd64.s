//go:build amd64 && !purego

#include "textflag.h"

// func kSumsAVX2(q *int8, sc *int16, x *byte, nb int, sums *int32)
// For each super-block b: sums[b] = Σ_i sc(i)·q[i]·act[i], where act is
// the q8_K block at x+292b (codes at +4) and sc holds each group's scale
// for the 16 int16 lanes of its 32-code chunk.
TEXT ·kSumsAVX2(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ sc+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ sums+32(FP), DX

block:
	VPXOR Y8, Y8, Y8
	MOVQ $0, R8

chunk:
	VMOVDQU (SI)(R8*1), Y0      // weight codes (signed)
	VMOVDQU 4(DI)(R8*1), Y1     // activation codes (signed)
	VPSIGNB Y0, Y1, Y1          // act · sign(w)
	VPSIGNB Y0, Y0, Y0          // |w|
	VPMADDUBSW Y1, Y0, Y2       // |w|·act' pairs → int16
	VMOVDQU (BX)(R8*1), Y3      // scales (int16 lanes; 32 bytes per chunk)
	VPMADDWD Y3, Y2, Y2         // · scale, pairs → int32
	VPADDD Y2, Y8, Y8
	ADDQ $32, R8
	CMPQ R8, $256
	JLT chunk

	VEXTRACTI128 $1, Y8, X2
	VPADDD X2, X8, X8
	VPSHUFD $0x4e, X8, X2
	VPADDD X2, X8, X8
	VPSHUFD $0xb1, X8, X2
	VPADDD X2, X8, X8
	VMOVD X8, (DX)

	ADDQ $256, SI
	ADDQ $256, BX
	ADDQ $292, DI
	ADDQ $4, DX
	DECQ CX
	JNZ block
	VZEROUPPER
	RET
