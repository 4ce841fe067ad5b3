package metal

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/shaders"
)

// maxHeadDim is the largest head size flash_attn_f32 takes.
const maxHeadDim = 128

// attnHalf selects flash_attn_mma_half_d* (Q, K, V and the softmax
// probabilities rounded to half, float accumulation: NMSE ~1e-7 against
// exact attention, twice the keys per block) over flash_attn_mma_d* (float
// operands). It stays off while the conformance suite and clef selftest
// hold attention to an NMSE of 1e-8, which half operands cannot meet.
var attnHalf = false

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
			b.Free(wrapT(y))
			return nil, err
		}
		defer b.release(rb)
	}
	kernel, perGroup := "flash_attn_f32", 8
	switch d {
	case 32, 64, 72, 128: // simdgroup-matrix versions
		kernel, perGroup = fmt.Sprintf("flash_attn_mma_d%d", d), 32
		if attnHalf {
			kernel = fmt.Sprintf("flash_attn_mma_half_d%d", d)
		}
	}
	var lim *attnKVLimbs
	if tk, ok := b.tensorAttnKernel(d); ok && qh.rows > mvMaxTokens {
		// The M5 path (tensor_attn.metal): QKᵀ and PV as int8 matmul2d on
		// limbs of q, k and v (attn_limbs_*), 64 queries per threadgroup.
		// A few queries (decode) keep the shader kernel: the limbs of k and
		// v are one more pass over them (read 8 bytes an element, write 6),
		// repaid only when several query tiles read them.
		kernel, perGroup = tk, tensorAttnQueries
		if lim, err = b.attnKVLimbsOf(kh, vh, o.KVHeads); err != nil {
			b.Free(wrapT(y))
			return nil, err
		}
		defer lim.release(b)
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
		bufs := []arg{{Index: 1, Buf: qh.buf, Off: qh.off + qoff}, in(2, kh), in(3, vh),
			{Index: 4, Buf: y.buf, Off: y.off + yoff, Out: true}, ranges}
		var ql, sq gbuf // the chunk's Q limbs and scales (tensor path)
		if lim != nil {
			if ql, sq, err = b.attnQLimbs(qh, q0, n, o.Heads); err == nil {
				bufs = []arg{{Index: 1, Buf: ql}, {Index: 2, Buf: lim.k}, {Index: 3, Buf: lim.v}, bufs[3], ranges,
					{Index: 6, Buf: sq}, {Index: 7, Buf: lim.sk}, {Index: 8, Buf: lim.sv}}
			}
		}
		if err == nil {
			err = b.run(c, kernel, [3]int{groups(n, perGroup), o.Heads, 1}, [3]int{128, 1, 1}, shaders.Bytes(&a), bufs...)
		}
		b.release(ql) // the next chunk may take them: dispatches run in order
		b.release(sq)
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

// The int8 limbs of attention's tensor path (tensor_attn.metal): every
// vector of q and k (one head of a row) becomes three int8 limbs of 24-bit
// codes and a float scale (attn_limbs_qk), v the same per 64-key block and
// channel (attn_limbs_v); flash_attn_t_d128 multiplies the limbs on the
// matrix units. Rows are padded to whole blocks of 64 with zero codes.
const (
	attnLimbsQK   = "attn_limbs_qk"
	attnLimbsV    = "attn_limbs_v"
	attnLimbBytes = 3 * tensorAttnDim // bytes of the limbs of one vector of 128
)

// attnKVLimbs holds the limbs of one call's k and v and their scales.
type attnKVLimbs struct {
	k, sk, v, sv gbuf
}

func (l *attnKVLimbs) release(b *Backend) {
	for _, g := range []gbuf{l.k, l.sk, l.v, l.sv} {
		b.release(g)
	}
}

// attnKVLimbsOf launches the limbs of every key and value of nkv kv heads.
func (b *Backend) attnKVLimbsOf(kh, vh *tensor, nkv int) (*attnKVLimbs, error) {
	Lk := kh.rows
	pad := groups(Lk, tensorAttnQueries) * tensorAttnQueries // keys in whole blocks
	blocks := pad / tensorAttnQueries
	l := &attnKVLimbs{}
	for _, a := range []struct {
		g    *gbuf
		n    int
		what string
	}{
		{&l.k, pad * nkv * attnLimbBytes, "the K limbs of attention"},
		{&l.sk, 4 * pad * nkv, "the K scales of attention"},
		{&l.v, pad * nkv * attnLimbBytes, "the V limbs of attention"},
		{&l.sv, 4 * blocks * nkv * tensorAttnDim, "the V scales of attention"},
	} {
		var err error
		if *a.g, err = b.alloc(a.n, a.what); err != nil {
			l.release(b)
			return nil, err
		}
	}
	if Lk == 0 {
		return l, nil // no key block is read
	}
	c := streamCost(Lk*nkv*tensorAttnDim, 7, 12) // a float read, three limbs written, the split
	ka := shaders.KargsAttnLimbs{Rows: int32(Lk), Heads: int32(nkv), XStride: int32(kh.cols), KOrder: 1}
	err := b.run(c, attnLimbsQK, [3]int{pad * nkv / 4, 1, 1}, [3]int{128, 1, 1}, shaders.Bytes(&ka), in(1, kh),
		arg{Index: 2, Buf: l.k, Out: true}, arg{Index: 3, Buf: l.sk, Out: true})
	if err == nil {
		va := shaders.KargsAttnLimbs{Rows: int32(Lk), Heads: int32(nkv), XStride: int32(vh.cols)}
		err = b.run(c, attnLimbsV, [3]int{blocks, nkv, 1}, [3]int{128, 1, 1}, shaders.Bytes(&va), in(1, vh),
			arg{Index: 2, Buf: l.v, Out: true}, arg{Index: 3, Buf: l.sv, Out: true})
	}
	if err != nil {
		l.release(b)
		return nil, err
	}
	return l, nil
}

// attnQLimbs launches the limbs of queries [q0, q0+n) of heads heads (rows
// padded to whole blocks of 64) into new pool buffers: the limbs and the
// scales.
func (b *Backend) attnQLimbs(qh *tensor, q0, n, heads int) (ql, sq gbuf, err error) {
	pad := groups(n, tensorAttnQueries) * tensorAttnQueries
	if ql, err = b.alloc(pad*heads*attnLimbBytes, "the Q limbs of attention"); err != nil {
		return nil, nil, err
	}
	if sq, err = b.alloc(4*pad*heads, "the Q scales of attention"); err != nil {
		b.release(ql)
		return nil, nil, err
	}
	a := shaders.KargsAttnLimbs{Rows: int32(n), Heads: int32(heads), XStride: int32(qh.cols)}
	err = b.run(streamCost(n*heads*tensorAttnDim, 7, 12), attnLimbsQK, [3]int{pad * heads / 4, 1, 1}, [3]int{128, 1, 1},
		shaders.Bytes(&a), arg{Index: 1, Buf: qh.buf, Off: qh.off + 4*q0*qh.cols},
		arg{Index: 2, Buf: ql, Out: true}, arg{Index: 3, Buf: sq, Out: true})
	if err != nil {
		b.release(ql)
		b.release(sq)
		return nil, nil, err
	}
	return ql, sq, nil
}
