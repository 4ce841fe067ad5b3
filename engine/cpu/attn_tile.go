package cpu

import "math"

const (
	// attnKB is how many keys the tile kernels score per block: one
	// block of packed K (d × 64) and V (64 × dp) is read once for all the
	// query rows of a work unit.
	attnKB = 64
	// attnMR is how many query rows a micro-tile holds: the score kernel
	// keeps 4 rows × 64 keys and the P·V kernel 4 rows × 64 values in
	// registers.
	attnMR = 4
)

// attnUnitRows is about how many (query position, head) rows one work
// unit of attentionTiled holds: query positions × the query heads of one
// kv head.
var attnUnitRows = 128

// attentionTiled is Attention over tiles. K and V of every kv head are
// first packed into 64-key blocks (K transposed, V rows padded to dp, a
// multiple of 16, with zeros): O(Lk·kc) memory. A work unit is a run of
// query positions times all query heads of one kv head; its rows (query
// values read in place, in micro-tiles of 4; the scale is applied to the
// scores) are scored
// against each key block its rows' ranges reach, as a GEMM micro-kernel
// (each key row loaded once per micro-tile, not once per query row);
// each row then takes its online-softmax step (keys outside the row's
// [lo, hi) get exactly zero weight) and P·V folds the block into the
// row accumulators, rescaled in the same pass. Units are independent and
// each computes its rows in a fixed order, so the result does not depend
// on the thread count.
func (b *Backend) attentionTiled(qf, kf, vf []float32, g attnGeom) ([]float32, error) {
	d, dp := g.d, (g.d+15)&^15
	group := g.heads / g.kvHeads
	nblk := (g.kl + attnKB - 1) / attnKB
	kblk, vblk := d*attnKB, attnKB*dp
	kp := make([]float32, g.kvHeads*nblk*kblk)
	vp := make([]float32, g.kvHeads*nblk*vblk)
	if err := b.parallelDynamic(g.kvHeads*nblk, func(_, it int) {
		h, blk := it/nblk, it%nblk
		kb, vb := kp[it*kblk:(it+1)*kblk], vp[it*vblk:(it+1)*vblk]
		for j := range min(attnKB, g.kl-blk*attnKB) {
			at := (blk*attnKB+j)*g.kc + h*d
			for t, x := range kf[at : at+d] {
				kb[t*attnKB+j] = x
			}
			copy(vb[j*dp:j*dp+d], vf[at:at+d])
		}
	}); err != nil {
		return nil, err
	}
	pos := max(1, min(g.L, attnUnitRows/group))
	qBlocks := (g.L + pos - 1) / pos
	out := make([]float32, g.L*g.qc)
	tiles := make([]*attnTile, b.threads)
	if err := b.parallelDynamic(g.kvHeads*qBlocks, func(w, item int) {
		t := tiles[w]
		if t == nil {
			t = newAttnTile(pos*group, d, dp)
			tiles[w] = t
		}
		// Hand out the last query positions (the longest, when causal) first.
		qb := qBlocks - 1 - item/g.kvHeads
		t.run(qf, kp, vp, out, g, item%g.kvHeads, qb*pos, min(g.L, (qb+1)*pos), nblk)
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// attnTile is one worker's scratch for the units of attentionTiled. Row r
// of a unit is query position i0 + r/group, head r%group of the kv head.
type attnTile struct {
	d, dp int
	q     [][]float32 // per row: its query values (zero for padding rows)
	zero  []float32
	s     []float32 // [row][64]: scores, then softmax weights, of one key block
	acc   []float32 // [row][dp]: Σ p·v
	m, l  []float32 // running max and sum per row
	corr  []float32 // per row: the factor acc is rescaled by in this block
	lo    []int     // per row: key range [lo, hi)
	hi    []int
	tlo   []int // per micro-tile: the union of its rows' ranges
	thi   []int
	ja    []int // per micro-tile: the keys of this block any row weights
	jb    []int
}

func newAttnTile(rows, d, dp int) *attnTile {
	nt := (rows + attnMR - 1) / attnMR
	n := nt * attnMR
	return &attnTile{d: d, dp: dp,
		q: make([][]float32, n), zero: make([]float32, d), s: make([]float32, n*attnKB), acc: make([]float32, n*dp),
		m: make([]float32, n), l: make([]float32, n), corr: make([]float32, n),
		lo: make([]int, n), hi: make([]int, n),
		tlo: make([]int, nt), thi: make([]int, nt), ja: make([]int, nt), jb: make([]int, nt)}
}

// run computes query positions [i0, i1) of the query heads of kv head h
// into out.
func (t *attnTile) run(qf, kp, vp, out []float32, g attnGeom, h, i0, i1, nblk int) {
	d, dp := t.d, t.dp
	group := g.heads / g.kvHeads
	rows := (i1 - i0) * group
	nt := (rows + attnMR - 1) / attnMR
	for r := range nt * attnMR {
		if r >= rows {
			t.q[r] = t.zero
			t.lo[r], t.hi[r] = 0, 0
			continue
		}
		i, hq := i0+r/group, h*group+r%group
		t.q[r] = qf[i*g.qc+hq*d : i*g.qc+(hq+1)*d]
		t.lo[r], t.hi[r] = g.ranges[i][0], g.ranges[i][1]
		t.m[r], t.l[r] = float32(math.Inf(-1)), 0
	}
	clear(t.acc[:nt*attnMR*dp])
	ulo, uhi := math.MaxInt, 0
	for rt := range nt {
		lo, hi := math.MaxInt, 0
		for r := rt * attnMR; r < min(rows, (rt+1)*attnMR); r++ {
			lo, hi = min(lo, t.lo[r]), max(hi, t.hi[r])
		}
		t.tlo[rt], t.thi[rt] = lo, hi
		ulo, uhi = min(ulo, lo), max(uhi, hi)
	}
	const ts = attnMR * attnKB // one micro-tile of scores
	kblk, vblk := d*attnKB, attnKB*dp
	for blk := ulo / attnKB; blk*attnKB < uhi; blk++ {
		k0 := blk * attnKB
		at := h*nblk + blk
		kb, vb := kp[at*kblk:(at+1)*kblk], vp[at*vblk:(at+1)*vblk]
		for rt := range nt {
			if t.thi[rt] > k0 && t.tlo[rt] < k0+attnKB {
				attnScore(t.s[rt*ts:(rt+1)*ts], (*[attnMR][]float32)(t.q[rt*attnMR:]), kb, d)
			}
		}
		for rt := range nt {
			ja, jb := attnKB, 0
			if t.thi[rt] > k0 && t.tlo[rt] < k0+attnKB {
				for r := rt * attnMR; r < (rt+1)*attnMR; r++ {
					s := t.s[r*attnKB : (r+1)*attnKB]
					a, e := max(t.lo[r]-k0, 0), min(t.hi[r]-k0, attnKB)
					if a >= e { // no key of this block for the row (or a padding row)
						clear(s)
						t.corr[r] = 1
						continue
					}
					mn := max(t.m[r], attnRowMax(s, a, e, g.scale))
					c := float32(1)
					if mn != t.m[r] {
						c = expf(t.m[r] - mn)
					}
					t.l[r] = t.l[r]*c + attnRowExp(s, a, e, mn)
					t.m[r], t.corr[r] = mn, c
					ja, jb = min(ja, a), max(jb, e)
				}
			}
			t.ja[rt], t.jb[rt] = ja, jb
		}
		for rt := range nt {
			ja, jb := t.ja[rt], t.jb[rt]
			if ja < jb {
				attnPV(t.acc[rt*attnMR*dp:(rt+1)*attnMR*dp], t.s[rt*ts+ja:(rt+1)*ts], vb[ja*dp:jb*dp],
					dp, jb-ja, (*[attnMR]float32)(t.corr[rt*attnMR:]))
			}
		}
	}
	for r := range rows {
		i, hq := i0+r/group, h*group+r%group
		inv := 1 / t.l[r]
		dst := out[i*g.qc+hq*d : i*g.qc+(hq+1)*d]
		src := t.acc[r*dp : r*dp+len(dst)]
		for c, a := range src {
			dst[c] = a * inv
		}
	}
}
