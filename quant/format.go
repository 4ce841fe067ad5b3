package quant

import (
	"fmt"
	"math"
)

// Format is one row of the format table: the block layout of a storage type,
// its reference dequantizer and quantizer, and the activation format its dot
// product reads.
type Format struct {
	Type Type
	// Name is ggml's type name ("q4_K").
	Name string
	// BlockElems and BlockBytes give the block layout: BlockElems values are
	// stored in BlockBytes bytes. Plain element types have BlockElems 1.
	BlockElems, BlockBytes int
	// Dequantize writes len(dst) values decoded from src; len(dst) must be a
	// multiple of BlockElems and src must hold len(dst)/BlockElems blocks.
	// The result is bit-exact with ggml's to_float.
	Dequantize func(dst []float32, src []byte)
	// Quantize encodes src (a multiple of BlockElems values) into dst. When
	// imatrix is non-nil it holds the importance of each column of a row:
	// value j of src has importance imatrix[j % len(imatrix)], and the
	// quantizer minimises the importance-weighted squared error. nil for
	// types that cannot be produced.
	Quantize func(dst []byte, src []float32, imatrix []float32)
	// VecDotType is the format activations are quantized to for this type's
	// dot product (q8_0, q8_1, q8_K, or the type itself for floats).
	VecDotType Type
}

var formats = map[Type]*Format{
	F32:  {F32, "f32", 1, 4, dequantF32, quantizeF32, F32},
	F16:  {F16, "f16", 1, 2, dequantF16, quantizeF16, F16},
	BF16: {BF16, "bf16", 1, 2, dequantBF16, quantizeBF16, BF16},
	F64:  {F64, "f64", 1, 8, dequantF64, quantizeF64, F32},
	I8:   {I8, "i8", 1, 1, dequantI8, nil, F32},
	I16:  {I16, "i16", 1, 2, dequantI16, nil, F32},
	I32:  {I32, "i32", 1, 4, dequantI32, nil, F32},

	Q4_0: {Q4_0, "q4_0", 32, 18, dequantQ4_0, quantizeQ4_0, Q8_0},
	Q4_1: {Q4_1, "q4_1", 32, 20, dequantQ4_1, quantizeQ4_1, Q8_1},
	Q5_0: {Q5_0, "q5_0", 32, 22, dequantQ5_0, quantizeQ5_0, Q8_0},
	Q5_1: {Q5_1, "q5_1", 32, 24, dequantQ5_1, quantizeQ5_1, Q8_1},
	Q8_0: {Q8_0, "q8_0", 32, 34, dequantQ8_0, quantizeQ8_0, Q8_0},
	Q8_1: {Q8_1, "q8_1", 32, 36, dequantQ8_1, quantizeQ8_1, Q8_1},

	Q2_K: {Q2_K, "q2_K", 256, 84, dequantQ2_K, quantizeQ2_K, Q8_K},
	Q3_K: {Q3_K, "q3_K", 256, 110, dequantQ3_K, quantizeQ3_K, Q8_K},
	Q4_K: {Q4_K, "q4_K", 256, 144, dequantQ4_K, quantizeQ4_K, Q8_K},
	Q5_K: {Q5_K, "q5_K", 256, 176, dequantQ5_K, quantizeQ5_K, Q8_K},
	Q6_K: {Q6_K, "q6_K", 256, 210, dequantQ6_K, quantizeQ6_K, Q8_K},
	Q8_K: {Q8_K, "q8_K", 256, 292, dequantQ8_K, quantizeQ8_K, Q8_K},
}

// FormatOf returns the table row of t. MLX affine types have no fixed block
// layout (see DequantizeMLXAffine) and unsigned integer types are not
// numeric tensors here: both give an error.
func FormatOf(t Type) (*Format, error) {
	if f, ok := formats[t]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("quant: no block format for type %v", t)
}

// Formats lists every table row, ordered by type id.
func Formats() []*Format {
	out := make([]*Format, 0, len(formats))
	for t := Type(0); t < 64; t++ {
		if f, ok := formats[t]; ok {
			out = append(out, f)
		}
	}
	return out
}

// maxCols bounds row lengths so that size arithmetic cannot overflow, on
// 32-bit platforms too (8 bytes per value at most).
const maxCols = min(1<<40, math.MaxInt/8)

// RowBytes returns the bytes of one row of cols values of type t, or an
// error when t has no block format or cols is not a whole number of blocks.
func RowBytes(t Type, cols int) (int, error) {
	f, err := FormatOf(t)
	if err != nil {
		return 0, err
	}
	if cols < 0 || cols > maxCols {
		return 0, fmt.Errorf("quant: %v row of %d columns: bad size", t, cols)
	}
	if cols%f.BlockElems != 0 {
		return 0, fmt.Errorf("quant: %v row of %d columns is not a multiple of the block size %d", t, cols, f.BlockElems)
	}
	return cols / f.BlockElems * f.BlockBytes, nil
}

// Dequantize decodes len(dst) values of type t from src after checking the
// sizes; it is the checked form of FormatOf(t).Dequantize.
func Dequantize(t Type, dst []float32, src []byte) error {
	n, err := RowBytes(t, len(dst))
	if err != nil {
		return err
	}
	if len(src) < n {
		return fmt.Errorf("quant: %v: %d values need %d bytes, have %d", t, len(dst), n, len(src))
	}
	formats[t].Dequantize(dst, src[:n])
	return nil
}

// Quantize encodes src into dst as type t after checking the sizes; it is
// the checked form of FormatOf(t).Quantize. imatrix may be nil; otherwise its
// length must be a positive multiple of the block size dividing len(src).
func Quantize(t Type, dst []byte, src []float32, imatrix []float32) error {
	n, err := RowBytes(t, len(src))
	if err != nil {
		return err
	}
	f := formats[t]
	if f.Quantize == nil {
		return fmt.Errorf("quant: cannot quantize to %v", t)
	}
	if len(dst) < n {
		return fmt.Errorf("quant: %v: %d values need %d bytes, have %d", t, len(src), n, len(dst))
	}
	if imatrix != nil && (len(imatrix) == 0 || len(imatrix)%f.BlockElems != 0 || len(src)%len(imatrix) != 0) {
		return fmt.Errorf("quant: %v: importance matrix of %d values does not fit rows of %d values", t, len(imatrix), len(src))
	}
	if f.BlockElems > 1 {
		for i, v := range src {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("quant: %v: value %d is %v", t, i, v)
			}
		}
		for i, v := range imatrix {
			if !(v >= 0) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("quant: %v: importance %d is %v", t, i, v)
			}
		}
	}
	f.Quantize(dst[:n], src, imatrix)
	return nil
}
