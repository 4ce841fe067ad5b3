package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

var _ backend.ChunkSizer = (*Backend)(nil)

// ChunkRows is the rows per chunk the Metal backend asks a model to run
// its layers at (PreferredChunkRows), four times llama.cpp's 512-row
// ubatch and the prefill step of mlx-lm.
//
// Why: the MoE tiles (moe.metal) gather 64 tokens of one expert, and a
// chunk routes rows × top-k / experts tokens to each: with the thinker's
// top-8 of 128 experts that is ~32 at 512 rows (tiles about half full),
// ~64 at 1024 and ~128 at 2048, where the partial last tile of an expert
// is a small share of its work. The dense projections' grids and the
// attention launches get more threadgroups per launch as well.
//
// Memory (pool.go counts it against the working set): a chunk's own
// activations are about 110 KiB a row in the thinker (float32 unless
// said: q, its norm and RoPE and the attention output 16 KiB each, two
// or three live at once; the MoE's down output [rows × 8, hidden] 64 KiB,
// its hidden activations in half 12 KiB, its input copy, result and the
// residual 8 KiB each): ~55 MiB at 512 rows, ~220 MiB at 2048. What
// spans the whole prompt does not depend on the chunk: at 64k tokens a
// layer holds its input (512 MiB), K and V (128 MiB each), the chunks'
// outputs and their concatenation (512 MiB each), ~1.75 GiB, so 2048-row
// chunks add ~165 MiB (~9%) to the activations' peak of a 64k-token
// prefill, next to ~16 GiB of q4_K thinker weights in a working set of
// about three quarters of memory (~27 GiB on the smallest M4 Max, 36 GB).
// No launch is split by it either: at
// 2048 rows the largest, the gathered gate or up projection, is ~20 ms on
// the cost model's conservative chip (the split is at opSeconds, 0.2 s).
const ChunkRows = 2048

// PreferredChunkRows implements backend.ChunkSizer: ChunkRows.
func (b *Backend) PreferredChunkRows() int { return ChunkRows }

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
