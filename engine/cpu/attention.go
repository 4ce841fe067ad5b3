package cpu

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

const (
	// attnQueryBlock is how many query rows of one head a worker takes.
	attnQueryBlock = 16
	// attnKeyBlock is how many keys are scored before the running softmax
	// is rescaled.
	attnKeyBlock = 64
)

// Attention is causal grouped-query attention with an online softmax over
// blocks of keys: memory is O(L·headDim) whatever the length.
func (b *Backend) Attention(q, k, v *backend.Tensor, nHead, nKV int, scale float32) (*backend.Tensor, error) {
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
	if nHead <= 0 || nKV <= 0 || nHead%nKV != 0 || qc%nHead != 0 {
		return nil, fmt.Errorf("cpu: Attention: %d query heads, %d kv heads, width %d do not fit", nHead, nKV, qc)
	}
	d := qc / nHead
	if kl != L || vl != L || kc != nKV*d || vc != nKV*d {
		return nil, fmt.Errorf("cpu: Attention: q [%d %d], k [%d %d], v [%d %d] do not fit %d/%d heads of %d", L, qc, kl, kc, vl, vc, nHead, nKV, d)
	}
	group := nHead / nKV
	out := make([]float32, L*qc)
	qBlocks := (L + attnQueryBlock - 1) / attnQueryBlock
	b.parallelDynamic(nHead*qBlocks, func(_, item int) {
		// Hand out the longest (last) query blocks first.
		h := item % nHead
		qb := qBlocks - 1 - item/nHead
		kvh := h / group
		s := make([]float32, attnKeyBlock)
		acc := make([]float32, d)
		var r4 [4]float32
		for i := qb * attnQueryBlock; i < min(L, (qb+1)*attnQueryBlock); i++ {
			qr := qf[i*qc+h*d : i*qc+(h+1)*d]
			m := float32(math.Inf(-1))
			var l float32
			clear(acc)
			for j0 := 0; j0 <= i; j0 += attnKeyBlock {
				j1 := min(i+1, j0+attnKeyBlock)
				bm := float32(math.Inf(-1))
				j := j0
				for ; j+4 <= j1; j += 4 {
					dot4s(qr, kf[j*kc+kvh*d:], kc, &r4)
					for t, v := range r4 {
						sc := v * scale
						s[j-j0+t] = sc
						bm = max(bm, sc)
					}
				}
				for ; j < j1; j++ {
					sc := dot(qr, kf[j*kc+kvh*d:j*kc+(kvh+1)*d]) * scale
					s[j-j0] = sc
					bm = max(bm, sc)
				}
				if bm > m {
					corr := float32(math.Exp(float64(m - bm)))
					l *= corr
					for t := range acc {
						acc[t] *= corr
					}
					m = bm
				}
				for j := j0; j < j1; j++ {
					p := float32(math.Exp(float64(s[j-j0] - m)))
					l += p
					axpy(acc, vf[j*vc+kvh*d:j*vc+(kvh+1)*d], p)
				}
			}
			o := out[i*qc+h*d : i*qc+(h+1)*d]
			inv := 1 / l
			for t := range o {
				o[t] = acc[t] * inv
			}
		}
	})
	return newAct(out, L, qc), nil
}
