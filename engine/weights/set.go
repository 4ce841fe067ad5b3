package weights

import (
	"errors"
	"fmt"
	"sort"

	"github.com/clefrt/clef/quant"
)

// mapped is one file mapped read-only.
type mapped struct {
	path  string
	data  []byte
	unmap func() error
}

func (m *mapped) close() error {
	if m == nil || m.unmap == nil {
		return nil
	}
	err := m.unmap()
	m.unmap, m.data = nil, nil
	return err
}

// Set is the Model every reader returns: tensors by canonical name over one
// or more mapped files. Callers that need to know where a model came from
// may type-assert a Model to *Set.
type Set struct {
	// Format says which container the tensors came from: "safetensors",
	// "release", "mlx" or "gguf".
	Format string
	// Path is what was opened (a file or a directory).
	Path string
	// GGUF holds the parsed GGUF file(s) when Format is "gguf": the backbone
	// first, then the companion file if one was opened alongside.
	GGUF []*GGUFFile

	tensors map[string]*Tensor
	origin  map[string]string // tensor name -> file it lives in
	files   []*mapped
}

func newSet(format, path string) *Set {
	return &Set{Format: format, Path: path, tensors: map[string]*Tensor{}, origin: map[string]string{}}
}

// add registers a tensor; a name given twice is an error naming both files.
func (s *Set) add(t *Tensor, file string) error {
	if prev, ok := s.origin[t.Name]; ok {
		return fmt.Errorf("%s: tensor %q is also in %s", file, t.Name, prev)
	}
	s.tensors[t.Name] = t
	s.origin[t.Name] = file
	return nil
}

// Tensor returns the named tensor.
func (s *Set) Tensor(name string) (*Tensor, error) {
	if t, ok := s.tensors[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%s: no tensor %q", s.Path, name)
}

// Has reports whether the named tensor exists.
func (s *Set) Has(name string) bool {
	_, ok := s.tensors[name]
	return ok
}

// Names lists every tensor name, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.tensors))
	for n := range s.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// File returns the file the named tensor is stored in ("" if unknown).
func (s *Set) File(name string) string { return s.origin[name] }

// Close unmaps every file. Tensors must not be used afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		if err := f.close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.files = nil
	return errors.Join(errs...)
}

// typeSize gives the block layout of the storage formats the readers accept:
// elements per block and bytes per block. Formats outside this list are
// rejected by the readers with a clear error.
func typeSize(t quant.Type) (elems, bytes int, ok bool) {
	switch t {
	case quant.F32, quant.I32, quant.U32:
		return 1, 4, true
	case quant.F16, quant.BF16, quant.I16, quant.U16:
		return 1, 2, true
	case quant.F64, quant.I64, quant.U64:
		return 1, 8, true
	case quant.I8, quant.U8:
		return 1, 1, true
	case quant.Q4_0:
		return 32, 18, true
	case quant.Q4_1:
		return 32, 20, true
	case quant.Q5_0:
		return 32, 22, true
	case quant.Q5_1:
		return 32, 24, true
	case quant.Q8_0:
		return 32, 34, true
	case quant.Q8_1:
		return 32, 36, true
	case quant.Q2_K:
		return 256, 84, true
	case quant.Q3_K:
		return 256, 110, true
	case quant.Q4_K:
		return 256, 144, true
	case quant.Q5_K:
		return 256, 176, true
	case quant.Q6_K:
		return 256, 210, true
	case quant.Q8_K:
		return 256, 292, true
	}
	return 0, 0, false
}

// typeName names a storage format in errors and listings.
func typeName(t quant.Type) string {
	switch t {
	case quant.F32:
		return "F32"
	case quant.F16:
		return "F16"
	case quant.BF16:
		return "BF16"
	case quant.F64:
		return "F64"
	case quant.I8:
		return "I8"
	case quant.I16:
		return "I16"
	case quant.I32:
		return "I32"
	case quant.I64:
		return "I64"
	case quant.U8:
		return "U8"
	case quant.U16:
		return "U16"
	case quant.U32:
		return "U32"
	case quant.U64:
		return "U64"
	case quant.Q4_0:
		return "Q4_0"
	case quant.Q4_1:
		return "Q4_1"
	case quant.Q5_0:
		return "Q5_0"
	case quant.Q5_1:
		return "Q5_1"
	case quant.Q8_0:
		return "Q8_0"
	case quant.Q8_1:
		return "Q8_1"
	case quant.Q2_K:
		return "Q2_K"
	case quant.Q3_K:
		return "Q3_K"
	case quant.Q4_K:
		return "Q4_K"
	case quant.Q5_K:
		return "Q5_K"
	case quant.Q6_K:
		return "Q6_K"
	case quant.Q8_K:
		return "Q8_K"
	case quant.MLXAffine4:
		return "MLX4"
	case quant.MLXAffine8:
		return "MLX8"
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// maxDims bounds tensor rank; maxElems bounds a tensor's element count
// (2^48, far beyond any real tensor) so products of dimensions never overflow.
const (
	maxDims  = 8
	maxElems = int64(1) << 48
)

// byteSize returns the bytes a tensor of type t and shape (outermost first)
// occupies, checking that the innermost dimension fills whole blocks.
func byteSize(t quant.Type, shape []int) (int64, error) {
	be, bb, ok := typeSize(t)
	if !ok {
		return 0, fmt.Errorf("unsupported type %s", typeName(t))
	}
	if len(shape) > maxDims {
		return 0, fmt.Errorf("%d dimensions (at most %d)", len(shape), maxDims)
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > maxElems/int64(d) {
			return 0, fmt.Errorf("shape %v is absurdly large", shape)
		}
		n *= int64(d)
	}
	if be > 1 {
		inner := 1
		if len(shape) > 0 {
			inner = shape[len(shape)-1]
		}
		if inner%be != 0 {
			return 0, fmt.Errorf("row of %d elements is not a multiple of the %s block size %d", inner, typeName(t), be)
		}
	}
	return n / int64(be) * int64(bb), nil
}
