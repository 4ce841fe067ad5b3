package cpu

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

const (
	// attnQueryBlock is how many query rows of one head pair a worker of
	// attentionRows takes.
	attnQueryBlock = 16
	// attnKeyBlock is how many keys are scored before the running softmax
	// is rescaled.
	attnKeyBlock = 64
)

// Attention is grouped-query attention with an online softmax over blocks
// of keys: memory is O(L·headDim) whatever the length. Each query row runs
// over the keys [lo, hi) its masks leave it (o.KeyRanges). Where tile
// kernels exist (attnTiles) the rows of all query heads of one kv head are
// scored in tiles against 64-key blocks (attn_tile.go); otherwise one row
// of a head pair at a time (attentionRows).
func (b *Backend) Attention(q, k, v *backend.Tensor, o backend.AttentionOptions) (*backend.Tensor, error) {
	qf, L, qc, err := act(q, "Attention q")
	if err != nil {
		return nil, err
	}
	kf, kl, kc, err := act(k, "Attention k")
	if err != nil {
		return nil, err
	}
	vf, vl, vc, err := act(v, "Attention v")
	if err != nil {
		return nil, err
	}
	if vl != kl || vc != kc {
		return nil, fmt.Errorf("cpu: Attention: k [%d %d] and v [%d %d] differ", kl, kc, vl, vc)
	}
	d, err := o.Check(L, qc, kl, kc)
	if err != nil {
		return nil, fmt.Errorf("cpu: Attention: %w", err)
	}
	g := attnGeom{L: L, qc: qc, kl: kl, kc: kc, d: d, heads: o.Heads, kvHeads: o.KVHeads,
		scale: o.Scale, ranges: o.KeyRanges(L, kl)}
	var out []float32
	if attnTiles {
		out, err = b.attentionTiled(qf, kf, vf, g)
	} else {
		out, err = b.attentionRows(qf, kf, vf, g)
	}
	if err != nil {
		return nil, err
	}
	return newAct(out, L, qc), nil
}

// attnGeom is one Attention call's shape: L query rows of qc values, kl
// key and value rows of kc, heads of d, and each query row's key range.
type attnGeom struct {
	L, qc, kl, kc, d int
	heads, kvHeads   int
	scale            float32
	ranges           [][2]int
}

// attentionRows is Attention one query row (of a head pair) at a time:
// two query heads that read the same kv head are scored together (a 2×4
// tile of heads × keys), so every key row is loaded once for both; each
// row's keys run in 64-key blocks from its lo. It serves where the tile
// kernels have no fast version (arm64's NEON kernels are the row ones).
func (b *Backend) attentionRows(qf, kf, vf []float32, g attnGeom) ([]float32, error) {
	L, qc, kc, d := g.L, g.qc, g.kc, g.d
	group := g.heads / g.kvHeads
	pair := 1
	if group%2 == 0 {
		pair = 2
	}
	units := g.heads / pair
	out := make([]float32, L*qc)
	qBlocks := (L + attnQueryBlock - 1) / attnQueryBlock
	if err := b.parallelDynamic(units*qBlocks, func(_, item int) {
		// Hand out the last query blocks (the longest, when causal) first.
		h0 := item % units * pair
		qb := qBlocks - 1 - item/units
		kvh := h0 / group
		var st attnState
		st.init(d, pair)
		for i := qb * attnQueryBlock; i < min(L, (qb+1)*attnQueryBlock); i++ {
			st.row(qf[i*qc+h0*d:i*qc+(h0+pair)*d], kf[kvh*d:], vf[kvh*d:], kc, g.ranges[i][0], g.ranges[i][1], g.scale)
			st.write(out[i*qc+h0*d : i*qc+(h0+pair)*d])
		}
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// attnState is one worker's online-softmax state for one or two heads.
type attnState struct {
	d, nh int
	s     [2][]float32 // scores of the current key block, per head
	acc   [2][]float32 // Σ p·v, per head
	m, l  [2]float32   // running max and sum, per head
}

func (st *attnState) init(d, nh int) {
	st.d, st.nh = d, nh
	for h := 0; h < nh; h++ {
		st.s[h] = make([]float32, attnKeyBlock)
		st.acc[h] = make([]float32, d)
	}
}

// row attends the query row(s) q (nh heads of d values, adjacent) over keys
// lo..hi-1: k and v start at the kv head's first value, rows stride apart.
func (st *attnState) row(q, k, v []float32, stride, lo, hi int, scale float32) {
	d, nh := st.d, st.nh
	for h := 0; h < nh; h++ {
		st.m[h] = float32(math.Inf(-1))
		st.l[h] = 0
		clear(st.acc[h])
	}
	var r8 [8]float32
	var r4 [4]float32
	for j0 := lo; j0 < hi; j0 += attnKeyBlock {
		j1 := min(hi, j0+attnKeyBlock)
		j := j0
		for ; j+4 <= j1; j += 4 {
			if nh == 2 {
				dot2x4(q, d, k[j*stride:], stride, d, &r8)
				copy(st.s[0][j-j0:j-j0+4], r8[:4])
				copy(st.s[1][j-j0:j-j0+4], r8[4:])
			} else {
				dot4s(q[:d], k[j*stride:], stride, &r4)
				copy(st.s[0][j-j0:j-j0+4], r4[:])
			}
		}
		for ; j < j1; j++ {
			for h := 0; h < nh; h++ {
				st.s[h][j-j0] = dot(q[h*d:(h+1)*d], k[j*stride:j*stride+d])
			}
		}
		for h := 0; h < nh; h++ {
			s := st.s[h][:j1-j0]
			bm := float32(math.Inf(-1))
			for t := range s {
				s[t] *= scale
				bm = max(bm, s[t])
			}
			if bm > st.m[h] {
				corr := expf(st.m[h] - bm)
				st.l[h] *= corr
				for t := range st.acc[h] {
					st.acc[h][t] *= corr
				}
				st.m[h] = bm
			}
			var p4 [4]float32
			t := 0
			for ; t+4 <= len(s); t += 4 {
				for u := range p4 {
					p4[u] = expf(s[t+u] - st.m[h])
					st.l[h] += p4[u]
				}
				axpy4(st.acc[h], v[(j0+t)*stride:], stride, &p4)
			}
			for ; t < len(s); t++ {
				p := expf(s[t] - st.m[h])
				st.l[h] += p
				axpy(st.acc[h], v[(j0+t)*stride:(j0+t)*stride+d], p)
			}
		}
	}
}

// write stores acc/l of each head into o.
func (st *attnState) write(o []float32) {
	for h := 0; h < st.nh; h++ {
		inv := 1 / st.l[h]
		for t, a := range st.acc[h] {
			o[h*st.d+t] = a * inv
		}
	}
}
