package quant

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
)

// rowErrors returns the RMSE and the importance-weighted RMSE of got
// against want.
func rowErrors(want, got, imat []float32) (rmse, wrmse float64) {
	var s, sw, wsum float64
	for j := range want {
		d := float64(want[j]) - float64(got[j])
		s += d * d
		sw += float64(imat[j]) * d * d
		wsum += float64(imat[j])
	}
	return math.Sqrt(s / float64(len(want))), math.Sqrt(sw / wsum)
}

// TestQuantizeAccuracy quantizes the fixture input with and without the
// importance matrix and checks, row by row, that the error of every type is
// no larger than llama.cpp's (plain RMSE without the matrix, imatrix-weighted
// RMSE with it). With -v it prints the comparison table of the README.
func TestQuantizeAccuracy(t *testing.T) {
	ix := loadIndex(t)
	input := readF32(t, "input.f32.bin")
	imat := readF32(t, "imatrix.f32.bin")
	rows, cols := ix.Input.Rows, ix.Input.Cols
	var table strings.Builder
	fmt.Fprintf(&table, "| type | rmse go | rmse llama.cpp | mean rel rmse go | llama.cpp | imatrix-weighted rmse go | llama.cpp | imat mean rel go | llama.cpp |\n")
	fmt.Fprintf(&table, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, e := range fixtureTypes(t) {
		typ, _ := ParseType(e.Type)
		f, _ := FormatOf(typ)
		n, _ := RowBytes(typ, cols)
		fmt.Fprintf(&table, "| %s ", e.Type)
		for _, vname := range []string{"plain", "imatrix"} {
			v := e.Variants[vname]
			var im []float32
			if vname == "imatrix" {
				if v == nil {
					v = e.Variants["plain"] // q8_0, f16, bf16 ignore the matrix
				}
				im = imat
			}
			blocks := make([]byte, rows*n)
			deq := make([]float32, rows*cols)
			var sum, ref, relGo, relRef float64
			for r := 0; r < rows; r++ {
				x := input[r*cols : (r+1)*cols]
				if err := Quantize(typ, blocks[r*n:(r+1)*n], x, im); err != nil {
					t.Fatal(err)
				}
				y := deq[r*cols : (r+1)*cols]
				f.Dequantize(y, blocks[r*n:(r+1)*n])
				rmse, wrmse := rowErrors(x, y, imat)
				want := v.Stats.Rows[r]
				got, lim := rmse, want.RMSE
				if im != nil {
					got, lim = wrmse, want.RMSEImat
				}
				if got > lim*(1+1e-6) {
					t.Errorf("%s/%s row %d (%s): rmse %.6g > llama.cpp %.6g", e.Type, vname, r, ix.Input.RowKinds[r], got, lim)
				}
				if ix.Input.RowKinds[r] == "zeros" {
					for _, v := range y {
						if v != 0 {
							t.Errorf("%s/%s: zeros row dequantizes to %g", e.Type, vname, v)
							break
						}
					}
				}
				sum += got * got
				ref += lim * lim
				var norm float64
				for _, v := range x {
					norm += float64(v) * float64(v)
				}
				norm = math.Sqrt(norm / float64(cols))
				if norm > 0 {
					relGo += got / norm
					relRef += lim / norm
				}
			}
			fmt.Fprintf(&table, "| %.4g | %.4g | %.4g | %.4g ", math.Sqrt(sum/float64(rows)), math.Sqrt(ref/float64(rows)), relGo/float64(rows-1), relRef/float64(rows-1))
			if vname == "plain" && (typ == F16 || typ == BF16) {
				if !bytes.Equal(blocks, readFile(t, v.Blocks)) {
					t.Errorf("%s: conversion differs from ggml's", e.Type)
				}
			}
		}
		fmt.Fprintf(&table, "|\n")
	}
	t.Logf("quantization error, Go vs llama.cpp (8 rows x 512 of testdata/quant/input.f32.bin):\n%s", table.String())
}
