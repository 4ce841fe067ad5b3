package weights

import (
	"errors"
	"fmt"
	"sort"

	"github.com/clefrt/clef/internal/untrusted"
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

// Set is the Model every reader returns: tensors by stored name over one
// or more mapped files. Callers that need to know where a model came from
// may type-assert a Model to *Set.
type Set struct {
	// Format says which container the tensors came from: "safetensors"
	// (a file or a directory of shards), "mlx" or "gguf".
	Format string
	// Path is what was opened (a file or a directory).
	Path string
	// GGUF holds the parsed GGUF file(s), in the order they were opened
	// (the file given to Open, then its Extra files).
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
		return fmt.Errorf("%s: tensor %s is also in %s", file, untrusted.Quote(t.Name), prev)
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
	return nil, fmt.Errorf("%s: no tensor %s", s.Path, untrusted.Quote(name))
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
// elements per block and bytes per block, from quant's format table; the
// unsigned and 64-bit integer dtypes that only safetensors carries (MLX packs
// codes into U32) are not in that table and are sized here. Formats outside
// both are rejected by the readers with a clear error.
func typeSize(t quant.Type) (elems, bytes int, ok bool) {
	switch t {
	case quant.U8:
		return 1, 1, true
	case quant.U16:
		return 1, 2, true
	case quant.U32:
		return 1, 4, true
	case quant.U64, quant.I64:
		return 1, 8, true
	}
	f, err := quant.FormatOf(t)
	if err != nil {
		return 0, 0, false
	}
	return f.BlockElems, f.BlockBytes, true
}

// typeName names a storage format in errors and listings.
func typeName(t quant.Type) string { return t.String() }

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
