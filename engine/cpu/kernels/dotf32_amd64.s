//go:build !purego

#include "textflag.h"
#include "sum4_amd64.h"

// func dotF32x4AVX2(w *float32, k int, x *float32, n8 int, r *[4]float32)
// Dots the first 8·n8 values of four float32 rows (k apart) with x.
TEXT ·dotF32x4AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), BX
	SHLQ $2, BX
	MOVQ x+16(FP), DI
	MOVQ n8+24(FP), CX
	MOVQ r+32(FP), DX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ AX, AX

loop:
	VMOVUPS (DI)(AX*1), Y0
	VFMADD231PS (SI)(AX*1), Y0, Y8
	VFMADD231PS (R8)(AX*1), Y0, Y9
	VFMADD231PS (R9)(AX*1), Y0, Y10
	VFMADD231PS (R10)(AX*1), Y0, Y11
	ADDQ $32, AX
	DECQ CX
	JNZ loop

	STORE4
	RET
