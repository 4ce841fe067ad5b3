// Package weights reads model containers (safetensors files and shards,
// GGUF, MLX quantized safetensors) over mmap and maps each of them onto one
// description: tensors under their stored names, with type, shape and bytes,
// never copied. It knows containers, not models: which model tensor a name
// is, and which files make a model, is engine/release's to say (its tensor
// tables and Open). A stacked tensor [E, out, in] (the experts of a MoE
// layer) is one Tensor, contiguous or in parts.
package weights

import (
	"fmt"
	"slices"

	"github.com/clefrt/clef/quant"
)

// Tensor is one named tensor of a model. Data aliases the mapped file: it is
// read-only and must never be copied wholesale or written to.
type Tensor struct {
	// Name is the name the container stores the tensor under (safetensors
	// key, GGUF tensor name, MLX module path with ".weight"). Which model
	// tensor it is, is for the model's tensor table (engine/release) to say.
	Name string
	Type quant.Type
	// Shape lists dimensions outermost first, as PyTorch and safetensors do:
	// a Linear weight is [out_features, in_features]; the last dimension is
	// contiguous. (GGUF's ne[] order is the reverse; readers convert.)
	Shape []int
	// Data holds the bytes. A stacked tensor [E, out, in] (the experts of a
	// MoE layer) holds its E matrices back to back in Data when the
	// container stores them as one tensor (GGUF *_exps, MLX switch_mlp), or
	// has Data nil and one slice per matrix in Parts when the container
	// stores them one by one (the bf16 release): see Stack and Part.
	Data  []byte
	Parts [][]byte

	// MLX affine formats only: per-group scales and biases (F16, BF16 or F32,
	// shape [rows, cols/GroupSize]) and the group size.
	Scales, Biases *Tensor
	GroupSize      int
}

// Part returns the bytes of matrix e of a stacked tensor [E, out, in], in
// either form; for a 2-D tensor Part(0) is Data.
func (t *Tensor) Part(e int) []byte {
	if t.Parts != nil {
		return t.Parts[e]
	}
	n := 1
	if len(t.Shape) == 3 {
		n = t.Shape[0]
	}
	per := len(t.Data) / max(n, 1)
	return t.Data[e*per : (e+1)*per : (e+1)*per]
}

// Size returns the bytes of the tensor's data in either form (not counting
// MLX scales and biases).
func (t *Tensor) Size() int64 {
	if t.Parts == nil {
		return int64(len(t.Data))
	}
	var n int64
	for _, p := range t.Parts {
		n += int64(len(p))
	}
	return n
}

// Slice returns matrix e of a stacked tensor as a 2-D tensor view (its MLX
// scales and biases sliced alike).
func (t *Tensor) Slice(e int) *Tensor {
	if len(t.Shape) != 3 {
		return t
	}
	v := &Tensor{Name: t.Name, Type: t.Type, Shape: t.Shape[1:], Data: t.Part(e), GroupSize: t.GroupSize}
	if t.Scales != nil {
		v.Scales = t.Scales.Slice(e)
	}
	if t.Biases != nil {
		v.Biases = t.Biases.Slice(e)
	}
	return v
}

// Stack makes one stacked tensor [E, out, in] of E tensors of the same
// type and shape (the experts of a layer stored one by one), named name.
// No bytes are copied: the result has Parts. MLX tensors, which a container
// always stacks itself, are not accepted.
func Stack(name string, ts []*Tensor) (*Tensor, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("weights: %s: nothing to stack", name)
	}
	t0 := ts[0]
	if len(t0.Shape) != 2 {
		return nil, fmt.Errorf("weights: %s: stacking %s of shape %v, want 2-D", name, t0.Name, t0.Shape)
	}
	st := &Tensor{Name: name, Type: t0.Type, Shape: []int{len(ts), t0.Shape[0], t0.Shape[1]}, Parts: make([][]byte, len(ts))}
	for e, t := range ts {
		if t.Type != t0.Type || !slices.Equal(t.Shape, t0.Shape) {
			return nil, fmt.Errorf("weights: %s: %s is %s %v, but %s is %s %v", name, t.Name, t.Type, t.Shape, t0.Name, t0.Type, t0.Shape)
		}
		if t.Scales != nil || t.Parts != nil {
			return nil, fmt.Errorf("weights: %s: %s is already stacked or group-quantized", name, t.Name)
		}
		st.Parts[e] = t.Data
	}
	return st, nil
}

// Elements returns the number of logical elements of the tensor.
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Model is the one description that every container maps onto.
type Model interface {
	// Tensor returns the named tensor, or an error naming the file and tensor
	// when it is missing.
	Tensor(name string) (*Tensor, error)
	// Has reports whether the named tensor exists.
	Has(name string) bool
	// Names lists every tensor name, sorted.
	Names() []string
	// Close unmaps the files. Tensors must not be used afterwards.
	Close() error
}
