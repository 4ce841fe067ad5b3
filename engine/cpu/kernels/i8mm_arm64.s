//go:build !purego

#include "textflag.h"

// NEON kernels using SMMLA (FEAT_I8MM: Apple M2 and later, Graviton 3,
// Neoverse N2/V1). SMMLA Vd.4S, Vn.16B, Vm.16B treats Vn and Vm as two
// rows of eight int8 each and adds the 2×2 int32 product Vn·Vmᵀ to Vd:
// Vd = [n0·m0, n0·m1, n1·m0, n1·m1]. With two weight rows in Vn and two
// activation rows in Vm (their 8-byte halves interleaved by ZIP1/ZIP2 on
// doublewords) one SMMLA does the work of two SDOTs. SMMLA, SSHLL, MLA,
// SMULL, SMLAL, SCVTF and vector FMUL are not in Go's arm64
// assembler: they are emitted as WORDs, each with the instruction it
// encodes in a comment (encodings per the Arm ARM, checked with llvm-mc).

// func dotQ8_0x2x4I8MM(w *byte, stride int, wd *float32, x *byte, xstride int, xd *float32, nb int, r *[8]float32)
// Two q8_0 weight rows (stride bytes apart; block scales widened in wd, row
// 0's nb then row 1's) against four q8_0 activation rows (xstride bytes
// apart; block scales widened in xd, xd[4·b+act]), nb blocks each, into
// r[4·row+act].
TEXT ·dotQ8_0x2x4I8MM(SB), NOSPLIT, $0-64
	MOVD w+0(FP), R0
	MOVD stride+8(FP), R1
	ADD R0, R1, R1
	ADD $2, R0, R0
	ADD $2, R1, R1
	MOVD wd+16(FP), R10
	MOVD nb+48(FP), R6
	ADD R6<<2, R10, R11
	MOVD x+24(FP), R2
	ADD $2, R2, R2
	MOVD xstride+32(FP), R9
	ADD R2, R9, R3
	ADD R3, R9, R4
	ADD R4, R9, R5
	MOVD xd+40(FP), R12
	MOVD r+56(FP), R7
	MOVD $34, R13
	VEOR V30.B16, V30.B16, V30.B16
	VEOR V31.B16, V31.B16, V31.B16

q8mmloop:
	// R0, R1, R2-R5 point at the codes of the current block of each row.
	VLD1.P (R0)(R13), [V0.B16, V1.B16]
	VLD1.P (R1)(R13), [V2.B16, V3.B16]
	VLD1.P 4(R10), V24.S[0]
	VLD1.P 4(R11), V24.S[1]
	VLD1.P (R2)(R13), [V8.B16, V9.B16]
	VLD1.P (R3)(R13), [V10.B16, V11.B16]
	VLD1.P (R4)(R13), [V12.B16, V13.B16]
	VLD1.P (R5)(R13), [V14.B16, V15.B16]
	VLD1.P 16(R12), [V25.S4]
	// V4-V7: weight rows 0 and 1, bytes 8c..8c+7 of each (c = 0..3).
	VZIP1 V2.D2, V0.D2, V4.D2
	VZIP2 V2.D2, V0.D2, V5.D2
	VZIP1 V3.D2, V1.D2, V6.D2
	VZIP2 V3.D2, V1.D2, V7.D2
	// V16-V19: activation rows 0 and 1; V20-V23: rows 2 and 3.
	VZIP1 V10.D2, V8.D2, V16.D2
	VZIP2 V10.D2, V8.D2, V17.D2
	VZIP1 V11.D2, V9.D2, V18.D2
	VZIP2 V11.D2, V9.D2, V19.D2
	VZIP1 V14.D2, V12.D2, V20.D2
	VZIP2 V14.D2, V12.D2, V21.D2
	VZIP1 V15.D2, V13.D2, V22.D2
	VZIP2 V15.D2, V13.D2, V23.D2
	// V26 = [w0·x0, w0·x1, w1·x0, w1·x1], V27 the same for x2, x3.
	VEOR V26.B16, V26.B16, V26.B16
	VEOR V27.B16, V27.B16, V27.B16
	WORD $0x4E90A49A // SMMLA V26.4S, V4.16B, V16.16B
	WORD $0x4E91A4BA // SMMLA V26.4S, V5.16B, V17.16B
	WORD $0x4E92A4DA // SMMLA V26.4S, V6.16B, V18.16B
	WORD $0x4E93A4FA // SMMLA V26.4S, V7.16B, V19.16B
	WORD $0x4E94A49B // SMMLA V27.4S, V4.16B, V20.16B
	WORD $0x4E95A4BB // SMMLA V27.4S, V5.16B, V21.16B
	WORD $0x4E96A4DB // SMMLA V27.4S, V6.16B, V22.16B
	WORD $0x4E97A4FB // SMMLA V27.4S, V7.16B, V23.16B
	// Scale products: [dw0, dw0, dw1, dw1] × [dx0, dx1, dx0, dx1] and
	// × [dx2, dx3, dx2, dx3].
	VZIP1 V24.S4, V24.S4, V24.S4
	VZIP1 V25.D2, V25.D2, V28.D2
	VZIP2 V25.D2, V25.D2, V29.D2
	WORD $0x6E3CDF1C // FMUL V28.4S, V24.4S, V28.4S
	WORD $0x6E3DDF1D // FMUL V29.4S, V24.4S, V29.4S
	WORD $0x4E21DB5A // SCVTF V26.4S, V26.4S
	WORD $0x4E21DB7B // SCVTF V27.4S, V27.4S
	VFMLA V26.S4, V28.S4, V30.S4
	VFMLA V27.S4, V29.S4, V31.S4
	SUBS $1, R6, R6
	BNE q8mmloop
	// r = [w0·x0..x3, w1·x0..x3].
	VZIP1 V31.D2, V30.D2, V0.D2
	VZIP2 V31.D2, V30.D2, V1.D2
	VST1 [V0.S4, V1.S4], (R7)
	RET

// func kDot4x2I8MM(tile *byte, rowStride int, x *byte, xstride int, nb int, r *[8]float32)
// Four decoded K-format rows (records of kRec bytes, see gemm_k.go; rows
// rowStride bytes apart) against two q8_K activation rows (xstride bytes
// apart), nb super-blocks each, into r[4·act+row]. Per group of 16 codes
// two SMMLAs give the group sums of a weight row pair against both
// activation rows, and one MLA adds them times the group scales.
TEXT ·kDot4x2I8MM(SB), NOSPLIT, $0-48
	MOVD tile+0(FP), R0
	MOVD rowStride+8(FP), R9
	ADD R0, R9, R1
	ADD R1, R9, R2
	ADD R2, R9, R3
	ADD $256, R0, R4
	ADD $256, R1, R5
	ADD $256, R2, R6
	ADD $256, R3, R7
	MOVD x+16(FP), R8
	MOVD xstride+24(FP), R9
	ADD R8, R9, R9
	MOVD nb+32(FP), R10
	MOVD r+40(FP), R11
	MOVD $16, R12
	VEOR V18.B16, V18.B16, V18.B16
	VEOR V19.B16, V19.B16, V19.B16

kmmblock:
	// R0-R3: the codes of rows 0-3; R4-R7: their group scales; R8, R9:
	// the activation blocks (dx, then codes, then group sums).
	VLD1.P 4(R8), V30.S[0]
	VLD1.P 4(R9), V30.S[1]
	// V16 = Σ scale·[w0·x0, w0·x1, w1·x0, w1·x1], V17 for rows 2, 3.
	VEOR V16.B16, V16.B16, V16.B16
	VEOR V17.B16, V17.B16, V17.B16
	MOVD $16, R13

kmmgroup:
	VLD1.P 16(R0), [V0.B16]
	VLD1.P 16(R1), [V1.B16]
	VLD1.P 16(R2), [V2.B16]
	VLD1.P 16(R3), [V3.B16]
	VLD1.P 16(R8), [V8.B16]
	VLD1.P 16(R9), [V9.B16]
	VZIP1 V1.D2, V0.D2, V4.D2
	VZIP2 V1.D2, V0.D2, V5.D2
	VZIP1 V3.D2, V2.D2, V6.D2
	VZIP2 V3.D2, V2.D2, V7.D2
	VZIP1 V9.D2, V8.D2, V10.D2
	VZIP2 V9.D2, V8.D2, V11.D2
	VEOR V12.B16, V12.B16, V12.B16
	VEOR V13.B16, V13.B16, V13.B16
	WORD $0x4E8AA48C // SMMLA V12.4S, V4.16B, V10.16B
	WORD $0x4E8BA4AC // SMMLA V12.4S, V5.16B, V11.16B
	WORD $0x4E8AA4CD // SMMLA V13.4S, V6.16B, V10.16B
	WORD $0x4E8BA4ED // SMMLA V13.4S, V7.16B, V11.16B
	// Two int16 copies of each row's group scale: [s0, s0, s1, s1].
	VLD1.P (R4)(R12), V14.S[0]
	VLD1.P (R5)(R12), V14.S[1]
	VLD1.P (R6)(R12), V15.S[0]
	VLD1.P (R7)(R12), V15.S[1]
	WORD $0x0F10A5CE // SSHLL V14.4S, V14.4H, #0
	WORD $0x0F10A5EF // SSHLL V15.4S, V15.4H, #0
	WORD $0x4EAE9590 // MLA V16.4S, V12.4S, V14.4S
	WORD $0x4EAF95B1 // MLA V17.4S, V13.4S, V15.4S
	SUBS $1, R13, R13
	BNE kmmgroup

	// Correction Σ coef·bsum per (row, act): V24/V25 row 0 against
	// x0/x1, V26/V27 row 1, V28/V29 row 2, V12/V13 row 3.
	VLD1.P 32(R8), [V20.H8, V21.H8]
	VLD1.P 32(R9), [V22.H8, V23.H8]
	VLD1.P 32(R4), [V0.H8, V1.H8]
	VLD1.P 32(R5), [V2.H8, V3.H8]
	VLD1.P 32(R6), [V4.H8, V5.H8]
	VLD1.P 32(R7), [V6.H8, V7.H8]
	WORD $0x0E74C018 // SMULL V24.4S, V0.4H, V20.4H
	WORD $0x4E748018 // SMLAL2 V24.4S, V0.8H, V20.8H
	WORD $0x0E758038 // SMLAL V24.4S, V1.4H, V21.4H
	WORD $0x4E758038 // SMLAL2 V24.4S, V1.8H, V21.8H
	WORD $0x0E76C019 // SMULL V25.4S, V0.4H, V22.4H
	WORD $0x4E768019 // SMLAL2 V25.4S, V0.8H, V22.8H
	WORD $0x0E778039 // SMLAL V25.4S, V1.4H, V23.4H
	WORD $0x4E778039 // SMLAL2 V25.4S, V1.8H, V23.8H
	WORD $0x0E74C05A // SMULL V26.4S, V2.4H, V20.4H
	WORD $0x4E74805A // SMLAL2 V26.4S, V2.8H, V20.8H
	WORD $0x0E75807A // SMLAL V26.4S, V3.4H, V21.4H
	WORD $0x4E75807A // SMLAL2 V26.4S, V3.8H, V21.8H
	WORD $0x0E76C05B // SMULL V27.4S, V2.4H, V22.4H
	WORD $0x4E76805B // SMLAL2 V27.4S, V2.8H, V22.8H
	WORD $0x0E77807B // SMLAL V27.4S, V3.4H, V23.4H
	WORD $0x4E77807B // SMLAL2 V27.4S, V3.8H, V23.8H
	WORD $0x0E74C09C // SMULL V28.4S, V4.4H, V20.4H
	WORD $0x4E74809C // SMLAL2 V28.4S, V4.8H, V20.8H
	WORD $0x0E7580BC // SMLAL V28.4S, V5.4H, V21.4H
	WORD $0x4E7580BC // SMLAL2 V28.4S, V5.8H, V21.8H
	WORD $0x0E76C09D // SMULL V29.4S, V4.4H, V22.4H
	WORD $0x4E76809D // SMLAL2 V29.4S, V4.8H, V22.8H
	WORD $0x0E7780BD // SMLAL V29.4S, V5.4H, V23.4H
	WORD $0x4E7780BD // SMLAL2 V29.4S, V5.8H, V23.8H
	WORD $0x0E74C0CC // SMULL V12.4S, V6.4H, V20.4H
	WORD $0x4E7480CC // SMLAL2 V12.4S, V6.8H, V20.8H
	WORD $0x0E7580EC // SMLAL V12.4S, V7.4H, V21.4H
	WORD $0x4E7580EC // SMLAL2 V12.4S, V7.8H, V21.8H
	WORD $0x0E76C0CD // SMULL V13.4S, V6.4H, V22.4H
	WORD $0x4E7680CD // SMLAL2 V13.4S, V6.8H, V22.8H
	WORD $0x0E7780ED // SMLAL V13.4S, V7.4H, V23.4H
	WORD $0x4E7780ED // SMLAL2 V13.4S, V7.8H, V23.8H
	// V24 = [c(w0,x0), c(w0,x1), c(w1,x0), c(w1,x1)], V28 rows 2, 3.
	VADDP V25.S4, V24.S4, V24.S4
	VADDP V27.S4, V26.S4, V26.S4
	VADDP V26.S4, V24.S4, V24.S4
	VADDP V29.S4, V28.S4, V28.S4
	VADDP V13.S4, V12.S4, V12.S4
	VADDP V12.S4, V28.S4, V28.S4
	// Factors: [fS0, fB0, fS1, fB1] -> [fS0, fS0, fS1, fS1]·[dx0, dx1,
	// dx0, dx1] and the same for fB and rows 2, 3.
	VLD1.P 8(R4), V0.D[0]
	VLD1.P 8(R5), V0.D[1]
	VLD1.P 8(R6), V1.D[0]
	VLD1.P 8(R7), V1.D[1]
	VZIP1 V30.D2, V30.D2, V30.D2
	VTRN1 V0.S4, V0.S4, V2.S4
	VTRN2 V0.S4, V0.S4, V3.S4
	VTRN1 V1.S4, V1.S4, V4.S4
	VTRN2 V1.S4, V1.S4, V5.S4
	WORD $0x6E3EDC42 // FMUL V2.4S, V2.4S, V30.4S
	WORD $0x6E3EDC63 // FMUL V3.4S, V3.4S, V30.4S
	WORD $0x6E3EDC84 // FMUL V4.4S, V4.4S, V30.4S
	WORD $0x6E3EDCA5 // FMUL V5.4S, V5.4S, V30.4S
	WORD $0x4E21DA10 // SCVTF V16.4S, V16.4S
	WORD $0x4E21DA31 // SCVTF V17.4S, V17.4S
	WORD $0x4E21DB18 // SCVTF V24.4S, V24.4S
	WORD $0x4E21DB9C // SCVTF V28.4S, V28.4S
	VFMLA V16.S4, V2.S4, V18.S4
	VFMLS V24.S4, V3.S4, V18.S4
	VFMLA V17.S4, V4.S4, V19.S4
	VFMLS V28.S4, V5.S4, V19.S4
	// Next records: the codes pointers are 256 bytes in, the scale
	// pointers at the next record.
	ADD $296, R0, R0
	ADD $296, R1, R1
	ADD $296, R2, R2
	ADD $296, R3, R3
	ADD $256, R4, R4
	ADD $256, R5, R5
	ADD $256, R6, R6
	ADD $256, R7, R7
	SUBS $1, R10, R10
	BNE kmmblock
	// r = [w0..w3·x0, w0..w3·x1].
	VUZP1 V19.S4, V18.S4, V0.S4
	VUZP2 V19.S4, V18.S4, V1.S4
	VST1 [V0.S4, V1.S4], (R11)
	RET
