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
	var rb gbuf // the queries' key ranges (segments, windows)
	if o.Segments != nil || o.Window > 0 {
		kr := o.KeyRanges(qh.rows, kh.rows)
		flat := make([]int, 0, 2*len(kr))
		for _, r := range kr {
			flat = append(flat, r[0], r[1])
		}
		if rb, err = b.hostInts(flat); err != nil {
			return nil, err
		}
		defer b.release(rb)
	}
	kernel, perGroup := "flash_attn_f32", 8
	switch d {
	case 32, 64, 128: // simdgroup-matrix version
		kernel, perGroup = fmt.Sprintf("flash_attn_mma_d%d", d), 32
	}
	// Query chunks: a long sequence's attention is many seconds of GPU work,
	// so it is launched in chunks of whole threadgroups of queries, each
	// under opSeconds (a chunk is bound as a view of q and y; with the
	// plain causal mask it sees only its keys, the last rows of a shorter
	// k). One threadgroup of queries over every key is far below a command
	// buffer's budget at the longest state (32 queries over 64k keys of 32
	// heads: ~30 ms on the conservative chip), so keys are never split.
	Lq, Lk := qh.rows, kh.rows
	for q0 := 0; q0 < Lq; {
		n := b.queryChunk(Lq-q0, perGroup, o.Heads, d, func(n int) float64 { return attnKeys(o, Lq, Lk, q0, n) })
		q1 := q0 + n
		a := shaders.KargsAttn{L: int32(n), Lk: int32(Lk), NHead: int32(o.Heads), NKV: int32(o.KVHeads), HeadDim: int32(d),
			Causal: b2i(o.Causal), QStride: int32(qh.cols), KStride: int32(kh.cols), VStride: int32(vh.cols), OStride: int32(qh.cols), Scale: o.Scale}
		if o.Causal && rb == nil {
			a.Lk = int32(Lk - Lq + q1) // the chunk's queries are the last rows of its keys
		}
		qoff, yoff := 4*q0*qh.cols, 4*q0*qh.cols
		ranges := arg{Index: 5, Buf: qh.buf, Off: qh.off} // not read unless a.Ranged
		if rb != nil {
			a.Ranged, ranges = 1, arg{Index: 5, Buf: rb, Off: 8 * q0}
		}
		c := attentionCost(n, o.Heads, d, perGroup, attnKeys(o, Lq, Lk, q0, n))
		err = b.run(c, kernel, [3]int{groups(n, perGroup), o.Heads, 1}, [3]int{128, 1, 1}, shaders.Bytes(&a),
			arg{Index: 1, Buf: qh.buf, Off: qh.off + qoff}, in(2, kh), in(3, vh),
			arg{Index: 4, Buf: y.buf, Off: y.off + yoff, Out: true}, ranges)
		if err != nil {
			b.Free(wrapT(y))
			return nil, err
		}
		q0 = q1
	}
	return wrapT(y), nil
}

// attnKeys is the average number of keys the queries [q0, q0+n) of Lq see
// (an upper bound for segments and windows, which are resolved on the
// device).
func attnKeys(o backend.AttentionOptions, Lq, Lk, q0, n int) float64 {
	if !o.Causal || o.Segments != nil || o.Window > 0 {
		if o.Window > 0 {
			return float64(min(Lk, o.Window))
		}
		return float64(Lk)
	}
	// Query i sits at key position Lk-Lq+i and sees the keys up to it.
	first := Lk - Lq + q0 + 1
	return float64(first) + float64(n-1)/2
}

// queryChunk returns how many of the left queries the next chunk takes: a
// multiple of perGroup (or all that are left) whose estimated cost stays
// under opSeconds, at least one threadgroup's worth.
func (b *Backend) queryChunk(left, perGroup, heads, d int, keys func(n int) float64) int {
	n := left
	opLimit := b.opLimit()
	for n > perGroup && attentionCost(n, heads, d, perGroup, keys(n)).seconds() > opLimit {
		n = max(perGroup, (n/2+perGroup-1)/perGroup*perGroup)
	}
	return n
}
