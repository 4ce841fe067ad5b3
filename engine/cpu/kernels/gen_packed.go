//go:build ignore

// gen_packed writes packed_amd64.s, the packed-weight K-format kernels:
// go run gen_packed.go. Each format differs only in how it rebuilds the 32
// unsigned codes of chunk c (activation positions 32c..32c+31) of a block
// in Y8; the multiply-accumulate and the per-block fold are shared.
package main

import (
	"bytes"
	"fmt"
	"os"
)

var b bytes.Buffer

func p(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }

// format describes one K format: block bytes, the masks it keeps in Y15 and
// Y14, and the unpack of chunk c of the block at register w into Y8 (Y9 is
// scratch).
type format struct {
	name, typ string
	bb        int
	y15, y14  string
	unpack    func(w string, c int)
}

// shift shifts the 16-bit words of reg left (s > 0) or right (s < 0) by
// |s|; the mask that follows keeps only bits that stayed in their byte.
func shift(reg string, s int) {
	if s > 0 {
		p("\tVPSLLW $%d, %s, %s", s, reg, reg)
	} else if s < 0 {
		p("\tVPSRLW $%d, %s, %s", -s, reg, reg)
	}
}

var formats = []format{
	{"Q2K", "q2_K", 84, "m03", "", func(w string, c int) {
		h, s := c/4, c%4
		p("\tVMOVDQU %d(%s), Y8", 16+32*h, w)
		shift("Y8", -2*s)
		p("\tVPAND Y15, Y8, Y8")
	}},
	{"Q3K", "q3_K", 110, "m03", "m04", func(w string, c int) {
		h, s := c/4, c%4
		p("\tVMOVDQU %d(%s), Y8", 32+32*h, w)
		shift("Y8", -2*s)
		p("\tVPAND Y15, Y8, Y8")
		p("\tVMOVDQU 0(%s), Y9", w)
		shift("Y9", 2-(4*h+s))
		p("\tVPAND Y14, Y9, Y9")
		p("\tVPOR Y9, Y8, Y8")
	}},
	{"Q4K", "q4_K", 144, "m0f", "", func(w string, c int) {
		p("\tVMOVDQU %d(%s), Y8", 16+32*(c/2), w)
		shift("Y8", -4*(c%2))
		p("\tVPAND Y15, Y8, Y8")
	}},
	{"Q5K", "q5_K", 176, "m0f", "m10", func(w string, c int) {
		p("\tVMOVDQU %d(%s), Y8", 48+32*(c/2), w)
		shift("Y8", -4*(c%2))
		p("\tVPAND Y15, Y8, Y8")
		p("\tVMOVDQU 16(%s), Y9", w)
		shift("Y9", 4-c)
		p("\tVPAND Y14, Y9, Y9")
		p("\tVPOR Y9, Y8, Y8")
	}},
	{"Q6K", "q6_K", 210, "m0f", "m30", func(w string, c int) {
		h, s := c/4, c%4
		p("\tVMOVDQU %d(%s), Y8", 64*h+32*(s%2), w)
		shift("Y8", -4*(s/2))
		p("\tVPAND Y15, Y8, Y8")
		p("\tVMOVDQU %d(%s), Y9", 128+32*h, w)
		shift("Y9", 4-2*s)
		p("\tVPAND Y14, Y9, Y9")
		p("\tVPOR Y9, Y8, Y8")
	}},
}

var masks = []struct {
	name string
	v    byte
}{{"m03", 0x03}, {"m04", 0x04}, {"m0f", 0x0f}, {"m10", 0x10}, {"m30", 0x30}}

// fold adds one (weight row, activation row) block into its float
// accumulator slot: dx·fS·S − dx·fB·Σ coef·bsum, then clears S.
func fold(rec, x, acc string, slot int) {
	p("\tVBROADCASTSS (%s), Y8", x)
	p("\tVBROADCASTSS 64(%s), Y9", rec)
	p("\tVMULPS Y8, Y9, Y9")
	p("\tVCVTDQ2PS %s, Y10", acc)
	p("\tVMOVUPS %d(DX), Y11", 32*slot)
	p("\tVFMADD231PS Y9, Y10, Y11")
	p("\tVMOVDQU 260(%s), Y10", x)
	p("\tVPMADDWD 32(%s), Y10, Y10", rec)
	p("\tVCVTDQ2PS Y10, Y10")
	p("\tVBROADCASTSS 68(%s), Y9", rec)
	p("\tVMULPS Y8, Y9, Y9")
	p("\tVFNMADD231PS Y9, Y10, Y11")
	p("\tVMOVUPS Y11, %d(DX)", 32*slot)
	p("\tVPXOR %s, %s, %s", acc, acc, acc)
}

// scales loads the int16 scales of groups 2c and 2c+1 into the low and
// high halves of Y11 (Y13 holds the byte shuffle that spreads them).
func scales(rec string, c int) {
	p("\tVPBROADCASTD %d(%s), Y11", 4*c, rec)
	p("\tVPSHUFB Y13, Y11, Y11")
}

// mac accumulates Σ scale·u·a of chunk c (codes in Y8, scales in Y11) with
// activation row x into acc.
func mac(x string, c int, acc string) {
	p("\tVPMADDUBSW %d(%s), Y8, Y10", 4+32*c, x)
	p("\tVPMADDWD Y11, Y10, Y10")
	p("\tVPADDD Y10, %s, %s", acc, acc)
}

func setupMasks(f format) {
	p("\tVMOVDQU spread<>(SB), Y13")
	p("\tVMOVDQU %s<>(SB), Y15", f.y15)
	if f.y14 != "" {
		p("\tVMOVDQU %s<>(SB), Y14", f.y14)
	}
}

// kernel2x4 emits the kernel of two weight rows × four activation rows.
func kernel2x4(f format) {
	p("// func pk%sx2x4AVX2(w *byte, stride int, recs *byte, nb int, x *byte, xstride int, acc *float32)", f.name)
	p("// Two %s rows (stride bytes apart; scale records nb·72 bytes per row)", f.typ)
	p("// against four q8_K rows (xstride bytes apart); adds 8 float32 partial")
	p("// sums per (weight row r, activation row a) to acc[8·(4r+a):].")
	p("TEXT ·pk%sx2x4AVX2(SB), NOSPLIT, $0-56", f.name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ stride+8(FP), AX")
	p("\tLEAQ (SI)(AX*1), R8")
	p("\tMOVQ recs+16(FP), R9")
	p("\tMOVQ nb+24(FP), CX")
	p("\tIMUL3Q $72, CX, AX")
	p("\tLEAQ (R9)(AX*1), R10")
	p("\tMOVQ x+32(FP), DI")
	p("\tMOVQ xstride+40(FP), AX")
	p("\tLEAQ (DI)(AX*1), R11")
	p("\tLEAQ (R11)(AX*1), R12")
	p("\tLEAQ (R12)(AX*1), R13")
	p("\tMOVQ acc+48(FP), DX")
	setupMasks(f)
	for i := 0; i < 8; i++ {
		p("\tVPXOR Y%d, Y%d, Y%d", i, i, i)
	}
	p("")
	p("block:")
	xs := []string{"DI", "R11", "R12", "R13"}
	for c := 0; c < 8; c++ {
		for r, wr := range []string{"SI", "R8"} {
			rec := []string{"R9", "R10"}[r]
			f.unpack(wr, c)
			scales(rec, c)
			for a, x := range xs {
				mac(x, c, fmt.Sprintf("Y%d", 4*r+a))
			}
		}
	}
	for r, rec := range []string{"R9", "R10"} {
		for a, x := range xs {
			fold(rec, x, fmt.Sprintf("Y%d", 4*r+a), 4*r+a)
		}
	}
	p("\tADDQ $%d, SI", f.bb)
	p("\tADDQ $%d, R8", f.bb)
	p("\tADDQ $72, R9")
	p("\tADDQ $72, R10")
	for _, x := range xs {
		p("\tADDQ $292, %s", x)
	}
	p("\tDECQ CX")
	p("\tJNZ block")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// kernel4x1 emits the kernel of four weight rows × one activation row.
func kernel4x1(f format) {
	p("// func pk%sx4x1AVX2(w *byte, stride int, recs *byte, nb int, x *byte, acc *float32)", f.name)
	p("// Four %s rows against one q8_K row; adds 8 partial sums per weight", f.typ)
	p("// row r to acc[8r:].")
	p("TEXT ·pk%sx4x1AVX2(SB), NOSPLIT, $0-48", f.name)
	p("\tMOVQ w+0(FP), SI")
	p("\tMOVQ stride+8(FP), AX")
	p("\tLEAQ (SI)(AX*1), R8")
	p("\tLEAQ (R8)(AX*1), R9")
	p("\tLEAQ (R9)(AX*1), R10")
	p("\tMOVQ recs+16(FP), R11")
	p("\tMOVQ nb+24(FP), CX")
	p("\tIMUL3Q $72, CX, AX")
	p("\tLEAQ (R11)(AX*1), R12")
	p("\tLEAQ (R12)(AX*1), R13")
	p("\tLEAQ (R13)(AX*1), BX")
	p("\tMOVQ x+32(FP), DI")
	p("\tMOVQ acc+40(FP), DX")
	setupMasks(f)
	for i := 0; i < 4; i++ {
		p("\tVPXOR Y%d, Y%d, Y%d", i, i, i)
	}
	p("")
	p("block:")
	ws := []string{"SI", "R8", "R9", "R10"}
	recs := []string{"R11", "R12", "R13", "BX"}
	for c := 0; c < 8; c++ {
		for r := range ws {
			f.unpack(ws[r], c)
			scales(recs[r], c)
			mac("DI", c, fmt.Sprintf("Y%d", r))
		}
	}
	for r := range ws {
		fold(recs[r], "DI", fmt.Sprintf("Y%d", r), r)
	}
	for _, w := range ws {
		p("\tADDQ $%d, %s", f.bb, w)
	}
	for _, r := range recs {
		p("\tADDQ $72, %s", r)
	}
	p("\tADDQ $292, DI")
	p("\tDECQ CX")
	p("\tJNZ block")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func main() {
	p("// Code generated by gen_packed.go; DO NOT EDIT.")
	p("")
	p("//go:build !purego")
	p("")
	p("#include \"textflag.h\"")
	p("")
	for _, m := range masks {
		for o := 0; o < 32; o += 8 {
			p("DATA %s<>+%d(SB)/8, $0x%016x", m.name, o, uint64(m.v)*0x0101010101010101)
		}
		p("GLOBL %s<>(SB), RODATA|NOPTR, $32", m.name)
		p("")
	}
	p("DATA spread<>+0(SB)/8, $0x0100010001000100")
	p("DATA spread<>+8(SB)/8, $0x0100010001000100")
	p("DATA spread<>+16(SB)/8, $0x0302030203020302")
	p("DATA spread<>+24(SB)/8, $0x0302030203020302")
	p("GLOBL spread<>(SB), RODATA|NOPTR, $32")
	p("")
	for _, f := range formats {
		kernel2x4(f)
		kernel4x1(f)
	}
	if err := os.WriteFile("packed_amd64.s", b.Bytes(), 0o644); err != nil {
		panic(err)
	}
}
