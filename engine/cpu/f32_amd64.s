//go:build amd64 && !purego

#include "textflag.h"

// HSUM8 reduces the eight floats of Y register y (X register x) to one
// float in the low lane of x, using X15 as scratch.
#define HSUM8(y, x) \
	VEXTRACTF128 $1, y, X15 \
	VADDPS X15, x, x \
	VHADDPS x, x, x \
	VHADDPS x, x, x

// func dot4AVX2(x, w *float32, stride, n int, r *[4]float32)
// r[j] = Σ_{i<n} x[i]·w[j*stride+i] for j < 4; n is a multiple of 16.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ stride+16(FP), BX
	SHLQ $2, BX
	MOVQ n+24(FP), CX
	MOVQ r+32(FP), DX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	SHRQ $4, CX
	JZ   done4

loop4:
	VMOVUPS     (SI), Y8
	VMOVUPS     32(SI), Y9
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y9, Y4
	VFMADD231PS (R8), Y8, Y1
	VFMADD231PS 32(R8), Y9, Y5
	VFMADD231PS (R9), Y8, Y2
	VFMADD231PS 32(R9), Y9, Y6
	VFMADD231PS (R10), Y8, Y3
	VFMADD231PS 32(R10), Y9, Y7
	ADDQ        $64, SI
	ADDQ        $64, DI
	ADDQ        $64, R8
	ADDQ        $64, R9
	ADDQ        $64, R10
	DECQ        CX
	JNZ         loop4

done4:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	HSUM8(Y0, X0)
	HSUM8(Y1, X1)
	HSUM8(Y2, X2)
	HSUM8(Y3, X3)
	VMOVSS X0, (DX)
	VMOVSS X1, 4(DX)
	VMOVSS X2, 8(DX)
	VMOVSS X3, 12(DX)
	VZEROUPPER
	RET

// func dot2x4AVX2(x *float32, ldx int, w *float32, stride, n int, r *[8]float32)
// r[i*4+j] = Σ_{t<n} x[i*ldx+t]·w[j*stride+t] for i < 2, j < 4; n is a
// multiple of 8.
TEXT ·dot2x4AVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ ldx+8(FP), AX
	SHLQ $2, AX
	MOVQ w+16(FP), DI
	MOVQ stride+24(FP), BX
	SHLQ $2, BX
	MOVQ n+32(FP), CX
	MOVQ r+40(FP), DX
	LEAQ (SI)(AX*1), R11
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	SHRQ $3, CX
	JZ   done24

loop24:
	VMOVUPS     (SI), Y8
	VMOVUPS     (R11), Y9
	VMOVUPS     (DI), Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VMOVUPS     (R8), Y11
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMOVUPS     (R9), Y12
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y12, Y9, Y6
	VMOVUPS     (R10), Y13
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y13, Y9, Y7
	ADDQ        $32, SI
	ADDQ        $32, R11
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R9
	ADDQ        $32, R10
	DECQ        CX
	JNZ         loop24

done24:
	HSUM8(Y0, X0)
	HSUM8(Y1, X1)
	HSUM8(Y2, X2)
	HSUM8(Y3, X3)
	HSUM8(Y4, X4)
	HSUM8(Y5, X5)
	HSUM8(Y6, X6)
	HSUM8(Y7, X7)
	VMOVSS X0, (DX)
	VMOVSS X1, 4(DX)
	VMOVSS X2, 8(DX)
	VMOVSS X3, 12(DX)
	VMOVSS X4, 16(DX)
	VMOVSS X5, 20(DX)
	VMOVSS X6, 24(DX)
	VMOVSS X7, 28(DX)
	VZEROUPPER
	RET

// func axpyAVX2(y, x *float32, n int, a float32)
// y[i] += a·x[i] for i < n; n is a multiple of 8.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-28
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Y0
	SHRQ         $3, CX
	JZ           doneaxpy

loopaxpy:
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         loopaxpy

doneaxpy:
	VZEROUPPER
	RET

// func axpy4AVX2(y, x *float32, stride, n int, p *[4]float32)
// y[i] += p[0]·x[i] + p[1]·x[stride+i] + p[2]·x[2·stride+i] + p[3]·x[3·stride+i]
// for i < n, fused in that order; n is a multiple of 8.
TEXT ·axpy4AVX2(SB), NOSPLIT, $0-40
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         stride+16(FP), BX
	SHLQ         $2, BX
	MOVQ         n+24(FP), CX
	MOVQ         p+32(FP), DX
	VBROADCASTSS (DX), Y0
	VBROADCASTSS 4(DX), Y1
	VBROADCASTSS 8(DX), Y2
	VBROADCASTSS 12(DX), Y3
	LEAQ         (SI)(BX*1), R8
	LEAQ         (R8)(BX*1), R9
	LEAQ         (R9)(BX*1), R10
	SHRQ         $3, CX
	JZ           doneaxpy4

loopaxpy4:
	VMOVUPS     (DI), Y4
	VFMADD231PS (SI), Y0, Y4
	VFMADD231PS (R8), Y1, Y4
	VFMADD231PS (R9), Y2, Y4
	VFMADD231PS (R10), Y3, Y4
	VMOVUPS     Y4, (DI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	ADDQ        $32, R8
	ADDQ        $32, R9
	ADDQ        $32, R10
	DECQ        CX
	JNZ         loopaxpy4

doneaxpy4:
	VZEROUPPER
	RET
