// Package npy reads and writes the NumPy .npy format (version 1 to 3,
// little-endian, C order) for the numeric dtypes the goldens use.
package npy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Array is a decoded .npy array. Exactly one of F and I is set: float dtypes
// decode into F (float64 is narrowed to float32), integer dtypes into I.
type Array struct {
	Shape []int
	F     []float32
	I     []int64
}

// Len returns the number of elements.
func (a *Array) Len() int {
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

var (
	descrRe = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	fortRe  = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	shapeRe = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// maxElems bounds a header's element count so a damaged file cannot make
// Read allocate without limit.
const maxElems = 1 << 31

// ReadFile reads a .npy file.
func ReadFile(path string) (*Array, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a, err := Read(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Read decodes a .npy file held in memory.
func Read(b []byte) (*Array, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return nil, fmt.Errorf("npy: not a .npy file")
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, fmt.Errorf("npy: truncated header")
		}
		hlen, off = int(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, fmt.Errorf("npy: unsupported version %d", b[6])
	}
	if off+hlen > len(b) {
		return nil, fmt.Errorf("npy: truncated header")
	}
	h := string(b[off : off+hlen])
	data := b[off+hlen:]
	dm, fm, sm := descrRe.FindStringSubmatch(h), fortRe.FindStringSubmatch(h), shapeRe.FindStringSubmatch(h)
	if dm == nil || fm == nil || sm == nil {
		return nil, fmt.Errorf("npy: header %q lacks descr, fortran_order or shape", h)
	}
	if fm[1] == "True" {
		return nil, fmt.Errorf("npy: fortran order is not supported")
	}
	a := &Array{}
	n := 1
	for _, s := range strings.Split(sm[1], ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		d, err := strconv.Atoi(s)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("npy: bad shape %q", sm[1])
		}
		a.Shape = append(a.Shape, d)
		if d != 0 && n > maxElems/d {
			return nil, fmt.Errorf("npy: shape %q is too large", sm[1])
		}
		n *= d
	}
	var size int
	switch dm[1] {
	case "<f4", "<f8", "<i8", "<i4":
		size, _ = strconv.Atoi(dm[1][2:])
	case "|i1", "|u1":
		size = 1
	default:
		return nil, fmt.Errorf("npy: unsupported dtype %q", dm[1])
	}
	if len(data) != n*size {
		return nil, fmt.Errorf("npy: %d data bytes, shape %v of %s needs %d", len(data), a.Shape, dm[1], n*size)
	}
	switch dm[1] {
	case "<f4":
		a.F = make([]float32, n)
		for i := range a.F {
			a.F[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case "<f8":
		a.F = make([]float32, n)
		for i := range a.F {
			a.F[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:])))
		}
	case "<i8":
		a.I = make([]int64, n)
		for i := range a.I {
			a.I[i] = int64(binary.LittleEndian.Uint64(data[8*i:]))
		}
	case "<i4":
		a.I = make([]int64, n)
		for i := range a.I {
			a.I[i] = int64(int32(binary.LittleEndian.Uint32(data[4*i:])))
		}
	case "|i1":
		a.I = make([]int64, n)
		for i := range a.I {
			a.I[i] = int64(int8(data[i]))
		}
	case "|u1":
		a.I = make([]int64, n)
		for i := range a.I {
			a.I[i] = int64(data[i])
		}
	}
	return a, nil
}

// WriteFloat32 writes data with the given shape as a version 1.0 float32
// .npy file.
func WriteFloat32(w io.Writer, data []float32, shape ...int) error {
	n := 1
	dims := make([]string, len(shape))
	for i, d := range shape {
		n *= d
		dims[i] = strconv.Itoa(d)
	}
	if n != len(data) {
		return fmt.Errorf("npy: %d values for shape %v", len(data), shape)
	}
	st := strings.Join(dims, ", ")
	if len(shape) == 1 {
		st += ","
	}
	h := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", st)
	// Pad so that the data starts on a 64-byte boundary; end with '\n'.
	total := 10 + len(h) + 1
	pad := (64 - total%64) % 64
	h += strings.Repeat(" ", pad) + "\n"
	var buf bytes.Buffer
	buf.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&buf, binary.LittleEndian, uint16(len(h)))
	buf.WriteString(h)
	out := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	buf.Write(out)
	_, err := w.Write(buf.Bytes())
	return err
}
