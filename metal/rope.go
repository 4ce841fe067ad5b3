package metal

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/shaders"
)

// RoPE rotates every head of x by its row's positions into a new tensor,
// with the table r (inverse frequencies and position streams) uploaded as is.
func (b *Backend) RoPE(x *backend.Tensor, pos [][3]int, r backend.RoPE) (*backend.Tensor, error) {
	xh, err := b.act(x, "RoPE x")
	if err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("metal: RoPE: %w", err)
	}
	d := r.HeadDim
	if xh.cols%d != 0 {
		return nil, fmt.Errorf("metal: RoPE: head dim %d does not divide rows of %d evenly into heads", d, xh.cols)
	}
	if len(pos) != xh.rows {
		return nil, fmt.Errorf("metal: RoPE: %d positions for %d rows", len(pos), xh.rows)
	}
	flat := make([]int, 0, 3*len(pos))
	for _, p := range pos {
		for _, v := range p {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("metal: RoPE: position %d out of range", v)
			}
		}
		flat = append(flat, p[0], p[1], p[2])
	}
	y, err := b.newAct(xh.rows, xh.cols)
	if err != nil {
		return nil, err
	}
	if xh.rows == 0 {
		return wrapT(y), nil
	}
	pb, err := b.hostInts(flat)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(pb)
	fb, err := b.dev.Upload(f32Bytes(r.InvFreq))
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(fb)
	sb, err := b.hostInts(r.Streams)
	if err != nil {
		return nil, err
	}
	defer b.dev.Release(sb)
	a := shaders.KargsRope{Tokens: int32(xh.rows), Heads: int32(xh.cols / d), HeadDim: int32(d), XStride: int32(xh.cols), YStride: int32(xh.cols)}
	err = b.run("rope_f32", [3]int{groups(d/2, 32), xh.cols / d, xh.rows}, [3]int{32, 1, 1}, shaders.Bytes(&a),
		in(1, xh), arg{Index: 2, Buf: pb}, arg{Index: 3, Buf: fb}, arg{Index: 4, Buf: sb}, out(5, y))
	return wrapT(y), err
}
