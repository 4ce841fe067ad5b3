package cpu

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// RMSNorm normalises every group of len(weight) values of x and scales it by
// weight. The sum of squares is accumulated in float64 and the scale
// 1/sqrt(mean + eps) rounded to float32, as float32 torch computes it.
func (b *Backend) RMSNorm(x, weight *backend.Tensor, eps float32) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "RMSNorm x")
	if err != nil {
		return nil, err
	}
	src, wr, err := b.rowSource(weight, weight.Cols(), "RMSNorm")
	if err != nil {
		return nil, err
	}
	g := weight.Cols()
	if wr != 1 || g <= 0 || c%g != 0 {
		return nil, fmt.Errorf("cpu: RMSNorm: weight %v does not divide rows of %d", weight.Shape, c)
	}
	w := make([]float32, g)
	src(w, 0)
	out := make([]float32, len(xf))
	groups := r * c / g
	b.parallel(groups, 64, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			in := xf[q*g : (q+1)*g]
			o := out[q*g : (q+1)*g]
			var ss float64
			for _, v := range in {
				ss += float64(v) * float64(v)
			}
			scale := float32(1 / math.Sqrt(float64(float32(ss/float64(g))+eps)))
			for i, v := range in {
				o[i] = w[i] * (v * scale)
			}
		}
	})
	return newAct(out, r, c), nil
}
