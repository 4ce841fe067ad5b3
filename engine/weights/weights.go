// Package weights reads model files (safetensors, GGUF, MLX quantized
// safetensors) over mmap and maps each of them onto one model description:
// tensors by canonical checkpoint name, with type, shape and bytes. Model code
// sees only this description and never knows which container a tensor came from.
package weights

import "github.com/clefrt/clef/quant"

// Tensor is one named tensor of a model. Data aliases the mapped file: it is
// read-only and must never be copied wholesale or written to.
type Tensor struct {
	// Name is the canonical checkpoint name, e.g.
	// "thinker.model.layers.0.self_attn.q_proj.weight" or, for the joint head,
	// "memory_projection.weight". Experts are always addressed one by one
	// ("thinker.model.layers.3.mlp.experts.17.down_proj.weight"), also when the
	// container stacks them (a GGUF *_exps tensor): then Data is a view.
	Name string
	Type quant.Type
	// Shape lists dimensions outermost first, as PyTorch and safetensors do:
	// a Linear weight is [out_features, in_features]; the last dimension is
	// contiguous. (GGUF's ne[] order is the reverse; readers convert.)
	Shape []int
	Data  []byte

	// MLX affine formats only: per-group scales and biases (F16, BF16 or F32,
	// shape [rows, cols/GroupSize]) and the group size.
	Scales, Biases *Tensor
	GroupSize      int
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
