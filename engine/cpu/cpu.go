// Package cpu is the CPU backend: it runs every op of backend.Backend at once
// on a pool of worker goroutines (all cores by default). Activations are
// float32 slices; weights stay in their mapped storage type and are decoded
// tile by tile inside the matmul, so nothing is copied wholesale. It is the
// numerical oracle every other backend is checked against.
package cpu

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

func init() {
	backend.Register("cpu", func(o backend.Options) (backend.Backend, error) { return New(o), nil })
}

// Backend is the CPU implementation of backend.Backend.
type Backend struct {
	threads int
	precise bool
	// stop is the interrupt of the decision running now (Interrupt), nil
	// for none: the workers check it between the chunks they pull.
	stop atomic.Pointer[stopper]
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.RowChunker    = (*Backend)(nil)
	_ backend.Interruptible = (*Backend)(nil)
)

// view is the handle of a Rows view: it shares its parent's storage.
type view []float32

// New returns a CPU backend with o.Threads workers (0 or less: all cores).
func New(o backend.Options) *Backend {
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	return &Backend{threads: threads, precise: o.Precise}
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads returns the number of worker goroutines.
func (b *Backend) Threads() int { return b.threads }

// Close does nothing: the CPU backend owns no resources beyond Go memory.
func (b *Backend) Close() error { return nil }

// weight is the handle of a bound checkpoint tensor.
type weight struct {
	t    *weights.Tensor
	rows int
	cols int
	dec  decoder
	mlx  *mlxRows // MLX affine weights only
}

func newAct(f []float32, rows, cols int) *backend.Tensor {
	return &backend.Tensor{Type: quant.F32, Shape: []int{rows, cols}, Handle: f}
}

// act returns the float32 data of an activation tensor, checking it has
// rows*cols elements.
func act(t *backend.Tensor, what string) ([]float32, int, int, error) {
	if t == nil {
		return nil, 0, 0, fmt.Errorf("cpu: %s: nil tensor", what)
	}
	f, ok := t.Handle.([]float32)
	if v, isView := t.Handle.(view); isView {
		f, ok = v, true
	}
	if !ok {
		return nil, 0, 0, fmt.Errorf("cpu: %s: not a float32 activation (type %v, handle %T)", what, t.Type, t.Handle)
	}
	r, c := t.Rows(), t.Cols()
	if r*c != len(f) {
		return nil, 0, 0, fmt.Errorf("cpu: %s: shape %v does not match %d values", what, t.Shape, len(f))
	}
	return f, r, c, nil
}

// Weight binds a checkpoint tensor without copying it.
func (b *Backend) Weight(t *weights.Tensor) (*backend.Tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("cpu: Weight: nil tensor")
	}
	var rows, cols int
	switch len(t.Shape) {
	case 1:
		rows, cols = 1, t.Shape[0]
	case 2:
		rows, cols = t.Shape[0], t.Shape[1]
	case 3:
		return b.stackWeight(t)
	default:
		return nil, fmt.Errorf("cpu: weight %s: shape %v is not 1-D, 2-D or stacked 3-D", t.Name, t.Shape)
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("cpu: weight %s: bad shape %v", t.Name, t.Shape)
	}
	if t.Type == quant.MLXAffine4 || t.Type == quant.MLXAffine8 {
		return b.mlxWeight(t, rows, cols)
	}
	dec, err := decoderFor(t)
	if err != nil {
		return nil, fmt.Errorf("cpu: weight %s: %w", t.Name, err)
	}
	if cols%dec.blockElems != 0 {
		return nil, fmt.Errorf("cpu: weight %s: %d columns are not a multiple of the %v block (%d)", t.Name, cols, t.Type, dec.blockElems)
	}
	rb := cols / dec.blockElems * dec.blockBytes
	if len(t.Data) != rows*rb {
		return nil, fmt.Errorf("cpu: weight %s: %d bytes, want %d for %v %v", t.Name, len(t.Data), rows*rb, t.Type, t.Shape)
	}
	dec.rowBytes = rb
	return &backend.Tensor{Type: t.Type, Shape: append([]int(nil), t.Shape...), Handle: &weight{t: t, rows: rows, cols: cols, dec: dec}}, nil
}

// Upload copies data into a new [rows, cols] float32 tensor.
func (b *Backend) Upload(data []float32, rows, cols int) (*backend.Tensor, error) {
	if rows < 0 || cols < 0 || rows*cols != len(data) {
		return nil, fmt.Errorf("cpu: Upload: %d values for shape [%d %d]", len(data), rows, cols)
	}
	return newAct(append([]float32(nil), data...), rows, cols), nil
}

// Read returns a copy of t as float32 (I32 tensors are converted, weights
// are decoded).
func (b *Backend) Read(ctx context.Context, t *backend.Tensor) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("cpu: Read: nil tensor")
	}
	switch h := t.Handle.(type) {
	case []float32:
		return append([]float32(nil), h...), nil
	case view:
		return append([]float32(nil), h...), nil
	case []int32:
		out := make([]float32, len(h))
		for i, v := range h {
			out[i] = float32(v)
		}
		return out, nil
	case *weight:
		out := make([]float32, h.rows*h.cols)
		for r := 0; r < h.rows; r++ {
			h.decodeRow(out[r*h.cols:(r+1)*h.cols], r)
		}
		return out, nil
	case nil:
		return nil, fmt.Errorf("cpu: Read: tensor was freed")
	}
	return nil, fmt.Errorf("cpu: Read: unknown handle %T", t.Handle)
}

// Free drops the storage of activation tensors (and views); weights stay
// mapped. (Recycling freed buffers was measured: it raised the peak
// resident set, since pooled buffers count as live for the collector.)
func (b *Backend) Free(ts ...*backend.Tensor) {
	for _, t := range ts {
		if t == nil {
			continue
		}
		t.Handle = nil // the collector reclaims activations
	}
}

// Embed gathers rows of table for ids.
func (b *Backend) Embed(table *backend.Tensor, ids []int) (*backend.Tensor, error) {
	if table == nil {
		return nil, fmt.Errorf("cpu: Embed: nil table")
	}
	vocab, dim := table.Rows(), table.Cols()
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("cpu: Embed: token id %d at position %d is outside the vocabulary [0, %d)", id, i, vocab)
		}
	}
	out := make([]float32, len(ids)*dim)
	switch h := table.Handle.(type) {
	case *weight:
		if err := b.parallel(len(ids), 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				h.decodeRow(out[i*dim:(i+1)*dim], ids[i])
			}
		}); err != nil {
			return nil, err
		}
	case []float32:
		if len(h) != vocab*dim {
			return nil, fmt.Errorf("cpu: Embed: table shape %v does not match %d values", table.Shape, len(h))
		}
		for i, id := range ids {
			copy(out[i*dim:(i+1)*dim], h[id*dim:(id+1)*dim])
		}
	default:
		return nil, fmt.Errorf("cpu: Embed: unsupported table handle %T", table.Handle)
	}
	return newAct(out, len(ids), dim), nil
}

// Add returns a + b.
func (b *Backend) Add(x, y *backend.Tensor) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "Add a")
	if err != nil {
		return nil, err
	}
	yf, r2, c2, err := act(y, "Add b")
	if err != nil {
		return nil, err
	}
	if r != r2 || c != c2 {
		return nil, fmt.Errorf("cpu: Add: shapes [%d %d] and [%d %d] differ", r, c, r2, c2)
	}
	out := make([]float32, len(xf))
	if err := b.parallel(len(out), 1<<15, func(lo, hi int) {
		o, xs, ys := out[lo:hi], xf[lo:hi], yf[lo:hi]
		for i := range o {
			o[i] = xs[i] + ys[i]
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, c), nil
}

// AddRows returns x with row i of y added to row rows[i].
func (b *Backend) AddRows(x *backend.Tensor, rows []int, y *backend.Tensor) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "AddRows x")
	if err != nil {
		return nil, err
	}
	yf, yr, yc, err := act(y, "AddRows y")
	if err != nil {
		return nil, err
	}
	if yc != c || yr != len(rows) {
		return nil, fmt.Errorf("cpu: AddRows: y [%d %d] does not fit %d rows of %d", yr, yc, len(rows), c)
	}
	for _, row := range rows {
		if row < 0 || row >= r {
			return nil, fmt.Errorf("cpu: AddRows: row %d outside [0, %d)", row, r)
		}
	}
	out := make([]float32, len(xf))
	copy(out, xf)
	for i, row := range rows {
		if row < 0 || row >= r {
			return nil, fmt.Errorf("cpu: AddRows: row %d outside [0, %d)", row, r)
		}
		o := out[row*c : (row+1)*c]
		for t, v := range yf[i*c : (i+1)*c] {
			o[t] += v
		}
	}
	return newAct(out, r, c), nil
}

// Rows returns a view of rows [lo, hi) of t.
func (b *Backend) Rows(t *backend.Tensor, lo, hi int) (*backend.Tensor, error) {
	f, r, c, err := act(t, "Rows")
	if err != nil {
		return nil, err
	}
	if lo < 0 || hi > r || lo > hi {
		return nil, fmt.Errorf("cpu: Rows: [%d, %d) outside %d rows", lo, hi, r)
	}
	return &backend.Tensor{Type: t.Type, Shape: []int{hi - lo, c}, Handle: view(f[lo*c : hi*c : hi*c])}, nil
}

// Concat stacks the rows of ts.
func (b *Backend) Concat(ts ...*backend.Tensor) (*backend.Tensor, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("cpu: Concat: no tensors")
	}
	rows, cols := 0, ts[0].Cols()
	for i, t := range ts {
		_, r, c, err := act(t, fmt.Sprintf("Concat %d", i))
		if err != nil {
			return nil, err
		}
		if c != cols {
			return nil, fmt.Errorf("cpu: Concat: tensor %d has %d columns, want %d", i, c, cols)
		}
		rows += r
	}
	out := make([]float32, rows*cols)
	o := 0
	for _, t := range ts {
		f, _, _, _ := act(t, "Concat")
		o += copy(out[o:], f)
	}
	return newAct(out, rows, cols), nil
}
