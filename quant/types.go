// Package quant holds the one table of tensor storage formats: block layout,
// reference dequantize and quantize, and the activation format each format's
// dot product reads. It imports nothing from the rest of the module.
package quant

import (
	"fmt"
	"strconv"
	"strings"
)

// Type is a tensor storage format. The values of the GGML formats are ggml's
// own type ids (enum ggml_type), so they can be written to and read from GGUF
// files unchanged. Formats that GGUF cannot hold (MLX affine) use ids >= 1000.
type Type uint32

const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	I8   Type = 24
	I16  Type = 25
	I32  Type = 26
	I64  Type = 27
	F64  Type = 28
	BF16 Type = 30

	// MLX affine quantization: packed little-endian uint32 words of Bits-bit
	// codes along a row, with one scale and one bias per group of GroupSize
	// elements stored in separate tensors (see weights.Tensor.Scales/Biases).
	MLXAffine4 Type = 1004
	MLXAffine8 Type = 1008

	// Plain integer dtypes that only safetensors carries (MLX packs into U32).
	U8  Type = 1100
	U16 Type = 1101
	U32 Type = 1102
	U64 Type = 1103
)

// names maps every known type to its name: ggml's own spelling for the GGML
// formats ("q4_K", not "Q4_K"), lower case for the others.
var names = map[Type]string{
	F32: "f32", F16: "f16", Q4_0: "q4_0", Q4_1: "q4_1", Q5_0: "q5_0", Q5_1: "q5_1",
	Q8_0: "q8_0", Q8_1: "q8_1", Q2_K: "q2_K", Q3_K: "q3_K", Q4_K: "q4_K", Q5_K: "q5_K",
	Q6_K: "q6_K", Q8_K: "q8_K", I8: "i8", I16: "i16", I32: "i32", I64: "i64", F64: "f64",
	BF16: "bf16", MLXAffine4: "mlx_affine4", MLXAffine8: "mlx_affine8",
	U8: "u8", U16: "u16", U32: "u32", U64: "u64",
}

// String returns the type's name ("q4_K"), or "type(N)" for an unknown id.
func (t Type) String() string {
	if s, ok := names[t]; ok {
		return s
	}
	return "type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// ParseType returns the type named name. Matching ignores case, so "Q4_K",
// "q4_k" and "q4_K" all name Q4_K.
func ParseType(name string) (Type, error) {
	for t, s := range names {
		if strings.EqualFold(s, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("quant: unknown type %q", name)
}
