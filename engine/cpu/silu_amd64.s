//go:build amd64 && !purego

#include "textflag.h"

// Eight-lane constants of siluMulAVX2: the Cephes expf of exp.go (log2 e at
// +0, ln 2 in two parts at +32 and +64, the polynomial p0..p5 at +96..+256),
// 1 at +288, the underflow bound -87.3 at +320 and the exponent bias 127 at
// +352.
DATA siluC<>+0(SB)/4, $0x3fb8aa3b
DATA siluC<>+4(SB)/4, $0x3fb8aa3b
DATA siluC<>+8(SB)/4, $0x3fb8aa3b
DATA siluC<>+12(SB)/4, $0x3fb8aa3b
DATA siluC<>+16(SB)/4, $0x3fb8aa3b
DATA siluC<>+20(SB)/4, $0x3fb8aa3b
DATA siluC<>+24(SB)/4, $0x3fb8aa3b
DATA siluC<>+28(SB)/4, $0x3fb8aa3b
DATA siluC<>+32(SB)/4, $0x3f318000
DATA siluC<>+36(SB)/4, $0x3f318000
DATA siluC<>+40(SB)/4, $0x3f318000
DATA siluC<>+44(SB)/4, $0x3f318000
DATA siluC<>+48(SB)/4, $0x3f318000
DATA siluC<>+52(SB)/4, $0x3f318000
DATA siluC<>+56(SB)/4, $0x3f318000
DATA siluC<>+60(SB)/4, $0x3f318000
DATA siluC<>+64(SB)/4, $0x395e8083
DATA siluC<>+68(SB)/4, $0x395e8083
DATA siluC<>+72(SB)/4, $0x395e8083
DATA siluC<>+76(SB)/4, $0x395e8083
DATA siluC<>+80(SB)/4, $0x395e8083
DATA siluC<>+84(SB)/4, $0x395e8083
DATA siluC<>+88(SB)/4, $0x395e8083
DATA siluC<>+92(SB)/4, $0x395e8083
DATA siluC<>+96(SB)/4, $0x39506967
DATA siluC<>+100(SB)/4, $0x39506967
DATA siluC<>+104(SB)/4, $0x39506967
DATA siluC<>+108(SB)/4, $0x39506967
DATA siluC<>+112(SB)/4, $0x39506967
DATA siluC<>+116(SB)/4, $0x39506967
DATA siluC<>+120(SB)/4, $0x39506967
DATA siluC<>+124(SB)/4, $0x39506967
DATA siluC<>+128(SB)/4, $0x3ab743ce
DATA siluC<>+132(SB)/4, $0x3ab743ce
DATA siluC<>+136(SB)/4, $0x3ab743ce
DATA siluC<>+140(SB)/4, $0x3ab743ce
DATA siluC<>+144(SB)/4, $0x3ab743ce
DATA siluC<>+148(SB)/4, $0x3ab743ce
DATA siluC<>+152(SB)/4, $0x3ab743ce
DATA siluC<>+156(SB)/4, $0x3ab743ce
DATA siluC<>+160(SB)/4, $0x3c088908
DATA siluC<>+164(SB)/4, $0x3c088908
DATA siluC<>+168(SB)/4, $0x3c088908
DATA siluC<>+172(SB)/4, $0x3c088908
DATA siluC<>+176(SB)/4, $0x3c088908
DATA siluC<>+180(SB)/4, $0x3c088908
DATA siluC<>+184(SB)/4, $0x3c088908
DATA siluC<>+188(SB)/4, $0x3c088908
DATA siluC<>+192(SB)/4, $0x3d2aa9c1
DATA siluC<>+196(SB)/4, $0x3d2aa9c1
DATA siluC<>+200(SB)/4, $0x3d2aa9c1
DATA siluC<>+204(SB)/4, $0x3d2aa9c1
DATA siluC<>+208(SB)/4, $0x3d2aa9c1
DATA siluC<>+212(SB)/4, $0x3d2aa9c1
DATA siluC<>+216(SB)/4, $0x3d2aa9c1
DATA siluC<>+220(SB)/4, $0x3d2aa9c1
DATA siluC<>+224(SB)/4, $0x3e2aaaaa
DATA siluC<>+228(SB)/4, $0x3e2aaaaa
DATA siluC<>+232(SB)/4, $0x3e2aaaaa
DATA siluC<>+236(SB)/4, $0x3e2aaaaa
DATA siluC<>+240(SB)/4, $0x3e2aaaaa
DATA siluC<>+244(SB)/4, $0x3e2aaaaa
DATA siluC<>+248(SB)/4, $0x3e2aaaaa
DATA siluC<>+252(SB)/4, $0x3e2aaaaa
DATA siluC<>+256(SB)/4, $0x3f000000
DATA siluC<>+260(SB)/4, $0x3f000000
DATA siluC<>+264(SB)/4, $0x3f000000
DATA siluC<>+268(SB)/4, $0x3f000000
DATA siluC<>+272(SB)/4, $0x3f000000
DATA siluC<>+276(SB)/4, $0x3f000000
DATA siluC<>+280(SB)/4, $0x3f000000
DATA siluC<>+284(SB)/4, $0x3f000000
DATA siluC<>+288(SB)/4, $0x3f800000
DATA siluC<>+292(SB)/4, $0x3f800000
DATA siluC<>+296(SB)/4, $0x3f800000
DATA siluC<>+300(SB)/4, $0x3f800000
DATA siluC<>+304(SB)/4, $0x3f800000
DATA siluC<>+308(SB)/4, $0x3f800000
DATA siluC<>+312(SB)/4, $0x3f800000
DATA siluC<>+316(SB)/4, $0x3f800000
DATA siluC<>+320(SB)/4, $0xc2ae999a
DATA siluC<>+324(SB)/4, $0xc2ae999a
DATA siluC<>+328(SB)/4, $0xc2ae999a
DATA siluC<>+332(SB)/4, $0xc2ae999a
DATA siluC<>+336(SB)/4, $0xc2ae999a
DATA siluC<>+340(SB)/4, $0xc2ae999a
DATA siluC<>+344(SB)/4, $0xc2ae999a
DATA siluC<>+348(SB)/4, $0xc2ae999a
DATA siluC<>+352(SB)/4, $0x0000007f
DATA siluC<>+356(SB)/4, $0x0000007f
DATA siluC<>+360(SB)/4, $0x0000007f
DATA siluC<>+364(SB)/4, $0x0000007f
DATA siluC<>+368(SB)/4, $0x0000007f
DATA siluC<>+372(SB)/4, $0x0000007f
DATA siluC<>+376(SB)/4, $0x0000007f
DATA siluC<>+380(SB)/4, $0x0000007f
GLOBL siluC<>(SB), RODATA|NOPTR, $384

// func siluMulAVX2(gate, up *float32, n8 int)
// gate[i] = gate[i] / (1 + e^-gate[i]) · up[i] for i < 8·n8, eight at a time. e^x
// (x = -g) is expf's: n = x·log2 e rounded to nearest, r = x - n·ln 2 (two
// parts), e^r by the polynomial, 2^n put into the exponent, and 0 where
// x < -87.3. The caller keeps g >= -80 (not NaN), so 2^n stays normal.
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-24
	MOVQ    gate+0(FP), DI
	MOVQ    up+8(FP), SI
	MOVQ    n8+16(FP), CX
	VMOVUPS siluC<>+0(SB), Y15
	VMOVUPS siluC<>+32(SB), Y14
	VMOVUPS siluC<>+64(SB), Y13
	VMOVUPS siluC<>+288(SB), Y6
	VMOVUPS siluC<>+320(SB), Y5
	VMOVUPS siluC<>+352(SB), Y4
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
	VMOVUPS      siluC<>+96(SB), Y7
	VFMADD213PS  siluC<>+128(SB), Y1, Y7
	VFMADD213PS  siluC<>+160(SB), Y1, Y7
	VFMADD213PS  siluC<>+192(SB), Y1, Y7
	VFMADD213PS  siluC<>+224(SB), Y1, Y7
	VFMADD213PS  siluC<>+256(SB), Y1, Y7
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
