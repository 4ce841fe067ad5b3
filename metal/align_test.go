package metal

import (
	"testing"

	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// newCounting returns a backend over a fakeGPU (Wrap fails with
// errTooLarge past limit bytes; 0: no limit).
func newCounting(t *testing.T, limit int) (*Backend, *fakeGPU) {
	t.Helper()
	g := newFakeGPU()
	g.limit = limit
	b, err := newBackend(g, "count")
	if err != nil {
		t.Fatal(err)
	}
	return b, g
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
		b, g := newCounting(t, 0)
		w := &weights.Tensor{Name: "w", Type: c.typ, Shape: c.shape, Data: raw[c.off : c.off+c.bytes]}
		bt, err := b.Weight(w)
		if err != nil {
			t.Fatalf("%v at offset %d: %v", c.typ, c.off, err)
		}
		if got := g.uploads == 1 && g.wraps == 0; got != c.copied {
			t.Errorf("%v at offset %d: copied %v (uploads %d, wraps %d), want %v", c.typ, c.off, got, g.uploads, g.wraps, c.copied)
		}
		h := bt.Handle.(*tensor)
		if eb := h.buf.(*hostBuf); string(eb.data[h.off:h.off+c.bytes]) != string(w.Data) {
			t.Errorf("%v at offset %d: bound bytes differ from the tensor's", c.typ, c.off)
		}
	}
}

// TestWeightStacked: a contiguous stack of experts is one view with an
// expert stride, a parted one (or a contiguous one too large for one
// buffer) one view per expert; stacked experts are for MoE only.
func TestWeightStacked(t *testing.T) {
	const E, rows, cols = 3, 2, 64
	rb := 2 * 34 // q8_0: two blocks per row
	all := make([]byte, E*rows*rb)
	for i := range all {
		all[i] = byte(i)
	}
	parts := make([][]byte, E)
	for e := range parts {
		parts[e] = append([]byte(nil), all[e*rows*rb:(e+1)*rows*rb]...)
	}
	shape := []int{E, rows, cols}
	for _, c := range []struct {
		what   string
		t      *weights.Tensor
		limit  int
		parted bool
	}{
		{"contiguous", &weights.Tensor{Name: "w", Type: quant.Q8_0, Shape: shape, Data: all}, 0, false},
		{"parted", &weights.Tensor{Name: "w", Type: quant.Q8_0, Shape: shape, Parts: parts}, 0, true},
		{"contiguous, too large for one buffer", &weights.Tensor{Name: "w", Type: quant.Q8_0, Shape: shape, Data: all}, rows * rb, true},
	} {
		b, g := newCounting(t, c.limit)
		bt, err := b.Weight(c.t)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		h := bt.Handle.(*tensor)
		if h.experts != E || h.rows != rows || h.cols != cols || h.stride != rows*rb || (h.parts != nil) != c.parted {
			t.Fatalf("%s: handle %d experts [%d %d], stride %d, %d parts", c.what, h.experts, h.rows, h.cols, h.stride, len(h.parts))
		}
		want := 1
		if c.parted {
			want = E
		}
		if g.wraps != want || g.uploads != 0 {
			t.Errorf("%s: %d wraps, %d uploads, want %d wraps", c.what, g.wraps, g.uploads, want)
		}
		for e := 0; e < E; e++ {
			buf, off := h.buf, h.off+e*h.stride
			if c.parted {
				buf, off = h.parts[e].buf, h.parts[e].off
			}
			if got := buf.(*hostBuf).data[off : off+rows*rb]; string(got) != string(parts[e]) {
				t.Errorf("%s: expert %d bound to the wrong bytes", c.what, e)
			}
		}
		x, err := b.Upload(make([]float32, cols), 1, cols)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.MatMul(x, bt); err == nil {
			t.Errorf("%s: MatMul of stacked experts: no error", c.what)
		}
	}
	for _, bad := range []*weights.Tensor{
		{Name: "short", Type: quant.Q8_0, Shape: shape, Data: all[:len(all)-1]},
		{Name: "parts", Type: quant.Q8_0, Shape: shape, Parts: parts[:2]},
		{Name: "part bytes", Type: quant.Q8_0, Shape: shape, Parts: [][]byte{parts[0], parts[1], parts[2][:10]}},
		{Name: "no experts", Type: quant.Q8_0, Shape: []int{0, rows, cols}},
	} {
		if b, _ := newCounting(t, 0); func() error { _, err := b.Weight(bad); return err }() == nil {
			t.Errorf("%s: no error", bad.Name)
		}
	}
}
