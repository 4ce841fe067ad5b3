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
	if err := b.parallel(groups, 64, func(lo, hi int) {
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
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, c), nil
}

// LayerNorm normalises every row of x [rows, n] to zero mean and unit
// variance, then scales by weight and adds bias (both [n]; bias may be nil).
// The mean and the biased variance (of the deviations from the float32
// mean) are accumulated in float64 and rounded to float32, and the scale
// 1/sqrt(var + eps) rounded to float32, as for RMSNorm.
func (b *Backend) LayerNorm(x, weight, bias *backend.Tensor, eps float32) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "LayerNorm x")
	if err != nil {
		return nil, err
	}
	w, err := b.vector(weight, c, "LayerNorm weight")
	if err != nil {
		return nil, err
	}
	var bs []float32
	if bias != nil {
		if bs, err = b.vector(bias, c, "LayerNorm bias"); err != nil {
			return nil, err
		}
	}
	out := make([]float32, len(xf))
	if err := b.parallel(r, max(1, 4096/max(1, c)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			in := xf[q*c : (q+1)*c]
			o := out[q*c : (q+1)*c]
			var s float64
			for _, v := range in {
				s += float64(v)
			}
			mean := float32(s / float64(c))
			var ss float64
			for _, v := range in {
				dv := float64(v - mean)
				ss += dv * dv
			}
			scale := float32(1 / math.Sqrt(float64(float32(ss/float64(c))+eps)))
			for i, v := range in {
				o[i] = w[i] * ((v - mean) * scale)
			}
			if bs != nil {
				for i := range o {
					o[i] += bs[i]
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, c), nil
}

// vector decodes a [n] weight (a bound 1-D tensor of any float type, or a
// [1, n] activation) to float32.
func (b *Backend) vector(t *backend.Tensor, n int, what string) ([]float32, error) {
	if t == nil {
		return nil, fmt.Errorf("cpu: %s: nil tensor", what)
	}
	if t.Cols() != n {
		return nil, fmt.Errorf("cpu: %s: shape %v, want %d values", what, t.Shape, n)
	}
	src, rows, err := b.rowSource(t, n, what)
	if err != nil {
		return nil, err
	}
	if rows != 1 {
		return nil, fmt.Errorf("cpu: %s: shape %v is not one row of %d", what, t.Shape, n)
	}
	v := make([]float32, n)
	src(v, 0)
	return v, nil
}
