package weights

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
)

// GGUFWriter writes a GGUF v3 file in one pass: the header (metadata and
// every tensor's info, with offsets computed from the declared types and
// shapes) first, then each tensor's data in declaration order, each padded
// to the alignment. Only one tensor's bytes need to be in memory at a time.
type GGUFWriter struct {
	w         *bufio.Writer
	infos     []GGUFTensorInfo
	sizes     []int64
	alignment int64
	next      int   // index of the next tensor to write
	pos       int64 // bytes written so far
	err       error
}

// NewGGUFWriter writes the header of a GGUF file to w. kv is written in the
// given order; when alignment is not 32 a general.alignment entry must be in
// kv. infos give each tensor's name, type and dims (GGUF order); their
// Offset and Data fields are ignored.
func NewGGUFWriter(w io.Writer, kv []GGUFKV, infos []GGUFTensorInfo) (*GGUFWriter, error) {
	g := &GGUFWriter{w: bufio.NewWriterSize(w, 1<<20), alignment: ggufDefaultAlignment}
	keys := map[string]bool{}
	for _, e := range kv {
		if keys[e.Key] {
			return nil, fmt.Errorf("gguf writer: metadata key %q given twice", e.Key)
		}
		keys[e.Key] = true
		if e.Key == "general.alignment" {
			a, ok := e.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("gguf writer: general.alignment must be a power-of-two uint32, got %v", e.Value)
			}
			g.alignment = int64(a)
		}
	}
	names := map[string]bool{}
	var off int64
	for _, ti := range infos {
		if names[ti.Name] {
			return nil, fmt.Errorf("gguf writer: tensor %q given twice", ti.Name)
		}
		names[ti.Name] = true
		if len(ti.Dims) == 0 || len(ti.Dims) > ggufMaxDims {
			return nil, fmt.Errorf("gguf writer: tensor %q: %d dimensions", ti.Name, len(ti.Dims))
		}
		size, err := byteSize(ti.Type, ti.Shape())
		if err != nil {
			return nil, fmt.Errorf("gguf writer: tensor %q: %v", ti.Name, err)
		}
		ti.Offset = uint64(off)
		ti.Data = nil
		g.infos = append(g.infos, ti)
		g.sizes = append(g.sizes, size)
		off = alignUp(off+size, g.alignment)
	}

	g.u32(ggufMagic)
	g.u32(3)
	g.u64(uint64(len(g.infos)))
	g.u64(uint64(len(kv)))
	for _, e := range kv {
		g.str(e.Key)
		if err := g.value(e.Value, true); err != nil {
			return nil, fmt.Errorf("gguf writer: metadata %q: %v", e.Key, err)
		}
	}
	for _, ti := range g.infos {
		g.str(ti.Name)
		g.u32(uint32(len(ti.Dims)))
		for _, d := range ti.Dims {
			g.u64(d)
		}
		g.u32(uint32(ti.Type))
		g.u64(ti.Offset)
	}
	g.pad()
	return g, g.err
}

// WriteTensor writes the data of the next tensor; name must match the next
// declared tensor and data must have exactly its size.
func (g *GGUFWriter) WriteTensor(name string, data []byte) error {
	if g.err != nil {
		return g.err
	}
	if g.next >= len(g.infos) {
		return fmt.Errorf("gguf writer: tensor %q was not declared", name)
	}
	ti := g.infos[g.next]
	if ti.Name != name {
		return fmt.Errorf("gguf writer: tensor %q written out of order: %q is next", name, ti.Name)
	}
	if int64(len(data)) != g.sizes[g.next] {
		return fmt.Errorf("gguf writer: tensor %q: %d bytes given, %s %v needs %d", name, len(data), typeName(ti.Type), ti.Dims, g.sizes[g.next])
	}
	g.write(data)
	g.pad()
	g.next++
	return g.err
}

// WriteTensorFrom writes the data of the next tensor from fill, which must
// write exactly the tensor's size to the writer it is given (in as many
// pieces as it likes): quantizers stream rows through it.
func (g *GGUFWriter) WriteTensorFrom(name string, fill func(w io.Writer) error) error {
	if g.err != nil {
		return g.err
	}
	if g.next >= len(g.infos) {
		return fmt.Errorf("gguf writer: tensor %q was not declared", name)
	}
	ti := g.infos[g.next]
	if ti.Name != name {
		return fmt.Errorf("gguf writer: tensor %q written out of order: %q is next", name, ti.Name)
	}
	cw := &countWriter{g: g, left: g.sizes[g.next]}
	if err := fill(cw); err != nil {
		g.err = err
		return err
	}
	if cw.left != 0 {
		g.err = fmt.Errorf("gguf writer: tensor %q: %d bytes short", name, cw.left)
		return g.err
	}
	g.pad()
	g.next++
	return g.err
}

type countWriter struct {
	g    *GGUFWriter
	left int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("gguf writer: tensor %q: more data than its size", c.g.infos[c.g.next].Name)
	}
	c.g.write(p)
	c.left -= int64(len(p))
	return len(p), c.g.err
}

// Close flushes the file; every declared tensor must have been written.
// It does not close the underlying writer.
func (g *GGUFWriter) Close() error {
	if g.err != nil {
		return g.err
	}
	if g.next != len(g.infos) {
		return fmt.Errorf("gguf writer: %d of %d tensors written", g.next, len(g.infos))
	}
	return g.w.Flush()
}

func (g *GGUFWriter) write(b []byte) {
	if g.err != nil {
		return
	}
	n, err := g.w.Write(b)
	g.pos += int64(n)
	g.err = err
}

func (g *GGUFWriter) pad() {
	if n := alignUp(g.pos, g.alignment) - g.pos; n > 0 {
		g.write(make([]byte, n))
	}
}

func (g *GGUFWriter) u32(v uint32) { g.write(binary.LittleEndian.AppendUint32(nil, v)) }
func (g *GGUFWriter) u64(v uint64) { g.write(binary.LittleEndian.AppendUint64(nil, v)) }
func (g *GGUFWriter) str(s string) {
	g.u64(uint64(len(s)))
	g.write([]byte(s))
}

// value writes a metadata value, with its type tag when tagged.
func (g *GGUFWriter) value(v any, tagged bool) error {
	tag := func(t GGUFValueType) {
		if tagged {
			g.u32(uint32(t))
		}
	}
	arr := func(t GGUFValueType, n int) {
		tag(GGUFArray)
		g.u32(uint32(t))
		g.u64(uint64(n))
	}
	switch x := v.(type) {
	case uint8:
		tag(GGUFUint8)
		g.write([]byte{x})
	case int8:
		tag(GGUFInt8)
		g.write([]byte{byte(x)})
	case bool:
		tag(GGUFBool)
		b := byte(0)
		if x {
			b = 1
		}
		g.write([]byte{b})
	case uint16:
		tag(GGUFUint16)
		g.write(binary.LittleEndian.AppendUint16(nil, x))
	case int16:
		tag(GGUFInt16)
		g.write(binary.LittleEndian.AppendUint16(nil, uint16(x)))
	case uint32:
		tag(GGUFUint32)
		g.u32(x)
	case int32:
		tag(GGUFInt32)
		g.u32(uint32(x))
	case float32:
		tag(GGUFFloat32)
		g.u32(math.Float32bits(x))
	case uint64:
		tag(GGUFUint64)
		g.u64(x)
	case int64:
		tag(GGUFInt64)
		g.u64(uint64(x))
	case float64:
		tag(GGUFFloat64)
		g.u64(math.Float64bits(x))
	case string:
		tag(GGUFString)
		g.str(x)
	case []uint8:
		arr(GGUFUint8, len(x))
		g.write(x)
	case []int8:
		arr(GGUFInt8, len(x))
		for _, e := range x {
			g.value(e, false)
		}
	case []bool:
		arr(GGUFBool, len(x))
		for _, e := range x {
			g.value(e, false)
		}
	case []uint16:
		arr(GGUFUint16, len(x))
		for _, e := range x {
			g.value(e, false)
		}
	case []int16:
		arr(GGUFInt16, len(x))
		for _, e := range x {
			g.value(e, false)
		}
	case []uint32:
		arr(GGUFUint32, len(x))
		for _, e := range x {
			g.u32(e)
		}
	case []int32:
		arr(GGUFInt32, len(x))
		for _, e := range x {
			g.u32(uint32(e))
		}
	case []float32:
		arr(GGUFFloat32, len(x))
		for _, e := range x {
			g.u32(math.Float32bits(e))
		}
	case []uint64:
		arr(GGUFUint64, len(x))
		for _, e := range x {
			g.u64(e)
		}
	case []int64:
		arr(GGUFInt64, len(x))
		for _, e := range x {
			g.u64(uint64(e))
		}
	case []float64:
		arr(GGUFFloat64, len(x))
		for _, e := range x {
			g.u64(math.Float64bits(e))
		}
	case []string:
		arr(GGUFString, len(x))
		for _, e := range x {
			g.str(e)
		}
	default:
		return fmt.Errorf("unsupported value type %T", v)
	}
	return g.err
}

// CopyGGUF writes the GGUF file src to dst, its metadata and tensor infos
// passed through edit (nil: copied as they are). An edited tensor's bytes
// are its info's Data (as OpenGGUF maps them, or replaced by edit). dst
// may be src: the copy is written beside it and renamed. Tests use it to
// damage one metadata value of a real file.
func CopyGGUF(dst, src string, edit func(kv []GGUFKV, tensors []GGUFTensorInfo) ([]GGUFKV, []GGUFTensorInfo)) error {
	f, err := OpenGGUF(src)
	if err != nil {
		return err
	}
	defer f.Close()
	kv := append([]GGUFKV(nil), f.KV...)
	infos := append([]GGUFTensorInfo(nil), f.Tensors...)
	if edit != nil {
		kv, infos = edit(kv, infos)
	}
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	w, err := NewGGUFWriter(out, kv, infos)
	if err == nil {
		for _, ti := range infos {
			if err = w.WriteTensor(ti.Name, ti.Data); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = w.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("weights: %s: %w", dst, err)
	}
	return nil
}
