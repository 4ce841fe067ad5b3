package weights

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

// WriteSafetensors writes tensors to a safetensors file, sorted by name, with
// optional __metadata__. Only plain element types (floats and integers) can
// be written; MLX tensors are written as their parts (weight, scales, biases)
// by giving those as separate tensors.
func WriteSafetensors(path string, tensors []*Tensor, meta map[string]string) error {
	ts := append([]*Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var off int64
	for i, t := range ts {
		if i > 0 && ts[i-1].Name == t.Name {
			return fmt.Errorf("write %s: tensor %q given twice", path, t.Name)
		}
		dt, ok := safetensorsDTypeName(t.Type)
		if !ok {
			return fmt.Errorf("write %s: tensor %q: type %v has no safetensors dtype", path, t.Name, t.Type)
		}
		size, err := byteSize(t.Type, t.Shape)
		if err != nil || size != int64(len(t.Data)) {
			return fmt.Errorf("write %s: tensor %q: %d bytes for %v %v", path, t.Name, len(t.Data), t.Type, t.Shape)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = map[string]any{"dtype": dt, "shape": shape, "data_offsets": []int64{off, off + size}}
		off += size
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	binary.Write(w, binary.LittleEndian, uint64(len(h)))
	w.Write(h)
	for _, t := range ts {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
