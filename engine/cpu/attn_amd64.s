//go:build amd64 && !purego

#include "textflag.h"

// FMA4X4Z accumulates the 4x4 outer product of four 16-float columns
// (Z16..Z19) and four broadcast values (Z20..Z23) into Z0..Z15 (row r,
// column c in Z(4r+c)): the inner step of the AVX-512 score and PV tiles.
#define FMA4X4Z \
	VFMADD231PS Z16, Z20, Z0 \
	VFMADD231PS Z17, Z20, Z1 \
	VFMADD231PS Z18, Z20, Z2 \
	VFMADD231PS Z19, Z20, Z3 \
	VFMADD231PS Z16, Z21, Z4 \
	VFMADD231PS Z17, Z21, Z5 \
	VFMADD231PS Z18, Z21, Z6 \
	VFMADD231PS Z19, Z21, Z7 \
	VFMADD231PS Z16, Z22, Z8 \
	VFMADD231PS Z17, Z22, Z9 \
	VFMADD231PS Z18, Z22, Z10 \
	VFMADD231PS Z19, Z22, Z11 \
	VFMADD231PS Z16, Z23, Z12 \
	VFMADD231PS Z17, Z23, Z13 \
	VFMADD231PS Z18, Z23, Z14 \
	VFMADD231PS Z19, Z23, Z15

// attnC holds the constants of the attention kernels and siluMulAVX2, eight copies each
// (one ymm): at 0 log2(e); 32 and 64 the two parts of ln 2 (expf's
// 0.693359375 and 2.12194440e-4); 96..256 the polynomial p0..p5 of expf;
// 288 one; 320 the underflow bound -87.3; 352 the exponent bias 127
// (int32); 384 the lane bits 1, 2, 4, ..., 128 (int32); 416 -Inf.
DATA attnC<>+0(SB)/4, $0x3fb8aa3b
DATA attnC<>+4(SB)/4, $0x3fb8aa3b
DATA attnC<>+8(SB)/4, $0x3fb8aa3b
DATA attnC<>+12(SB)/4, $0x3fb8aa3b
DATA attnC<>+16(SB)/4, $0x3fb8aa3b
DATA attnC<>+20(SB)/4, $0x3fb8aa3b
DATA attnC<>+24(SB)/4, $0x3fb8aa3b
DATA attnC<>+28(SB)/4, $0x3fb8aa3b
DATA attnC<>+32(SB)/4, $0x3f318000
DATA attnC<>+36(SB)/4, $0x3f318000
DATA attnC<>+40(SB)/4, $0x3f318000
DATA attnC<>+44(SB)/4, $0x3f318000
DATA attnC<>+48(SB)/4, $0x3f318000
DATA attnC<>+52(SB)/4, $0x3f318000
DATA attnC<>+56(SB)/4, $0x3f318000
DATA attnC<>+60(SB)/4, $0x3f318000
DATA attnC<>+64(SB)/4, $0x395e8083
DATA attnC<>+68(SB)/4, $0x395e8083
DATA attnC<>+72(SB)/4, $0x395e8083
DATA attnC<>+76(SB)/4, $0x395e8083
DATA attnC<>+80(SB)/4, $0x395e8083
DATA attnC<>+84(SB)/4, $0x395e8083
DATA attnC<>+88(SB)/4, $0x395e8083
DATA attnC<>+92(SB)/4, $0x395e8083
DATA attnC<>+96(SB)/4, $0x39506967
DATA attnC<>+100(SB)/4, $0x39506967
DATA attnC<>+104(SB)/4, $0x39506967
DATA attnC<>+108(SB)/4, $0x39506967
DATA attnC<>+112(SB)/4, $0x39506967
DATA attnC<>+116(SB)/4, $0x39506967
DATA attnC<>+120(SB)/4, $0x39506967
DATA attnC<>+124(SB)/4, $0x39506967
DATA attnC<>+128(SB)/4, $0x3ab743ce
DATA attnC<>+132(SB)/4, $0x3ab743ce
DATA attnC<>+136(SB)/4, $0x3ab743ce
DATA attnC<>+140(SB)/4, $0x3ab743ce
DATA attnC<>+144(SB)/4, $0x3ab743ce
DATA attnC<>+148(SB)/4, $0x3ab743ce
DATA attnC<>+152(SB)/4, $0x3ab743ce
DATA attnC<>+156(SB)/4, $0x3ab743ce
DATA attnC<>+160(SB)/4, $0x3c088908
DATA attnC<>+164(SB)/4, $0x3c088908
DATA attnC<>+168(SB)/4, $0x3c088908
DATA attnC<>+172(SB)/4, $0x3c088908
DATA attnC<>+176(SB)/4, $0x3c088908
DATA attnC<>+180(SB)/4, $0x3c088908
DATA attnC<>+184(SB)/4, $0x3c088908
DATA attnC<>+188(SB)/4, $0x3c088908
DATA attnC<>+192(SB)/4, $0x3d2aa9c1
DATA attnC<>+196(SB)/4, $0x3d2aa9c1
DATA attnC<>+200(SB)/4, $0x3d2aa9c1
DATA attnC<>+204(SB)/4, $0x3d2aa9c1
DATA attnC<>+208(SB)/4, $0x3d2aa9c1
DATA attnC<>+212(SB)/4, $0x3d2aa9c1
DATA attnC<>+216(SB)/4, $0x3d2aa9c1
DATA attnC<>+220(SB)/4, $0x3d2aa9c1
DATA attnC<>+224(SB)/4, $0x3e2aaaaa
DATA attnC<>+228(SB)/4, $0x3e2aaaaa
DATA attnC<>+232(SB)/4, $0x3e2aaaaa
DATA attnC<>+236(SB)/4, $0x3e2aaaaa
DATA attnC<>+240(SB)/4, $0x3e2aaaaa
DATA attnC<>+244(SB)/4, $0x3e2aaaaa
DATA attnC<>+248(SB)/4, $0x3e2aaaaa
DATA attnC<>+252(SB)/4, $0x3e2aaaaa
DATA attnC<>+256(SB)/4, $0x3f000000
DATA attnC<>+260(SB)/4, $0x3f000000
DATA attnC<>+264(SB)/4, $0x3f000000
DATA attnC<>+268(SB)/4, $0x3f000000
DATA attnC<>+272(SB)/4, $0x3f000000
DATA attnC<>+276(SB)/4, $0x3f000000
DATA attnC<>+280(SB)/4, $0x3f000000
DATA attnC<>+284(SB)/4, $0x3f000000
DATA attnC<>+288(SB)/4, $0x3f800000
DATA attnC<>+292(SB)/4, $0x3f800000
DATA attnC<>+296(SB)/4, $0x3f800000
DATA attnC<>+300(SB)/4, $0x3f800000
DATA attnC<>+304(SB)/4, $0x3f800000
DATA attnC<>+308(SB)/4, $0x3f800000
DATA attnC<>+312(SB)/4, $0x3f800000
DATA attnC<>+316(SB)/4, $0x3f800000
DATA attnC<>+320(SB)/4, $0xc2ae999a
DATA attnC<>+324(SB)/4, $0xc2ae999a
DATA attnC<>+328(SB)/4, $0xc2ae999a
DATA attnC<>+332(SB)/4, $0xc2ae999a
DATA attnC<>+336(SB)/4, $0xc2ae999a
DATA attnC<>+340(SB)/4, $0xc2ae999a
DATA attnC<>+344(SB)/4, $0xc2ae999a
DATA attnC<>+348(SB)/4, $0xc2ae999a
DATA attnC<>+352(SB)/4, $0x0000007f
DATA attnC<>+356(SB)/4, $0x0000007f
DATA attnC<>+360(SB)/4, $0x0000007f
DATA attnC<>+364(SB)/4, $0x0000007f
DATA attnC<>+368(SB)/4, $0x0000007f
DATA attnC<>+372(SB)/4, $0x0000007f
DATA attnC<>+376(SB)/4, $0x0000007f
DATA attnC<>+380(SB)/4, $0x0000007f
DATA attnC<>+384(SB)/4, $0x00000001
DATA attnC<>+388(SB)/4, $0x00000002
DATA attnC<>+392(SB)/4, $0x00000004
DATA attnC<>+396(SB)/4, $0x00000008
DATA attnC<>+400(SB)/4, $0x00000010
DATA attnC<>+404(SB)/4, $0x00000020
DATA attnC<>+408(SB)/4, $0x00000040
DATA attnC<>+412(SB)/4, $0x00000080
DATA attnC<>+416(SB)/4, $0xff800000
DATA attnC<>+420(SB)/4, $0xff800000
DATA attnC<>+424(SB)/4, $0xff800000
DATA attnC<>+428(SB)/4, $0xff800000
DATA attnC<>+432(SB)/4, $0xff800000
DATA attnC<>+436(SB)/4, $0xff800000
DATA attnC<>+440(SB)/4, $0xff800000
DATA attnC<>+444(SB)/4, $0xff800000
GLOBL attnC<>(SB), RODATA|NOPTR, $448

// func attnScoreAVX512(s, q0, q1, q2, q3, kp *float32, d int)
// s[r*64+j] = Σ_{t<d} qr[t]·kp[t*64+j] for r < 4, j < 64: 4 rows × 4 zmm
// of keys in Z0..Z15, one broadcast per row and 4 key loads per t. The
// rows q1..q3 are reached from q0 by their distance in bytes.
TEXT ·attnScoreAVX512(SB), NOSPLIT, $0-56
	MOVQ   s+0(FP), DI
	MOVQ   q0+8(FP), SI
	MOVQ   q1+16(FP), R11
	MOVQ   q2+24(FP), R12
	MOVQ   q3+32(FP), R13
	SUBQ   SI, R11
	SUBQ   SI, R12
	SUBQ   SI, R13
	MOVQ   kp+40(FP), DX
	MOVQ   d+48(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15

score512:
	VMOVUPS      (DX), Z16
	VMOVUPS      64(DX), Z17
	VMOVUPS      128(DX), Z18
	VMOVUPS      192(DX), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (SI)(R11*1), Z21
	VBROADCASTSS (SI)(R12*1), Z22
	VBROADCASTSS (SI)(R13*1), Z23
	FMA4X4Z
	ADDQ         $4, SI
	ADDQ         $256, DX
	DECQ         CX
	JNZ          score512

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, 256(DI)
	VMOVUPS Z5, 320(DI)
	VMOVUPS Z6, 384(DI)
	VMOVUPS Z7, 448(DI)
	VMOVUPS Z8, 512(DI)
	VMOVUPS Z9, 576(DI)
	VMOVUPS Z10, 640(DI)
	VMOVUPS Z11, 704(DI)
	VMOVUPS Z12, 768(DI)
	VMOVUPS Z13, 832(DI)
	VMOVUPS Z14, 896(DI)
	VMOVUPS Z15, 960(DI)
	VZEROUPPER
	RET

// func attnScoreAVX2(s, q0, q1, q2, q3, kp *float32, d int)
// attnScoreAVX512 in four passes of 16 keys: 4 rows × 2 ymm in Y0..Y7.
TEXT ·attnScoreAVX2(SB), NOSPLIT, $0-56
	MOVQ s+0(FP), DI
	MOVQ q0+8(FP), SI
	MOVQ q1+16(FP), R11
	MOVQ q2+24(FP), R12
	MOVQ q3+32(FP), R13
	SUBQ SI, R11
	SUBQ SI, R12
	SUBQ SI, R13
	MOVQ kp+40(FP), DX
	MOVQ $4, R8

group2:
	MOVQ   SI, R9
	MOVQ   DX, R10
	MOVQ   d+48(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

score2:
	VMOVUPS      (R10), Y8
	VMOVUPS      32(R10), Y9
	VBROADCASTSS (R9), Y10
	VBROADCASTSS (R9)(R11*1), Y11
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS (R9)(R12*1), Y12
	VBROADCASTSS (R9)(R13*1), Y13
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $4, R9
	ADDQ         $256, R10
	DECQ         CX
	JNZ          score2

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 256(DI)
	VMOVUPS Y3, 288(DI)
	VMOVUPS Y4, 512(DI)
	VMOVUPS Y5, 544(DI)
	VMOVUPS Y6, 768(DI)
	VMOVUPS Y7, 800(DI)
	ADDQ    $64, DI
	ADDQ    $64, DX
	DECQ    R8
	JNZ     group2
	VZEROUPPER
	RET

// func attnRowMaxAVX512(s *float32, mask uint64, scale float32) float32
// s[j] *= scale for j < 64; returns the largest s[j] whose bit j is set
// in mask (one at least).
TEXT ·attnRowMaxAVX512(SB), NOSPLIT, $0-28
	MOVQ          s+0(FP), SI
	MOVQ          mask+8(FP), AX
	VBROADCASTSS  scale+16(FP), Z8
	VMULPS        (SI), Z8, Z4
	VMULPS        64(SI), Z8, Z5
	VMULPS        128(SI), Z8, Z6
	VMULPS        192(SI), Z8, Z7
	VMOVUPS       Z4, (SI)
	VMOVUPS       Z5, 64(SI)
	VMOVUPS       Z6, 128(SI)
	VMOVUPS       Z7, 192(SI)
	VBROADCASTSS  attnC<>+416(SB), Z0
	VMOVAPS       Z0, Z1
	VMOVAPS       Z0, Z2
	VMOVAPS       Z0, Z3
	KMOVW         AX, K1
	SHRQ          $16, AX
	KMOVW         AX, K2
	SHRQ          $16, AX
	KMOVW         AX, K3
	SHRQ          $16, AX
	KMOVW         AX, K4
	VMAXPS        Z4, Z0, K1, Z0
	VMAXPS        Z5, Z1, K2, Z1
	VMAXPS        Z6, Z2, K3, Z2
	VMAXPS        Z7, Z3, K4, Z3
	VMAXPS        Z1, Z0, Z0
	VMAXPS        Z3, Z2, Z2
	VMAXPS        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X1, X0, X0
	VMOVSS        X0, ret+24(FP)
	VZEROUPPER
	RET

// func attnRowMaxAVX2(s *float32, mask uint64, scale float32) float32
// attnRowMaxAVX512 in eight ymm: each byte of mask becomes a lane mask by
// testing the lane bits of attnC.
TEXT ·attnRowMaxAVX2(SB), NOSPLIT, $0-28
	MOVQ         s+0(FP), SI
	MOVQ         mask+8(FP), AX
	VBROADCASTSS scale+16(FP), Y5
	VBROADCASTSS attnC<>+416(SB), Y6
	VMOVAPS      Y6, Y0
	VMOVUPS      attnC<>+384(SB), Y7
	MOVQ         $8, CX

max2:
	MOVL         AX, DX
	ANDL         $0xff, DX
	VMOVD        DX, X2
	VPBROADCASTD X2, Y2
	VPAND        Y7, Y2, Y2
	VPCMPEQD     Y7, Y2, Y2
	VMULPS       (SI), Y5, Y1
	VMOVUPS      Y1, (SI)
	VBLENDVPS    Y2, Y1, Y6, Y3
	VMAXPS       Y3, Y0, Y0
	SHRQ         $8, AX
	ADDQ         $32, SI
	DECQ         CX
	JNZ          max2

	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET

// func attnRowExpAVX512(s *float32, mask uint64, m float32) float32
// s[j] = e^(s[j]-m) where bit j of mask is set, else 0, for j < 64;
// returns the sum. e^x is expf's: x = n·ln2 + r (n rounded to even),
// e^r by the degree-6 polynomial, 2^n put into the exponent; x < -87.3
// gives 0 and NaN stays NaN.
TEXT ·attnRowExpAVX512(SB), NOSPLIT, $0-28
	MOVQ         s+0(FP), SI
	MOVQ         mask+8(FP), AX
	VBROADCASTSS m+16(FP), Z28
	VBROADCASTSS attnC<>+0(SB), Z16
	VBROADCASTSS attnC<>+32(SB), Z17
	VBROADCASTSS attnC<>+64(SB), Z18
	VBROADCASTSS attnC<>+96(SB), Z19
	VBROADCASTSS attnC<>+128(SB), Z20
	VBROADCASTSS attnC<>+160(SB), Z21
	VBROADCASTSS attnC<>+192(SB), Z22
	VBROADCASTSS attnC<>+224(SB), Z23
	VBROADCASTSS attnC<>+256(SB), Z24
	VBROADCASTSS attnC<>+288(SB), Z25
	VBROADCASTSS attnC<>+320(SB), Z26
	VPBROADCASTD attnC<>+352(SB), Z27
	VXORPS       Z6, Z6, Z6
	MOVQ         $4, CX

exp512:
	KMOVW        AX, K1
	SHRQ         $16, AX
	VMOVUPS      (SI), Z0
	VSUBPS       Z28, Z0, Z0
	VCMPPS       $5, Z26, Z0, K1, K2
	VMULPS       Z16, Z0, Z1
	VRNDSCALEPS  $0, Z1, Z1
	VMOVAPS      Z0, Z2
	VFNMADD231PS Z17, Z1, Z2
	VFMADD231PS  Z18, Z1, Z2
	VMULPS       Z2, Z2, Z3
	VMOVAPS      Z19, Z4
	VFMADD213PS  Z20, Z2, Z4
	VFMADD213PS  Z21, Z2, Z4
	VFMADD213PS  Z22, Z2, Z4
	VFMADD213PS  Z23, Z2, Z4
	VFMADD213PS  Z24, Z2, Z4
	VFMADD213PS  Z2, Z3, Z4
	VADDPS       Z25, Z4, Z4
	VCVTPS2DQ    Z1, Z5
	VPADDD       Z27, Z5, Z5
	VPSLLD       $23, Z5, Z5
	VMULPS.Z     Z5, Z4, K2, Z4
	VMOVUPS      Z4, (SI)
	VADDPS       Z4, Z6, Z6
	ADDQ         $64, SI
	DECQ         CX
	JNZ          exp512

	VEXTRACTF64X4 $1, Z6, Y7
	VADDPS        Y7, Y6, Y6
	VEXTRACTF128  $1, Y6, X7
	VADDPS        X7, X6, X6
	VHADDPS       X6, X6, X6
	VHADDPS       X6, X6, X6
	VMOVSS        X6, ret+24(FP)
	VZEROUPPER
	RET

// func attnRowExpAVX2(s *float32, mask uint64, m float32) float32
// attnRowExpAVX512 in eight ymm (lane masks as in attnRowMaxAVX2).
TEXT ·attnRowExpAVX2(SB), NOSPLIT, $0-28
	MOVQ         s+0(FP), SI
	MOVQ         mask+8(FP), AX
	VBROADCASTSS m+16(FP), Y15
	VXORPS       Y14, Y14, Y14
	VMOVUPS      attnC<>+384(SB), Y13
	VMOVUPS      attnC<>+320(SB), Y12
	VMOVUPS      attnC<>+0(SB), Y11
	VMOVUPS      attnC<>+32(SB), Y10
	VMOVUPS      attnC<>+64(SB), Y9
	VMOVUPS      attnC<>+352(SB), Y8
	MOVQ         $8, CX

exp2:
	MOVL         AX, DX
	ANDL         $0xff, DX
	VMOVD        DX, X5
	VPBROADCASTD X5, Y5
	VPAND        Y13, Y5, Y5
	VPCMPEQD     Y13, Y5, Y5
	VMOVUPS      (SI), Y0
	VSUBPS       Y15, Y0, Y0
	VCMPPS       $5, Y12, Y0, Y6
	VANDPS       Y6, Y5, Y5
	VMULPS       Y11, Y0, Y1
	VROUNDPS     $0, Y1, Y1
	VMOVAPS      Y0, Y2
	VFNMADD231PS Y10, Y1, Y2
	VFMADD231PS  Y9, Y1, Y2
	VMULPS       Y2, Y2, Y3
	VMOVUPS      attnC<>+96(SB), Y4
	VFMADD213PS  attnC<>+128(SB), Y2, Y4
	VFMADD213PS  attnC<>+160(SB), Y2, Y4
	VFMADD213PS  attnC<>+192(SB), Y2, Y4
	VFMADD213PS  attnC<>+224(SB), Y2, Y4
	VFMADD213PS  attnC<>+256(SB), Y2, Y4
	VFMADD213PS  Y2, Y3, Y4
	VADDPS       attnC<>+288(SB), Y4, Y4
	VCVTPS2DQ    Y1, Y7
	VPADDD       Y8, Y7, Y7
	VPSLLD       $23, Y7, Y7
	VMULPS       Y7, Y4, Y4
	VANDPS       Y5, Y4, Y4
	VMOVUPS      Y4, (SI)
	VADDPS       Y4, Y14, Y14
	SHRQ         $8, AX
	ADDQ         $32, SI
	DECQ         CX
	JNZ          exp2

	VEXTRACTF128 $1, Y14, X7
	VADDPS       X7, X14, X14
	VHADDPS      X14, X14, X14
	VHADDPS      X14, X14, X14
	VMOVSS       X14, ret+24(FP)
	VZEROUPPER
	RET

// func attnPVAVX512(acc, p, v *float32, dp, n int, corr *[4]float32)
// acc[r*dp+c] = acc[r*dp+c]·corr[r] + Σ_{j<n} p[r*64+j]·v[j*dp+c] for
// r < 4, c < dp (a multiple of 16): 4 rows × 4 zmm of values in Z0..Z15
// per 64 columns, then 4 rows × 1 zmm per 16 left.
TEXT ·attnPVAVX512(SB), NOSPLIT, $0-48
	MOVQ         acc+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         v+16(FP), DX
	MOVQ         dp+24(FP), BX
	MOVQ         corr+40(FP), AX
	VBROADCASTSS (AX), Z28
	VBROADCASTSS 4(AX), Z29
	VBROADCASTSS 8(AX), Z30
	VBROADCASTSS 12(AX), Z31
	SHLQ         $2, BX
	LEAQ         (DI)(BX*2), R12
	MOVQ         BX, CX
	SHRQ         $8, CX
	JZ           pv512tail

pv512cols:
	VMULPS (DI), Z28, Z0
	VMULPS 64(DI), Z28, Z1
	VMULPS 128(DI), Z28, Z2
	VMULPS 192(DI), Z28, Z3
	VMULPS (DI)(BX*1), Z29, Z4
	VMULPS 64(DI)(BX*1), Z29, Z5
	VMULPS 128(DI)(BX*1), Z29, Z6
	VMULPS 192(DI)(BX*1), Z29, Z7
	VMULPS (R12), Z30, Z8
	VMULPS 64(R12), Z30, Z9
	VMULPS 128(R12), Z30, Z10
	VMULPS 192(R12), Z30, Z11
	VMULPS (R12)(BX*1), Z31, Z12
	VMULPS 64(R12)(BX*1), Z31, Z13
	VMULPS 128(R12)(BX*1), Z31, Z14
	VMULPS 192(R12)(BX*1), Z31, Z15
	MOVQ   SI, R9
	MOVQ   DX, R10
	MOVQ   n+32(FP), R11

pv512keys:
	VMOVUPS      (R10), Z16
	VMOVUPS      64(R10), Z17
	VMOVUPS      128(R10), Z18
	VMOVUPS      192(R10), Z19
	VBROADCASTSS (R9), Z20
	VBROADCASTSS 256(R9), Z21
	VBROADCASTSS 512(R9), Z22
	VBROADCASTSS 768(R9), Z23
	FMA4X4Z
	ADDQ         $4, R9
	ADDQ         BX, R10
	DECQ         R11
	JNZ          pv512keys

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, (DI)(BX*1)
	VMOVUPS Z5, 64(DI)(BX*1)
	VMOVUPS Z6, 128(DI)(BX*1)
	VMOVUPS Z7, 192(DI)(BX*1)
	VMOVUPS Z8, (R12)
	VMOVUPS Z9, 64(R12)
	VMOVUPS Z10, 128(R12)
	VMOVUPS Z11, 192(R12)
	VMOVUPS Z12, (R12)(BX*1)
	VMOVUPS Z13, 64(R12)(BX*1)
	VMOVUPS Z14, 128(R12)(BX*1)
	VMOVUPS Z15, 192(R12)(BX*1)
	ADDQ    $256, DI
	ADDQ    $256, R12
	ADDQ    $256, DX
	DECQ    CX
	JNZ     pv512cols

pv512tail:
	MOVQ BX, CX
	SHRQ $6, CX
	ANDQ $3, CX
	JZ   pv512done

pv512col:
	VMULPS (DI), Z28, Z0
	VMULPS (DI)(BX*1), Z29, Z1
	VMULPS (R12), Z30, Z2
	VMULPS (R12)(BX*1), Z31, Z3
	MOVQ   SI, R9
	MOVQ   DX, R10
	MOVQ   n+32(FP), R11

pv512key:
	VMOVUPS      (R10), Z16
	VBROADCASTSS (R9), Z20
	VBROADCASTSS 256(R9), Z21
	VBROADCASTSS 512(R9), Z22
	VBROADCASTSS 768(R9), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z16, Z21, Z1
	VFMADD231PS  Z16, Z22, Z2
	VFMADD231PS  Z16, Z23, Z3
	ADDQ         $4, R9
	ADDQ         BX, R10
	DECQ         R11
	JNZ          pv512key

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, (DI)(BX*1)
	VMOVUPS Z2, (R12)
	VMOVUPS Z3, (R12)(BX*1)
	ADDQ    $64, DI
	ADDQ    $64, R12
	ADDQ    $64, DX
	DECQ    CX
	JNZ     pv512col

pv512done:
	VZEROUPPER
	RET

// func attnPVAVX2(acc, p, v *float32, dp, n int, corr *[4]float32)
// attnPVAVX512 with 4 rows × 2 ymm (16 columns) in Y0..Y7 per pass.
TEXT ·attnPVAVX2(SB), NOSPLIT, $0-48
	MOVQ         acc+0(FP), DI
	MOVQ         p+8(FP), SI
	MOVQ         v+16(FP), DX
	MOVQ         dp+24(FP), BX
	MOVQ         corr+40(FP), AX
	VBROADCASTSS (AX), Y12
	VBROADCASTSS 4(AX), Y13
	VBROADCASTSS 8(AX), Y14
	VBROADCASTSS 12(AX), Y15
	SHLQ         $2, BX
	LEAQ         (DI)(BX*2), R12
	MOVQ         BX, CX
	SHRQ         $6, CX

pv2cols:
	VMULPS (DI), Y12, Y0
	VMULPS 32(DI), Y12, Y1
	VMULPS (DI)(BX*1), Y13, Y2
	VMULPS 32(DI)(BX*1), Y13, Y3
	VMULPS (R12), Y14, Y4
	VMULPS 32(R12), Y14, Y5
	VMULPS (R12)(BX*1), Y15, Y6
	VMULPS 32(R12)(BX*1), Y15, Y7
	MOVQ   SI, R9
	MOVQ   DX, R10
	MOVQ   n+32(FP), R11

pv2keys:
	VMOVUPS      (R10), Y8
	VMOVUPS      32(R10), Y9
	VBROADCASTSS (R9), Y10
	VBROADCASTSS 256(R9), Y11
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS 512(R9), Y10
	VBROADCASTSS 768(R9), Y11
	VFMADD231PS  Y8, Y10, Y4
	VFMADD231PS  Y9, Y10, Y5
	VFMADD231PS  Y8, Y11, Y6
	VFMADD231PS  Y9, Y11, Y7
	ADDQ         $4, R9
	ADDQ         BX, R10
	DECQ         R11
	JNZ          pv2keys

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (DI)(BX*1)
	VMOVUPS Y3, 32(DI)(BX*1)
	VMOVUPS Y4, (R12)
	VMOVUPS Y5, 32(R12)
	VMOVUPS Y6, (R12)(BX*1)
	VMOVUPS Y7, 32(R12)(BX*1)
	ADDQ    $64, DI
	ADDQ    $64, R12
	ADDQ    $64, DX
	DECQ    CX
	JNZ     pv2cols
	VZEROUPPER
	RET

// siluMulAVX2 (the MoE's SiLU times up, silu_amd64.go) is here to share
// attnC's expf constants.

// func siluMulAVX2(gate, up *float32, n8 int)
// gate[i] = gate[i] / (1 + e^-gate[i]) · up[i] for i < 8·n8, eight at a time. e^x
// (x = -g) is expf's: n = x·log2 e rounded to nearest, r = x - n·ln 2 (two
// parts), e^r by the polynomial, 2^n put into the exponent, and 0 where
// x < -87.3. The caller keeps g >= -80 (not NaN), so 2^n stays normal.
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-24
	MOVQ    gate+0(FP), DI
	MOVQ    up+8(FP), SI
	MOVQ    n8+16(FP), CX
	VMOVUPS attnC<>+0(SB), Y15
	VMOVUPS attnC<>+32(SB), Y14
	VMOVUPS attnC<>+64(SB), Y13
	VMOVUPS attnC<>+288(SB), Y6
	VMOVUPS attnC<>+320(SB), Y5
	VMOVUPS attnC<>+352(SB), Y4
	TESTQ   CX, CX
	JZ      done

loop:
	VMOVUPS      (DI), Y0
	VXORPS       Y1, Y1, Y1
	VSUBPS       Y0, Y1, Y1
	VCMPPS       $5, Y5, Y1, Y3
	VMULPS       Y15, Y1, Y2
	VROUNDPS     $0, Y2, Y2
	VFNMADD231PS Y14, Y2, Y1
	VFMADD231PS  Y13, Y2, Y1
	VMOVUPS      attnC<>+96(SB), Y7
	VFMADD213PS  attnC<>+128(SB), Y1, Y7
	VFMADD213PS  attnC<>+160(SB), Y1, Y7
	VFMADD213PS  attnC<>+192(SB), Y1, Y7
	VFMADD213PS  attnC<>+224(SB), Y1, Y7
	VFMADD213PS  attnC<>+256(SB), Y1, Y7
	VMULPS       Y1, Y1, Y8
	VFMADD213PS  Y1, Y8, Y7
	VADDPS       Y6, Y7, Y7
	VCVTPS2DQ    Y2, Y9
	VPADDD       Y4, Y9, Y9
	VPSLLD       $23, Y9, Y9
	VMULPS       Y9, Y7, Y7
	VANDPS       Y3, Y7, Y7
	VADDPS       Y6, Y7, Y7
	VDIVPS       Y7, Y0, Y0
	VMULPS       (SI), Y0, Y0
	VMOVUPS      Y0, (DI)
	ADDQ         $32, DI
	ADDQ         $32, SI
	DECQ         CX
	JNZ          loop

done:
	VZEROUPPER
	RET
