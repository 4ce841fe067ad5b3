package cpu

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// mlxRows decodes the rows of an MLX affine-quantized weight: packed codes
// plus per-group scales and biases stored as separate tensors.
type mlxRows struct {
	bits, group    int
	scales, biases *weight // [rows, cols/group]
}

func (m *mlxRows) decodeRow(dst []float32, packed []byte, r int) {
	ng := len(dst) / m.group
	var sb [2][]float32
	sb[0] = make([]float32, ng)
	sb[1] = make([]float32, ng)
	m.scales.decodeRow(sb[0], r)
	m.biases.decodeRow(sb[1], r)
	// Sizes were checked when the weight was bound.
	_ = quant.DequantizeMLXAffine(dst, packed, sb[0], sb[1], m.bits, m.group)
}

// mlxWeight binds an MLX affine weight, checking its scales and biases.
func (b *Backend) mlxWeight(t *weights.Tensor, rows, cols int) (*backend.Tensor, error) {
	bits := 4
	if t.Type == quant.MLXAffine8 {
		bits = 8
	}
	g := t.GroupSize
	if g <= 0 || cols%g != 0 || (cols*bits)%32 != 0 {
		return nil, fmt.Errorf("cpu: weight %s: %d columns do not fit MLX groups of %d", t.Name, cols, g)
	}
	rb := cols * bits / 8
	if len(t.Data) != rows*rb {
		return nil, fmt.Errorf("cpu: weight %s: %d bytes, want %d for %d-bit MLX %v", t.Name, len(t.Data), rows*rb, bits, t.Shape)
	}
	side := func(s *weights.Tensor, what string) (*weight, error) {
		if s == nil {
			return nil, fmt.Errorf("cpu: weight %s: no MLX %s", t.Name, what)
		}
		bt, err := b.Weight(&weights.Tensor{Name: s.Name, Type: s.Type, Shape: s.Shape, Data: s.Data})
		if err != nil {
			return nil, err
		}
		w := bt.Handle.(*weight)
		if w.rows != rows || w.cols != cols/g {
			return nil, fmt.Errorf("cpu: weight %s: MLX %s shape %v, want [%d %d]", t.Name, what, s.Shape, rows, cols/g)
		}
		return w, nil
	}
	sc, err := side(t.Scales, "scales")
	if err != nil {
		return nil, err
	}
	bi, err := side(t.Biases, "biases")
	if err != nil {
		return nil, err
	}
	w := &weight{t: t, rows: rows, cols: cols, dec: decoder{blockElems: g, rowBytes: rb},
		mlx: &mlxRows{bits: bits, group: g, scales: sc, biases: bi}}
	return &backend.Tensor{Type: t.Type, Shape: append([]int(nil), t.Shape...), Handle: w}, nil
}
