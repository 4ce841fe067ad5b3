package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/clefrt/clef/internal/untrusted"
	"github.com/clefrt/clef/quant"
)

// maxSafetensorsHeader bounds the JSON header of a safetensors file (the
// format's own readers use the same 100 MB limit).
const maxSafetensorsHeader = 100 << 20

// safetensorsDTypes maps safetensors dtype names to storage types. BOOL and
// the float8 types are not used by any checkpoint clef reads and are refused.
var safetensorsDTypes = map[string]quant.Type{
	"F64": quant.F64, "F32": quant.F32, "F16": quant.F16, "BF16": quant.BF16,
	"I64": quant.I64, "I32": quant.I32, "I16": quant.I16, "I8": quant.I8,
	"U64": quant.U64, "U32": quant.U32, "U16": quant.U16, "U8": quant.U8,
}

// safetensorsDTypeName is the reverse of safetensorsDTypes.
func safetensorsDTypeName(t quant.Type) (string, bool) {
	for n, tt := range safetensorsDTypes {
		if tt == t {
			return n, true
		}
	}
	return "", false
}

type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// parseSafetensors validates a whole safetensors file held in data and
// returns its tensors (Data aliasing data) in file order and its
// __metadata__. Every error names the file and, where one is at fault, the
// tensor.
func parseSafetensors(path string, data []byte) ([]*Tensor, map[string]string, error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("%s: not a safetensors file: %d bytes, shorter than the 8-byte header length", path, len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > maxSafetensorsHeader {
		return nil, nil, fmt.Errorf("%s: safetensors header length %d is absurd (limit %d)", path, n, maxSafetensorsHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, nil, fmt.Errorf("%s: truncated: safetensors header of %d bytes but only %d bytes follow", path, n, len(data)-8)
	}
	header := data[8 : 8+n]
	buf := data[8+n:]
	if len(bytes.TrimLeft(header, " \t\r\n")) == 0 || bytes.TrimLeft(header, " \t\r\n")[0] != '{' {
		return nil, nil, fmt.Errorf("%s: safetensors header is not a JSON object", path)
	}

	dec := json.NewDecoder(bytes.NewReader(header))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, nil, fmt.Errorf("%s: safetensors header: invalid JSON: %s", path, untrusted.Error(err))
	}
	var tensors []*Tensor
	var spans []span
	meta := map[string]string{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: safetensors header: invalid JSON: %s", path, untrusted.Error(err))
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, nil, fmt.Errorf("%s: safetensors header: key %s appears twice", path, untrusted.Quote(name))
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, fmt.Errorf("%s: safetensors __metadata__ must map strings to strings: %s", path, untrusted.Error(err))
			}
			continue
		}
		if name == "" {
			return nil, nil, fmt.Errorf("%s: safetensors header: empty tensor name", path)
		}
		var e stEntry
		if err := dec.Decode(&e); err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: invalid header entry: %s", path, untrusted.Quote(name), untrusted.Error(err))
		}
		t, err := stTensor(name, e, buf)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: %v", path, untrusted.Quote(name), err)
		}
		tensors = append(tensors, t)
		spans = append(spans, span{name: name, begin: e.Offsets[0], end: e.Offsets[1]})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, nil, fmt.Errorf("%s: safetensors header: invalid JSON: %s", path, untrusted.Error(err))
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) != 0 || dec.More() {
		return nil, nil, fmt.Errorf("%s: safetensors header: trailing data after the JSON object", path)
	}
	if err := checkOverlaps(spans); err != nil {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	return tensors, meta, nil
}

// stTensor checks one header entry against the data buffer.
func stTensor(name string, e stEntry, buf []byte) (*Tensor, error) {
	t, ok := safetensorsDTypes[e.DType]
	if !ok {
		return nil, fmt.Errorf("unknown or unsupported dtype %s", untrusted.Quote(e.DType))
	}
	if e.Shape == nil {
		return nil, fmt.Errorf("missing shape")
	}
	shape := make([]int, len(e.Shape))
	for i, d := range e.Shape {
		if d < 0 || d > maxElems {
			return nil, fmt.Errorf("bad dimension %d in shape %s", d, untrusted.Value(e.Shape))
		}
		shape[i] = int(d)
	}
	size, err := byteSize(t, shape)
	if err != nil {
		return nil, err
	}
	if len(e.Offsets) != 2 {
		return nil, fmt.Errorf("data_offsets must hold 2 numbers, got %d", len(e.Offsets))
	}
	b, en := e.Offsets[0], e.Offsets[1]
	if b < 0 || en < b {
		return nil, fmt.Errorf("bad data_offsets [%d, %d]", b, en)
	}
	if en > int64(len(buf)) {
		return nil, fmt.Errorf("data_offsets [%d, %d] run past the end of the data (%d bytes): truncated file?", b, en, len(buf))
	}
	if en-b != size {
		return nil, fmt.Errorf("%s %v needs %d bytes but data_offsets [%d, %d] hold %d", e.DType, e.Shape, size, b, en, en-b)
	}
	return &Tensor{Name: name, Type: t, Shape: shape, Data: buf[b:en:en]}, nil
}

// span is the byte range a tensor occupies in a file.
type span struct {
	name       string
	begin, end int64
}

// checkOverlaps reports the first two tensors whose bytes overlap.
func checkOverlaps(spans []span) error {
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var last *span
	for i := range spans {
		s := &spans[i]
		if s.begin == s.end {
			continue
		}
		if last != nil && s.begin < last.end {
			return fmt.Errorf("tensors %s [%d, %d) and %s [%d, %d) overlap", untrusted.Quote(last.name), last.begin, last.end, untrusted.Quote(s.name), s.begin, s.end)
		}
		last = s
	}
	return nil
}

// OpenSafetensors maps one or more safetensors files and returns their
// tensors under the names stored in the files (no renaming, no filtering).
// A name present in two files is an error.
func OpenSafetensors(paths ...string) (Model, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("weights: no safetensors files given")
	}
	s := newSet("safetensors", paths[0])
	for _, p := range paths {
		if err := s.addSafetensors(p, nil); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// addSafetensors maps one file and adds its tensors; keep (if not nil)
// decides per name whether to add it and may return an error for a name that
// must not be there.
func (s *Set) addSafetensors(path string, keep func(name string) (bool, error)) error {
	_, err := s.addSafetensorsSized(path, keep)
	return err
}

// addSafetensorsSized is addSafetensors that also returns the bytes of all
// tensors in the file, skipped ones included (what an index's total_size
// counts).
func (s *Set) addSafetensorsSized(path string, keep func(name string) (bool, error)) (int64, error) {
	m, err := mapFile(path)
	if err != nil {
		return 0, err
	}
	s.files = append(s.files, m)
	ts, _, err := parseSafetensors(path, m.data)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range ts {
		total += int64(len(t.Data))
	}
	return total, s.keepTensors(path, ts, keep)
}

func (s *Set) keepTensors(path string, ts []*Tensor, keep func(name string) (bool, error)) error {
	for _, t := range ts {
		if keep != nil {
			ok, err := keep(t.Name)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %v", path, untrusted.Quote(t.Name), err)
			}
			if !ok {
				continue
			}
		}
		if err := s.add(t, path); err != nil {
			return err
		}
	}
	return nil
}
