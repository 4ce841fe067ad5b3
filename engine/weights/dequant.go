package weights

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/clefrt/clef/internal/untrusted"
	"github.com/clefrt/clef/quant"
)

// maxFloat32Elems bounds what Float32 will allocate in one call (4 GiB of
// float32): it is meant for small tensors and tests; big matrices are read
// row by row with Rows or by the backends directly.
const maxFloat32Elems = 1 << 30

// Float32 dequantizes the whole tensor into a new float32 slice, in storage
// order (row-major over Shape). It handles every type the readers accept:
// floats, integers (converted by value), ggml block formats and MLX affine.
func Float32(t *Tensor) ([]float32, error) {
	n := t.Elements()
	if n > maxFloat32Elems {
		return nil, fmt.Errorf("tensor %s: %d elements is too many for Float32; read it with Rows", untrusted.Quote(t.Name), n)
	}
	cols, nrows := rowGeometry(t)
	out := make([]float32, n)
	if n == 0 {
		return out, nil
	}
	for r := 0; r < nrows; r++ {
		if err := dequantRow(t, r, out[r*cols:(r+1)*cols]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Rows dequantizes the selected rows of a matrix (the last dimension is the
// row; leading dimensions are flattened): the head reads lm_head rows of
// option tokens this way without touching the rest of the matrix.
func Rows(t *Tensor, rows []int) ([][]float32, error) {
	cols, nrows := rowGeometry(t)
	out := make([][]float32, len(rows))
	for i, r := range rows {
		if r < 0 || r >= nrows {
			return nil, fmt.Errorf("tensor %s: row %d out of range [0, %d)", untrusted.Quote(t.Name), r, nrows)
		}
		out[i] = make([]float32, cols)
		if err := dequantRow(t, r, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadRow dequantizes row r of t (the last dimension is the row; leading
// dimensions are flattened) into dst, which must hold exactly one row.
func ReadRow(t *Tensor, r int, dst []float32) error {
	cols, nrows := rowGeometry(t)
	if r < 0 || r >= nrows {
		return fmt.Errorf("tensor %s: row %d out of range [0, %d)", untrusted.Quote(t.Name), r, nrows)
	}
	if len(dst) != cols {
		return fmt.Errorf("tensor %s: row of %d values read into %d", untrusted.Quote(t.Name), cols, len(dst))
	}
	return dequantRow(t, r, dst)
}

// RowCount returns the number of rows of t and their length.
func RowCount(t *Tensor) (rows, cols int) {
	cols, rows = rowGeometry(t)
	return rows, cols
}

// rowGeometry returns the row length (last dimension) and the number of rows.
func rowGeometry(t *Tensor) (cols, rows int) {
	if len(t.Shape) == 0 {
		return 1, 1
	}
	cols = t.Shape[len(t.Shape)-1]
	if cols == 0 {
		return 0, 0
	}
	return cols, t.Elements() / cols
}

// dequantRow writes row r of t into dst (len(dst) == row length).
func dequantRow(t *Tensor, r int, dst []float32) error {
	cols := len(dst)
	if t.Type == quant.MLXAffine4 || t.Type == quant.MLXAffine8 {
		return mlxRow(t, r, dst)
	}
	be, bb, ok := typeSize(t.Type)
	if !ok {
		return fmt.Errorf("tensor %s: cannot dequantize type %s", untrusted.Quote(t.Name), typeName(t.Type))
	}
	rowBytes := cols / be * bb
	if (r+1)*rowBytes > len(t.Data) {
		return fmt.Errorf("tensor %s: data of %d bytes too short for row %d", untrusted.Quote(t.Name), len(t.Data), r)
	}
	src := t.Data[r*rowBytes : (r+1)*rowBytes]
	switch t.Type {
	case quant.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case quant.F16:
		for i := range dst {
			dst[i] = quant.Float16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case quant.BF16:
		for i := range dst {
			dst[i] = quant.BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case quant.F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	case quant.I8:
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	case quant.U8:
		for i := range dst {
			dst[i] = float32(src[i])
		}
	case quant.I16:
		for i := range dst {
			dst[i] = float32(int16(binary.LittleEndian.Uint16(src[2*i:])))
		}
	case quant.U16:
		for i := range dst {
			dst[i] = float32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case quant.I32:
		for i := range dst {
			dst[i] = float32(int32(binary.LittleEndian.Uint32(src[4*i:])))
		}
	case quant.U32:
		for i := range dst {
			dst[i] = float32(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case quant.I64:
		for i := range dst {
			dst[i] = float32(int64(binary.LittleEndian.Uint64(src[8*i:])))
		}
	case quant.U64:
		for i := range dst {
			dst[i] = float32(binary.LittleEndian.Uint64(src[8*i:]))
		}
	default:
		if err := quant.Dequantize(t.Type, dst, src); err != nil {
			return fmt.Errorf("tensor %s: %v", untrusted.Quote(t.Name), err)
		}
	}
	return nil
}

// mlxRow dequantizes row r of an MLX affine tensor: w = scale*q + bias per
// group, q the Bits-bit codes packed little-endian into uint32 words.
func mlxRow(t *Tensor, r int, dst []float32) error {
	bits := 4
	if t.Type == quant.MLXAffine8 {
		bits = 8
	}
	cols := len(dst)
	g := t.GroupSize
	if g <= 0 || cols%g != 0 || t.Scales == nil || t.Biases == nil {
		return fmt.Errorf("tensor %s: malformed MLX quantized tensor (group size %d)", untrusted.Quote(t.Name), g)
	}
	rowBytes := cols * bits / 8
	if (r+1)*rowBytes > len(t.Data) {
		return fmt.Errorf("tensor %s: data too short for row %d", untrusted.Quote(t.Name), r)
	}
	src := t.Data[r*rowBytes : (r+1)*rowBytes]
	ng := cols / g
	scales := make([]float32, ng)
	biases := make([]float32, ng)
	if err := dequantRow(t.Scales, r, scales); err != nil {
		return err
	}
	if err := dequantRow(t.Biases, r, biases); err != nil {
		return err
	}
	perWord := 32 / bits
	mask := uint32(1)<<bits - 1
	for w := 0; w < cols/perWord; w++ {
		word := binary.LittleEndian.Uint32(src[4*w:])
		for k := 0; k < perWord; k++ {
			j := w*perWord + k
			q := float32((word >> (uint(k) * uint(bits))) & mask)
			dst[j] = float32(scales[j/g]*q) + biases[j/g] // two roundings, never fused
		}
	}
	return nil
}
