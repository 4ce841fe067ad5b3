//go:build ignore

// gen_packed writes the packed-weight K-format kernels: go run gen_packed.go.
// packed_amd64.s holds the AVX2 kernels, packed_avx512_amd64.s the AVX-512
// VNNI ones. Each format differs only in how it rebuilds the 32 unsigned
// codes of chunk c (activation positions 32c..32c+31) of a block (AVX2: in
// Y8; AVX-512: two chunks per ZMM register); the multiply-accumulate and the
// per-block fold are shared.
package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
)

var b bytes.Buffer

func p(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }

// format describes one K format: block bytes, the masks it keeps in Y15 and
// Y14, and the parts that rebuild chunk c (activation positions
// 32c..32c+31) of a block: each part loads 32 bytes, shifts them and keeps
// the bits of its mask (y15 for the first part, y14 for the second); the
// parts are ORed.
type format struct {
	name, typ string
	bb        int
	y15, y14  string
	parts     func(c int) []part
}

// part is one load of a chunk's unpack: 32 bytes at off in the block,
// shifted left by shift bits (right when negative) within 16-bit words.
type part struct{ off, shift int }

// unpack emits the AVX2 unpack of chunk c of the block at register w into
// Y8 (Y9 is scratch).
func (f format) unpack(w string, c int) {
	for i, q := range f.parts(c) {
		reg, mask := "Y8", "Y15"
		if i > 0 {
			reg, mask = "Y9", "Y14"
		}
		p("\tVMOVDQU %d(%s), %s", q.off, w, reg)
		shift(reg, q.shift)
		p("\tVPAND %s, %s, %s", mask, reg, reg)
		if i > 0 {
			p("\tVPOR Y9, Y8, Y8")
		}
	}
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
	{"Q2K", "q2_K", 84, "m03", "", func(c int) []part {
		h, s := c/4, c%4
		return []part{{16 + 32*h, -2 * s}}
	}},
	{"Q3K", "q3_K", 110, "m03", "m04", func(c int) []part {
		h, s := c/4, c%4
		return []part{{32 + 32*h, -2 * s}, {0, 2 - (4*h + s)}}
	}},
	{"Q4K", "q4_K", 144, "m0f", "", func(c int) []part {
		return []part{{16 + 32*(c/2), -4 * (c % 2)}}
	}},
	{"Q5K", "q5_K", 176, "m0f", "m10", func(c int) []part {
		return []part{{48 + 32*(c/2), -4 * (c % 2)}, {16, 4 - c}}
	}},
	{"Q6K", "q6_K", 210, "m0f", "m30", func(c int) []part {
		h, s := c/4, c%4
		return []part{{64*h + 32*(s%2), -4 * (s / 2)}, {128 + 32*h, 4 - 2*s}}
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
	prologue2x4()
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
	prologue4x1()
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
	b.Reset()
	writeAVX512()
	if err := os.WriteFile("packed_avx512_amd64.s", b.Bytes(), 0o644); err != nil {
		panic(err)
	}
}

// AVX-512 VNNI kernels (packed_avx512_amd64.s). ZMM register j of a block
// holds the 64 codes of chunks 2j and 2j+1 (activation positions
// 64j..64j+63), built from the same parts as the AVX2 unpack: both chunks'
// parts load the same 32 bytes (VBROADCASTI64X4) or the two halves of 64
// (VMOVDQU64), shifted alike (VPSRLW/VPSLLW) or each half its own way
// (VPROLVD: a rotation moves the masked bits like the shift, since they
// stay within their byte). 128-bit lane L of register j is group 4j+L.
//
// The group scales: VPDPBUSD sums four u8·s8 products into each int32
// lane, so lane L of register j is a quarter of group 4j+L's dot product;
// it fits int16 (|4·63·128| < 2^15). For the 128 positions of registers
// 2q and 2q+1, two VPDPBUSD into zeroed registers, VPACKSSDW (exact: no
// value saturates) puts the quarters of groups 8q+L and 8q+4+L side by
// side in lane L as int16, and one VPDPWSSD multiplies them by their int16
// scales (the record's eight scales of the half, broadcast to every lane
// and spread by VPSHUFB) and adds the pairs into the int32 accumulator:
// three multiply instructions per 128 positions and (weight row,
// activation row) where AVX2 uses eight (VPMADDUBSW + VPMADDWD per 32).
//
// The fold per block, (weight row r, activation row a): the 16 int32 lanes
// S become floats, times fS, minus fB·Σ coef·bsum (VPMADDWD of the
// record's coefficients and the q8_K group sums, 8 lanes; for q3_K and
// q6_K, where fS = fB, subtracted from S as integers first), times dx
// added to 16 float lanes kept in registers; the kernel ends by adding
// their two halves to acc's 8 partial sums.

// zparts returns the parts of ZMM register j: for each part, the parts of
// chunks 2j and 2j+1.
func zparts(f format, j int) [][2]part {
	a, c := f.parts(2*j), f.parts(2*j+1)
	var r [][2]part
	for i := range a {
		r = append(r, [2]part{a[i], c[i]})
	}
	return r
}

// oneFactor lists the formats whose records have fS = fB (the block scale
// d for both): their fold subtracts Σ coef·bsum from S in integers.
var oneFactor = map[string]bool{"Q3K": true, "Q6K": true}

// rots are the VPROLVD count vectors in use, by name.
var rots = map[string][2]int{}

// zunpack rebuilds ZMM register j of the block at w into dst (scratch is
// scratch); Z15 and Z14 hold the formats' masks.
func zunpack(f format, w string, j int, dst, scratch string) {
	for i, pp := range zparts(f, j) {
		reg := dst
		if i > 0 {
			reg = scratch
		}
		a, c := pp[0], pp[1]
		switch c.off - a.off {
		case 0:
			p("\tVBROADCASTI64X4 %d(%s), %s", a.off, w, reg)
		case 32:
			p("\tVMOVDQU64 %d(%s), %s", a.off, w, reg)
		default:
			panic("chunks not adjacent")
		}
		if a.shift == c.shift {
			shift(reg, a.shift)
		} else {
			name := fmt.Sprintf("rot%d_%d", a.shift&31, c.shift&31)
			rots[name] = [2]int{a.shift & 31, c.shift & 31}
			p("\tVPROLVD %s<>(SB), %s, %s", name, reg, reg)
		}
		if i == 0 {
			p("\tVPANDD Z15, %s, %s", reg, reg)
		} else {
			// dst |= scratch & Z14
			p("\tVPTERNLOGD $0xf8, Z14, %s, %s", scratch, dst)
		}
	}
}

// zkernel emits a kernel of len(ws) weight rows × len(xs) activation rows:
// int32 accumulators Z0.., float accumulators Z16.., one per pair
// (index len(xs)·r + a).
func zkernel(f format, ws, recs, xs []string) {
	np := len(ws) * len(xs)
	temps := [][2]string{{"Z12", "Z13"}, {"Z24", "Z25"}}
	bsum := []string{"Y26", "Y27", "Y29", "Y30"}
	p("\tVPBROADCASTD z%s<>(SB), Z15", f.y15)
	if f.y14 != "" {
		p("\tVPBROADCASTD z%s<>(SB), Z14", f.y14)
	}
	p("\tVMOVDQU64 zspread<>(SB), Z28")
	for i := 0; i < np; i++ {
		p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
		p("\tVPXORD Z%d, Z%d, Z%d", 16+i, 16+i, 16+i)
	}
	p("")
	p("block:")
	n := 0
	for q := 0; q < 2; q++ {
		for r, w := range ws {
			zunpack(f, w, 2*q, "Z8", "Z10")
			zunpack(f, w, 2*q+1, "Z9", "Z10")
			p("\tVBROADCASTI32X4 %d(%s), Z11", 16*q, recs[r])
			p("\tVPSHUFB Z28, Z11, Z11")
			for a, x := range xs {
				t := temps[n%2]
				n++
				p("\tVPXORD %s, %s, %s", t[0], t[0], t[0])
				p("\tVPDPBUSD %d(%s), Z8, %s", 4+128*q, x, t[0])
				p("\tVPXORD %s, %s, %s", t[1], t[1], t[1])
				p("\tVPDPBUSD %d(%s), Z9, %s", 4+128*q+64, x, t[1])
				p("\tVPACKSSDW %s, %s, %s", t[1], t[0], t[0])
				p("\tVPDPWSSD Z11, %s, Z%d", t[0], len(xs)*r+a)
			}
		}
	}
	for a, x := range xs {
		p("\tVMOVDQU32 260(%s), %s", x, bsum[a])
	}
	for r, rec := range recs {
		for a, x := range xs {
			i := len(xs)*r + a
			t := temps[n%2]
			n++
			p("\tVPMADDWD 32(%s), %s, %s", rec, bsum[a], "Y"+t[1][1:])
			if oneFactor[f.name] {
				// fS = fB: S − Σ coef·bsum in int32 (no overflow:
				// |S| < 2^28, |Σ coef·bsum| < 2^27).
				p("\tVPSUBD %s, Z%d, Z%d", t[1], i, i)
				p("\tVCVTDQ2PS Z%d, %s", i, t[0])
				p("\tVMULPS.BCST 64(%s), %s, %s", rec, t[0], t[0])
			} else {
				p("\tVCVTDQ2PS Z%d, %s", i, t[0])
				p("\tVMULPS.BCST 64(%s), %s, %s", rec, t[0], t[0])
				p("\tVCVTDQ2PS %s, %s", t[1], t[1])
				p("\tVFNMADD231PS.BCST 68(%s), %s, %s", rec, t[1], t[0])
			}
			p("\tVFMADD231PS.BCST (%s), %s, Z%d", x, t[0], 16+i)
			p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
		}
	}
	for _, w := range ws {
		p("\tADDQ $%d, %s", f.bb, w)
	}
	for _, r := range recs {
		p("\tADDQ $72, %s", r)
	}
	for _, x := range xs {
		p("\tADDQ $292, %s", x)
	}
	p("\tDECQ CX")
	p("\tJNZ block")
	for i := 0; i < np; i++ {
		p("\tVEXTRACTF64X4 $1, Z%d, Y12", 16+i)
		p("\tVADDPS Y%d, Y12, Y12", 16+i)
		p("\tVADDPS %d(DX), Y12, Y12", 32*i)
		p("\tVMOVUPS Y12, %d(DX)", 32*i)
	}
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

// zkernel2x4 emits the AVX-512 kernel of two weight rows × four activation
// rows (the arguments and results of pk<T>x2x4AVX2).
func zkernel2x4(f format) {
	p("// func pk%sx2x4AVX512(w *byte, stride int, recs *byte, nb int, x *byte, xstride int, acc *float32)", f.name)
	p("// Two %s rows against four q8_K rows, as pk%sx2x4AVX2.", f.typ, f.name)
	p("TEXT ·pk%sx2x4AVX512(SB), NOSPLIT, $0-56", f.name)
	prologue2x4()
	zkernel(f, []string{"SI", "R8"}, []string{"R9", "R10"}, []string{"DI", "R11", "R12", "R13"})
}

// zkernel4x1 emits the AVX-512 kernel of four weight rows × one activation
// row (the arguments and results of pk<T>x4x1AVX2).
func zkernel4x1(f format) {
	p("// func pk%sx4x1AVX512(w *byte, stride int, recs *byte, nb int, x *byte, acc *float32)", f.name)
	p("// Four %s rows against one q8_K row, as pk%sx4x1AVX2.", f.typ, f.name)
	p("TEXT ·pk%sx4x1AVX512(SB), NOSPLIT, $0-48", f.name)
	prologue4x1()
	zkernel(f, []string{"SI", "R8", "R9", "R10"}, []string{"R11", "R12", "R13", "BX"}, []string{"DI"})
}

// writeAVX512 writes packed_avx512_amd64.s into b.
func writeAVX512() {
	// The kernels first: they collect the rotation counts the data needs.
	for _, f := range formats {
		zkernel2x4(f)
		zkernel4x1(f)
	}
	body := bytes.Clone(b.Bytes())
	b.Reset()
	p("// Code generated by gen_packed.go; DO NOT EDIT.")
	p("")
	p("//go:build !purego")
	p("")
	p("#include \"textflag.h\"")
	p("")
	for _, m := range masks {
		p("DATA z%s<>+0(SB)/4, $0x%08x", m.name, uint32(m.v)*0x01010101)
		p("GLOBL z%s<>(SB), RODATA|NOPTR, $4", m.name)
		p("")
	}
	// zspread: lane L takes words L and 4+L of the eight broadcast scales,
	// four times each.
	for l := 0; l < 4; l++ {
		for h, g := range []int{l, 4 + l} {
			w := uint64(2*g) | uint64(2*g+1)<<8
			p("DATA zspread<>+%d(SB)/8, $0x%016x", 16*l+8*h, w*0x0001000100010001)
		}
	}
	p("GLOBL zspread<>(SB), RODATA|NOPTR, $64")
	p("")
	names := make([]string, 0, len(rots))
	for n := range rots {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := rots[n]
		for o := 0; o < 64; o += 8 {
			v := uint64(c[o/32])
			p("DATA %s<>+%d(SB)/8, $0x%016x", n, o, v|v<<32)
		}
		p("GLOBL %s<>(SB), RODATA|NOPTR, $64", n)
		p("")
	}
	b.Write(body)
}

// prologue2x4 loads the arguments of a 2x4 kernel (both sets): weight rows
// SI, R8; their scale records R9, R10; activation rows DI, R11, R12, R13;
// the block count CX; acc DX.
func prologue2x4() {
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
}

// prologue4x1 loads the arguments of a 4x1 kernel (both sets): weight rows
// SI, R8, R9, R10; their scale records R11, R12, R13, BX; the activation
// row DI; the block count CX; acc DX.
func prologue4x1() {
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
}
