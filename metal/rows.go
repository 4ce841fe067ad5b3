package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

// Rows implements backend.RowChunker: a view of rows [lo, hi) of an
// activation, sharing its buffer (at an offset); valid while t lives, and
// freeing it releases nothing.
func (b *Backend) Rows(t *backend.Tensor, lo, hi int) (*backend.Tensor, error) {
	h, err := b.handle(t, "Rows")
	if err != nil {
		return nil, err
	}
	if h.src != nil || (h.typ != quant.F32 && h.typ != quant.I32) {
		return nil, fmt.Errorf("metal: Rows: not an activation (%v)", h.typ)
	}
	if lo < 0 || hi < lo || hi > h.rows {
		return nil, fmt.Errorf("metal: Rows: [%d, %d) outside %d rows", lo, hi, h.rows)
	}
	v := rowsOf(h, lo, hi-lo)
	return &backend.Tensor{Type: v.typ, Shape: []int{v.rows, v.cols}, Handle: v}, nil
}

// Concat implements backend.RowChunker: the activations stacked row-wise
// into a new one, copied on the device (copy_f32 into the new tensor at
// each part's row offset).
func (b *Backend) Concat(ts ...*backend.Tensor) (*backend.Tensor, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("metal: Concat: nothing to concatenate")
	}
	hs := make([]*tensor, len(ts))
	rows := 0
	for i, t := range ts {
		h, err := b.act(t, fmt.Sprintf("Concat part %d", i))
		if err != nil {
			return nil, err
		}
		if i > 0 && h.cols != hs[0].cols {
			return nil, fmt.Errorf("metal: Concat: part %d has %d columns, part 0 %d", i, h.cols, hs[0].cols)
		}
		hs[i] = h
		rows += h.rows
	}
	y, err := b.newAct(rows, hs[0].cols)
	if err != nil {
		return nil, err
	}
	r0 := 0
	for _, h := range hs {
		dst := rowsOf(y, r0, h.rows)
		if err := b.perElement("copy_f32", h.rows*h.cols, h.cols, in(1, h), out(2, dst)); err != nil {
			b.Free(wrapT(y))
			return nil, err
		}
		r0 += h.rows
	}
	return wrapT(y), nil
}
