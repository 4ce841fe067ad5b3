package cpu

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// GELU applies GELU to every element of x, in float64 rounded once to
// float32: the exact form 0.5·x·(1+erf(x/√2)) or the tanh approximation.
func (b *Backend) GELU(x *backend.Tensor, kind backend.GELUKind) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "GELU x")
	if err != nil {
		return nil, err
	}
	var f func(float64) float64
	switch kind {
	case backend.GELUErf:
		f = geluErf
	case backend.GELUTanh:
		f = geluTanh
	default:
		return nil, fmt.Errorf("cpu: GELU: unknown kind %v", kind)
	}
	out := make([]float32, len(xf))
	if err := b.parallel(len(out), 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = float32(f(float64(xf[i])))
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, c), nil
}

func geluErf(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// AddBias returns x [rows, n] with bias [n] added to every row.
func (b *Backend) AddBias(x, bias *backend.Tensor) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "AddBias x")
	if err != nil {
		return nil, err
	}
	bs, err := b.vector(bias, c, "AddBias bias")
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(xf))
	if err := b.parallel(r, max(1, 1<<15/max(1, c)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			o, in := out[q*c:(q+1)*c], xf[q*c:(q+1)*c]
			for i, v := range in {
				o[i] = v + bs[i]
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, c), nil
}
