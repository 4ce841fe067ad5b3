package cpu

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// RoPE rotates every head of x [L, heads*HeadDim] by its row's positions,
// NeoX half-split pairing, each frequency reading the position stream and
// inverse frequency of the table r. The angle is the float32 product of the
// position and the inverse frequency, its cosine and sine rounded to
// float32, as the float32 reference computes them.
func (b *Backend) RoPE(x *backend.Tensor, pos [][3]int, r backend.RoPE) (*backend.Tensor, error) {
	xf, rows, c, err := act(x, "RoPE x")
	if err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("cpu: RoPE: %w", err)
	}
	d := r.HeadDim
	if c%d != 0 {
		return nil, fmt.Errorf("cpu: RoPE: head dim %d does not divide rows of %d evenly into heads", d, c)
	}
	if len(pos) != rows {
		return nil, fmt.Errorf("cpu: RoPE: %d positions for %d rows", len(pos), rows)
	}
	half := d / 2
	stream, inv := r.Streams, r.InvFreq
	heads := c / d
	out := make([]float32, len(xf))
	if err := b.parallel(rows, 16, func(lo, hi int) {
		cos := make([]float32, half)
		sin := make([]float32, half)
		for p := lo; p < hi; p++ {
			for i := 0; i < half; i++ {
				a := float32(pos[p][stream[i]]) * inv[i]
				cos[i] = float32(math.Cos(float64(a)))
				sin[i] = float32(math.Sin(float64(a)))
			}
			for h := 0; h < heads; h++ {
				in := xf[p*c+h*d : p*c+(h+1)*d]
				o := out[p*c+h*d : p*c+(h+1)*d]
				for i := 0; i < half; i++ {
					x0, x1 := in[i], in[i+half]
					o[i] = x0*cos[i] - x1*sin[i]
					o[i+half] = x1*cos[i] + x0*sin[i]
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, rows, c), nil
}
