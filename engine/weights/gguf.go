package weights

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/clefrt/clef/internal/untrusted"
	"github.com/clefrt/clef/quant"
)

// GGUF container constants.
const (
	ggufMagic            = 0x46554747 // "GGUF" little-endian
	ggufDefaultAlignment = 32
	ggufMaxDims          = 4
	ggufMaxStringLen     = 1 << 30
)

// GGUFValueType is the type tag of a GGUF metadata value.
type GGUFValueType uint32

// GGUF metadata value types.
const (
	GGUFUint8   GGUFValueType = 0
	GGUFInt8    GGUFValueType = 1
	GGUFUint16  GGUFValueType = 2
	GGUFInt16   GGUFValueType = 3
	GGUFUint32  GGUFValueType = 4
	GGUFInt32   GGUFValueType = 5
	GGUFFloat32 GGUFValueType = 6
	GGUFBool    GGUFValueType = 7
	GGUFString  GGUFValueType = 8
	GGUFArray   GGUFValueType = 9
	GGUFUint64  GGUFValueType = 10
	GGUFInt64   GGUFValueType = 11
	GGUFFloat64 GGUFValueType = 12
)

// scalarSize is the encoded size of a scalar value type (0 for string/array).
func (t GGUFValueType) scalarSize() int {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFUint64, GGUFInt64, GGUFFloat64:
		return 8
	}
	return 0
}

// GGUFKV is one metadata entry. Value holds a Go value of the entry's type:
// uint8, int8, uint16, int16, uint32, int32, float32, bool, string, uint64,
// int64, float64, or for an array a slice of one of those ([]string,
// []int32, []float32, ...). Nested arrays are not supported (llama.cpp does
// not read them either).
type GGUFKV struct {
	Key   string
	Value any
}

// GGUFTensorInfo describes one tensor of a GGUF file. Dims is in GGUF order:
// Dims[0] is the contiguous dimension (the reverse of Tensor.Shape).
type GGUFTensorInfo struct {
	Name   string
	Type   quant.Type
	Dims   []uint64
	Offset uint64 // from the start of the data section
	Data   []byte // aliases the mapped file
}

// Shape returns the dimensions outermost first.
func (ti *GGUFTensorInfo) Shape() []int {
	s := make([]int, len(ti.Dims))
	for i, d := range ti.Dims {
		s[len(ti.Dims)-1-i] = int(d)
	}
	return s
}

// GGUFFile is a parsed, validated GGUF file (version 2 or 3) over mmap.
type GGUFFile struct {
	Path       string
	Version    uint32
	Alignment  int
	DataOffset int64
	KV         []GGUFKV         // in file order
	Tensors    []GGUFTensorInfo // in file order

	kv map[string]int
	m  *mapped
}

// OpenGGUF maps and validates a GGUF file. Close releases it.
func OpenGGUF(path string) (*GGUFFile, error) {
	m, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	f, err := parseGGUF(path, m.data)
	if err != nil {
		m.close()
		return nil, fmt.Errorf("weights: %w", err)
	}
	f.m = m
	return f, nil
}

// Close unmaps the file.
func (f *GGUFFile) Close() error { return f.m.close() }

// Get returns the value of a metadata key.
func (f *GGUFFile) Get(key string) (any, bool) {
	i, ok := f.kv[key]
	if !ok {
		return nil, false
	}
	return f.KV[i].Value, true
}

// String returns a string metadata value.
func (f *GGUFFile) String(key string) (string, error) {
	v, ok := f.Get(key)
	if !ok {
		return "", fmt.Errorf("%s: no metadata key %s", f.Path, untrusted.Quote(key))
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: metadata %s is %T, not a string", f.Path, untrusted.Quote(key), v)
	}
	return s, nil
}

// Uint returns an unsigned or non-negative integer metadata value.
func (f *GGUFFile) Uint(key string) (uint64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("%s: no metadata key %s", f.Path, untrusted.Quote(key))
	}
	switch x := v.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8, int16, int32, int64:
		i := toInt64(x)
		if i >= 0 {
			return uint64(i), nil
		}
	}
	return 0, fmt.Errorf("%s: metadata %s = %s is not a non-negative integer", f.Path, untrusted.Quote(key), untrusted.Value(v))
}

// Float returns a floating-point (or integer) metadata value.
func (f *GGUFFile) Float(key string) (float64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("%s: no metadata key %s", f.Path, untrusted.Quote(key))
	}
	switch x := v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	if u, err := f.Uint(key); err == nil {
		return float64(u), nil
	}
	return 0, fmt.Errorf("%s: metadata %s = %s is not a number", f.Path, untrusted.Quote(key), untrusted.Value(v))
}

// Architecture returns general.architecture.
func (f *GGUFFile) Architecture() (string, error) { return f.String("general.architecture") }

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	}
	return 0
}

// ggufReader decodes the header with bounds checks on every read.
type ggufReader struct {
	path string
	b    []byte
	off  int
}

func (r *ggufReader) need(n uint64, what string) error {
	if n > uint64(len(r.b)-r.off) {
		return fmt.Errorf("%s: truncated: %s needs %d bytes at offset %d, file has %d", r.path, what, n, r.off, len(r.b))
	}
	return nil
}

func (r *ggufReader) u32(what string) (uint32, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v, nil
}

func (r *ggufReader) u64(what string) (uint64, error) {
	if err := r.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v, nil
}

func (r *ggufReader) str(what string) (string, error) {
	n, err := r.u64(what)
	if err != nil {
		return "", err
	}
	if n > ggufMaxStringLen {
		return "", fmt.Errorf("%s: %s: string length %d is absurd", r.path, what, n)
	}
	if err := r.need(n, what); err != nil {
		return "", err
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

// scalar reads one scalar value of type t.
func (r *ggufReader) scalar(t GGUFValueType, what string) (any, error) {
	if t == GGUFString {
		return r.str(what)
	}
	n := t.scalarSize()
	if n == 0 {
		return nil, fmt.Errorf("%s: %s: unknown value type %d", r.path, what, t)
	}
	if err := r.need(uint64(n), what); err != nil {
		return nil, err
	}
	b := r.b[r.off:]
	r.off += n
	switch t {
	case GGUFUint8:
		return b[0], nil
	case GGUFInt8:
		return int8(b[0]), nil
	case GGUFBool:
		if b[0] > 1 {
			return nil, fmt.Errorf("%s: %s: bool value %d", r.path, what, b[0])
		}
		return b[0] == 1, nil
	case GGUFUint16:
		return binary.LittleEndian.Uint16(b), nil
	case GGUFInt16:
		return int16(binary.LittleEndian.Uint16(b)), nil
	case GGUFUint32:
		return binary.LittleEndian.Uint32(b), nil
	case GGUFInt32:
		return int32(binary.LittleEndian.Uint32(b)), nil
	case GGUFFloat32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
	case GGUFUint64:
		return binary.LittleEndian.Uint64(b), nil
	case GGUFInt64:
		return int64(binary.LittleEndian.Uint64(b)), nil
	default: // GGUFFloat64
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	}
}

// array reads an array value into a typed slice.
func (r *ggufReader) array(what string) (any, error) {
	et, err := r.u32(what)
	if err != nil {
		return nil, err
	}
	t := GGUFValueType(et)
	n, err := r.u64(what)
	if err != nil {
		return nil, err
	}
	min := uint64(t.scalarSize())
	switch {
	case t == GGUFString:
		min = 8
	case t == GGUFArray:
		return nil, fmt.Errorf("%s: %s: nested arrays are not supported", r.path, what)
	case min == 0:
		return nil, fmt.Errorf("%s: %s: unknown array element type %d", r.path, what, et)
	}
	if n > uint64(len(r.b)-r.off)/min {
		return nil, fmt.Errorf("%s: %s: array of %d elements cannot fit in the file (truncated or absurd count)", r.path, what, n)
	}
	out := newTypedSlice(t, int(n))
	for i := 0; i < int(n); i++ {
		v, err := r.scalar(t, what)
		if err != nil {
			return nil, err
		}
		setTypedSlice(out, i, v)
	}
	return out, nil
}

func newTypedSlice(t GGUFValueType, n int) any {
	switch t {
	case GGUFUint8:
		return make([]uint8, n)
	case GGUFInt8:
		return make([]int8, n)
	case GGUFUint16:
		return make([]uint16, n)
	case GGUFInt16:
		return make([]int16, n)
	case GGUFUint32:
		return make([]uint32, n)
	case GGUFInt32:
		return make([]int32, n)
	case GGUFFloat32:
		return make([]float32, n)
	case GGUFBool:
		return make([]bool, n)
	case GGUFString:
		return make([]string, n)
	case GGUFUint64:
		return make([]uint64, n)
	case GGUFInt64:
		return make([]int64, n)
	}
	return make([]float64, n)
}

func setTypedSlice(s any, i int, v any) {
	switch x := s.(type) {
	case []uint8:
		x[i] = v.(uint8)
	case []int8:
		x[i] = v.(int8)
	case []uint16:
		x[i] = v.(uint16)
	case []int16:
		x[i] = v.(int16)
	case []uint32:
		x[i] = v.(uint32)
	case []int32:
		x[i] = v.(int32)
	case []float32:
		x[i] = v.(float32)
	case []bool:
		x[i] = v.(bool)
	case []string:
		x[i] = v.(string)
	case []uint64:
		x[i] = v.(uint64)
	case []int64:
		x[i] = v.(int64)
	case []float64:
		x[i] = v.(float64)
	}
}

// parseGGUF validates a whole GGUF file held in data.
func parseGGUF(path string, data []byte) (*GGUFFile, error) {
	r := &ggufReader{path: path, b: data}
	magic, err := r.u32("magic")
	if err != nil {
		return nil, fmt.Errorf("%s: not a GGUF file (%d bytes)", path, len(data))
	}
	if magic != ggufMagic {
		return nil, fmt.Errorf("%s: not a GGUF file: bad magic %q", path, data[:4])
	}
	ver, err := r.u32("version")
	if err != nil {
		return nil, err
	}
	if ver != 2 && ver != 3 {
		return nil, fmt.Errorf("%s: unsupported GGUF version %d (want 2 or 3)", path, ver)
	}
	nt, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nkv, err := r.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Every entry takes at least 8+4+1 (kv) or 8+4+8+4+8 (tensor) bytes.
	if nkv > uint64(len(data))/13 {
		return nil, fmt.Errorf("%s: metadata count %d is absurd for a file of %d bytes (truncated?)", path, nkv, len(data))
	}
	if nt > uint64(len(data))/32 {
		return nil, fmt.Errorf("%s: tensor count %d is absurd for a file of %d bytes (truncated?)", path, nt, len(data))
	}
	f := &GGUFFile{Path: path, Version: ver, Alignment: ggufDefaultAlignment, kv: map[string]int{}}
	for i := uint64(0); i < nkv; i++ {
		key, err := r.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		if _, dup := f.kv[key]; dup {
			return nil, fmt.Errorf("%s: metadata key %s appears twice", path, untrusted.Quote(key))
		}
		what := "metadata " + untrusted.Quote(key)
		vt, err := r.u32(what)
		if err != nil {
			return nil, err
		}
		var v any
		if GGUFValueType(vt) == GGUFArray {
			v, err = r.array(what)
		} else {
			v, err = r.scalar(GGUFValueType(vt), what)
		}
		if err != nil {
			return nil, err
		}
		f.kv[key] = len(f.KV)
		f.KV = append(f.KV, GGUFKV{Key: key, Value: v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("%s: general.alignment %s is not a power of two uint32", path, untrusted.Value(v))
		}
		f.Alignment = int(a)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nt; i++ {
		name, err := r.str(fmt.Sprintf("tensor %d name", i))
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: tensor %s appears twice", path, untrusted.Quote(name))
		}
		seen[name] = true
		what := "tensor " + untrusted.Quote(name)
		nd, err := r.u32(what)
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > ggufMaxDims {
			return nil, fmt.Errorf("%s: %s: %d dimensions (want 1 to %d)", path, what, nd, ggufMaxDims)
		}
		ti := GGUFTensorInfo{Name: name, Dims: make([]uint64, nd)}
		for d := range ti.Dims {
			if ti.Dims[d], err = r.u64(what); err != nil {
				return nil, err
			}
			if ti.Dims[d] > uint64(maxElems) {
				return nil, fmt.Errorf("%s: %s: dimension %d is absurd", path, what, ti.Dims[d])
			}
		}
		tt, err := r.u32(what)
		if err != nil {
			return nil, err
		}
		ti.Type = quant.Type(tt)
		if ti.Offset, err = r.u64(what); err != nil {
			return nil, err
		}
		f.Tensors = append(f.Tensors, ti)
	}
	start := alignUp(int64(r.off), int64(f.Alignment))
	if start > int64(len(data)) {
		if nt == 0 && int64(r.off) == int64(len(data)) {
			start = int64(len(data))
		} else {
			return nil, fmt.Errorf("%s: truncated: data section would start at %d, file has %d bytes", path, start, len(data))
		}
	}
	f.DataOffset = start
	buf := data[start:]
	spans := make([]span, 0, len(f.Tensors))
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if _, _, ok := typeSize(ti.Type); !ok {
			return nil, fmt.Errorf("%s: tensor %s: unsupported ggml type %d", path, untrusted.Quote(ti.Name), uint32(ti.Type))
		}
		size, err := byteSize(ti.Type, ti.Shape())
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %v", path, untrusted.Quote(ti.Name), err)
		}
		if ti.Offset%uint64(f.Alignment) != 0 {
			return nil, fmt.Errorf("%s: tensor %s: data offset %d is not aligned to %d", path, untrusted.Quote(ti.Name), ti.Offset, f.Alignment)
		}
		if ti.Offset > uint64(len(buf)) || uint64(size) > uint64(len(buf))-ti.Offset {
			return nil, fmt.Errorf("%s: tensor %s: data [%d, %d) runs past the end of the file (data section of %d bytes): truncated?", path, untrusted.Quote(ti.Name), ti.Offset, ti.Offset+uint64(size), len(buf))
		}
		end := int64(ti.Offset) + size
		ti.Data = buf[ti.Offset:end:end]
		spans = append(spans, span{name: ti.Name, begin: int64(ti.Offset), end: end})
	}
	if err := checkOverlaps(spans); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return f, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// addGGUF adds the tensors of a GGUF file to the set under their stored
// names (a stacked *_exps tensor stays one [E, out, in] tensor).
func (s *Set) addGGUF(f *GGUFFile) error {
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		shape := ti.Shape()
		if v, ok := f.Get(GGUFShapeKey + ti.Name); ok {
			// A tensor whose rank GGUF cannot hold (0-d or more than 4
			// dimensions) was flattened; its true shape is in the metadata.
			orig, ok := v.([]int64)
			if !ok || !sameElements(orig, shape) {
				return fmt.Errorf("%s: tensor %s: metadata %s = %s does not fit its dims %v", f.Path, untrusted.Quote(ti.Name), untrusted.Quote(GGUFShapeKey+ti.Name), untrusted.Value(v), ti.Dims)
			}
			shape = make([]int, len(orig))
			for i, d := range orig {
				shape[i] = int(d)
			}
		}
		if err := s.add(&Tensor{Name: ti.Name, Type: ti.Type, Shape: shape, Data: ti.Data}, f.Path); err != nil {
			return err
		}
	}
	return nil
}

// GGUFShapeKey prefixes the metadata key that records the true shape
// (outermost first, int64 array) of a tensor stored with other dims because
// GGUF holds 1 to 4 dimensions only: clef.shape.<tensor name>.
const GGUFShapeKey = "clef.shape."

// sameElements reports whether the shapes hold the same number of elements
// and the innermost dimension is unchanged (so rows are unchanged).
func sameElements(orig []int64, shape []int) bool {
	n, m := int64(1), int64(1)
	for _, d := range orig {
		if d < 0 || d > maxElems {
			return false
		}
		n *= d
		if n > maxElems {
			return false
		}
	}
	for _, d := range shape {
		m *= int64(d)
	}
	if n != m {
		return false
	}
	inner := int64(1)
	if len(orig) > 0 {
		inner = orig[len(orig)-1]
	}
	return len(shape) > 0 && int64(shape[len(shape)-1]) == inner || n == 0
}

// addGGUFFile maps a GGUF file and adds its tensors; the parsed file is
// appended to s.GGUF.
func (s *Set) addGGUFFile(path string) error {
	f, err := OpenGGUF(path)
	if err != nil {
		return err
	}
	s.files = append(s.files, f.m)
	s.GGUF = append(s.GGUF, f)
	return s.addGGUF(f)
}
