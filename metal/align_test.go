package metal

import (
	"context"
	"testing"

	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// countGPU records how weights are bound.
type countGPU struct{ wraps, uploads int }

func (g *countGPU) Name() string                                  { return "count" }
func (g *countGPU) Alloc(n int) (gbuf, error)                     { return &emuBuf{data: make([]byte, n)}, nil }
func (g *countGPU) Dispatch(d *dispatch) error                    { return nil }
func (g *countGPU) Release(b gbuf)                                {}
func (g *countGPU) Close() error                                  { return nil }
func (g *countGPU) Read(context.Context, gbuf, int, []byte) error { return nil }
func (g *countGPU) Upload(data []byte) (gbuf, error) {
	g.uploads++
	return &emuBuf{data: append([]byte(nil), data...)}, nil
}
func (g *countGPU) WrapAlias(data []byte) (gbuf, int, error) { return &emuBuf{data: data}, 0, nil }
func (g *countGPU) Wrap(data []byte) (gbuf, int, error) {
	g.wraps++
	return &emuBuf{data: data}, 0, nil
}

// TestWeightAlignment: a weight whose bytes are not aligned for the kernels'
// wide loads is copied, an aligned one (and a byte-loaded format) wrapped.
func TestWeightAlignment(t *testing.T) {
	raw := make([]byte, 1024) // Go heap blocks of this size are 8-byte aligned
	for _, c := range []struct {
		typ        quant.Type
		shape      []int
		bytes, off int
		copied     bool
	}{
		{quant.Q4_K, []int{2, 256}, 288, 0, false},
		{quant.Q4_K, []int{2, 256}, 288, 2, true},
		{quant.Q4_K, []int{2, 256}, 288, 4, false},
		{quant.Q8_0, []int{1, 64}, 68, 1, true},
		{quant.Q8_0, []int{1, 64}, 68, 2, false},
		{quant.Q6_K, []int{1, 256}, 210, 3, true},
		{quant.Q4_0, []int{1, 32}, 18, 1, false},
	} {
		g := &countGPU{}
		b := newBackend(g, "count")
		w := &weights.Tensor{Name: "w", Type: c.typ, Shape: c.shape, Data: raw[c.off : c.off+c.bytes]}
		bt, err := b.Weight(w)
		if err != nil {
			t.Fatalf("%v at offset %d: %v", c.typ, c.off, err)
		}
		if got := g.uploads == 1 && g.wraps == 0; got != c.copied {
			t.Errorf("%v at offset %d: copied %v (uploads %d, wraps %d), want %v", c.typ, c.off, got, g.uploads, g.wraps, c.copied)
		}
		h := bt.Handle.(*tensor)
		if eb := h.buf.(*emuBuf); string(eb.data[h.off:h.off+c.bytes]) != string(w.Data) {
			t.Errorf("%v at offset %d: bound bytes differ from the tensor's", c.typ, c.off)
		}
	}
}
