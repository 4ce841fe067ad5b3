package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/shaders"
)

// maxHeadDim is the largest head size flash_attn_f32 takes.
const maxHeadDim = 128

// Attention is grouped-query attention under the masks of o. Plain causal
// attention (the decoder, whole prompts or chunks) and plain bidirectional
// attention use the kernels' own masks; segments and windows are resolved on
// the host into each query's key range (o.KeyRanges), which the kernels read
// from buffer 5 and use to skip every key block no query of theirs sees.
func (b *Backend) Attention(q, k, v *backend.Tensor, o backend.AttentionOptions) (*backend.Tensor, error) {
	qh, err := b.act(q, "Attention q")
	if err != nil {
		return nil, err
	}
	kh, err := b.act(k, "Attention k")
	if err != nil {
		return nil, err
	}
	vh, err := b.act(v, "Attention v")
	if err != nil {
		return nil, err
	}
	if kh.rows != vh.rows || kh.cols != vh.cols {
		return nil, fmt.Errorf("metal: Attention: k [%d %d] and v [%d %d] differ", kh.rows, kh.cols, vh.rows, vh.cols)
	}
	d, err := o.Check(qh.rows, qh.cols, kh.rows, kh.cols)
	if err != nil {
		return nil, fmt.Errorf("metal: Attention: %w", err)
	}
	if d > maxHeadDim {
		return nil, fmt.Errorf("metal: Attention: head dim %d > %d", d, maxHeadDim)
	}
	y, err := b.newAct(qh.rows, qh.cols)
	if err != nil {
		return nil, err
	}
	if qh.rows == 0 {
		return wrapT(y), nil
	}
	a := shaders.KargsAttn{L: int32(qh.rows), Lk: int32(kh.rows), NHead: int32(o.Heads), NKV: int32(o.KVHeads), HeadDim: int32(d),
		Causal: b2i(o.Causal), QStride: int32(qh.cols), KStride: int32(kh.cols), VStride: int32(vh.cols), OStride: int32(qh.cols), Scale: o.Scale}
	ranges := in(5, qh) // not read unless a.Ranged
	if o.Segments != nil || o.Window > 0 {
		kr := o.KeyRanges(qh.rows, kh.rows)
		flat := make([]int, 0, 2*len(kr))
		for _, r := range kr {
			flat = append(flat, r[0], r[1])
		}
		rb, err := b.hostInts(flat)
		if err != nil {
			return nil, err
		}
		defer b.dev.Release(rb)
		a.Ranged, ranges = 1, arg{Index: 5, Buf: rb}
	}
	kernel, perGroup := "flash_attn_f32", 8
	switch d {
	case 32, 64, 128: // simdgroup-matrix version
		kernel, perGroup = fmt.Sprintf("flash_attn_mma_d%d", d), 32
	}
	err = b.run(kernel, [3]int{groups(qh.rows, perGroup), o.Heads, 1}, [3]int{128, 1, 1}, shaders.Bytes(&a),
		in(1, qh), in(2, kh), in(3, vh), out(4, y), ranges)
	return wrapT(y), err
}
