// Q8STORE2X4 ends one pair of dotQ8_0x2x4AVX2 / dotQ8_0x2x4AVX512: the
// eight lane sums in X0..X7 (row 0 in X0..X3, row 1 in X4..X7, one per
// activation row) stored to out at pair BX (DX = the quad's out), then on to
// the next pair (pair2x4) or the next quad (quad2x4): out by 4 rows, x by 4
// rows, xd by one quad of scales.
#define Q8STORE2X4 \
	LEAQ (DX)(BX*8), DX \
	MOVQ ldo+80(FP), AX \
	SHLQ $2, AX \
	VUNPCKLPS X4, X0, X0 \
	VMOVQ X0, (DX) \
	VUNPCKLPS X5, X1, X1 \
	VMOVQ X1, (DX)(AX*1) \
	VUNPCKLPS X6, X2, X2 \
	VMOVQ X2, (DX)(AX*2) \
	ADDQ AX, DX \
	VUNPCKLPS X7, X3, X3 \
	VMOVQ X3, (DX)(AX*2) \
	INCQ BX \
	MOVQ BX, 24(SP) \
	CMPQ BX, np+56(FP) \
	JLT pair2x4 \
 \
	MOVQ ldo+80(FP), AX \
	SHLQ $4, AX \
	ADDQ AX, 32(SP) \
	MOVQ xstride+32(FP), AX \
	SHLQ $2, AX \
	ADDQ AX, 0(SP) \
	MOVQ nb+48(FP), AX \
	INCQ AX \
	SHRQ $1, AX \
	SHLQ $5, AX \
	ADDQ AX, 8(SP) \
	DECQ 16(SP) \
	JNZ quad2x4
