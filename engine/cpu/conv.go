package cpu

// The ops of the encoders' input stages: GatherBlend (the vision tower's
// bilinear interpolation of its position embeddings) and Im2Col (the audio
// tower's convolutions as matmuls).

import (
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

// GatherBlend returns out [len(ids)/k, n]: row i is the sum over j of
// weights[i*k+j] · table[ids[i*k+j]], each product rounded to float32 and
// added in j order in float32. Weight rows are decoded as Embed decodes
// them, one row at a time into per-chunk scratch.
func (b *Backend) GatherBlend(table *backend.Tensor, ids []int, weights []float32, k int) (*backend.Tensor, error) {
	if table == nil {
		return nil, fmt.Errorf("cpu: GatherBlend: nil table")
	}
	var src func(dst []float32, r int) []float32 // row r, decoded into dst or read in place
	var rows, n int
	switch h := table.Handle.(type) {
	case *weight:
		if t := h.t.Type; t != quant.F32 && t != quant.F16 && t != quant.BF16 {
			return nil, fmt.Errorf("cpu: GatherBlend: table %s is %v (want F32, F16 or BF16)", h.t.Name, t)
		}
		rows, n = h.rows, h.cols
		src = func(dst []float32, r int) []float32 { h.decodeRow(dst, r); return dst }
	case []float32, view:
		f, r, c, err := act(table, "GatherBlend table")
		if err != nil {
			return nil, err
		}
		rows, n = r, c
		src = func(_ []float32, r int) []float32 { return f[r*c : (r+1)*c] }
	case nil:
		return nil, fmt.Errorf("cpu: GatherBlend: table was freed")
	default:
		return nil, fmt.Errorf("cpu: GatherBlend: unsupported table handle %T", table.Handle)
	}
	if err := backend.CheckBlend(ids, weights, k, rows); err != nil {
		return nil, fmt.Errorf("cpu: GatherBlend: %w", err)
	}
	m := len(ids) / k
	out := make([]float32, m*n)
	if err := b.parallel(m, max(1, 1<<14/max(1, k*n)), func(lo, hi int) {
		scratch := make([]float32, n)
		for i := lo; i < hi; i++ {
			o := out[i*n : (i+1)*n]
			for j := i * k; j < (i+1)*k; j++ {
				w, row := weights[j], src(scratch, ids[j])
				row = row[:len(o)]
				if j == i*k { // the first term as it is (0 + -0 would be +0)
					for c, v := range row {
						o[c] = w * v
					}
					continue
				}
				// The conversion rounds each product to float32 (no fused
				// multiply-add), as torch's separate multiply and sum.
				for c, v := range row {
					o[c] += float32(w * v)
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, m, n), nil
}

// Im2Col unfolds x [N*H*W, C] (channels-last) into out [N*OH*OW, C*KH*KW]
// for a convolution of geometry g: row (n, oy, ox), column (c, ky, kx). The
// output rows are shared out among the workers; each starts zeroed, and only
// the kernel taps inside the picture (a range of ky and of kx computed once
// per row) are copied, so padding costs no per-element test.
func (b *Backend) Im2Col(x *backend.Tensor, g backend.Conv2D) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "Im2Col x")
	if err != nil {
		return nil, err
	}
	if err := g.Check(r, c); err != nil {
		return nil, fmt.Errorf("cpu: Im2Col: %w", err)
	}
	oh, ow := g.Out()
	taps := g.KH * g.KW
	rows, cols := g.N*oh*ow, g.C*taps
	out := make([]float32, rows*cols)
	if err := b.parallel(rows, max(1, 1<<14/cols), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			n, oy, ox := row/(oh*ow), row/ow%oh, row%ow
			o := out[row*cols : (row+1)*cols]
			iy, ix := oy*g.SH-g.PH, ox*g.SW-g.PW // the kernel's top-left pixel
			ky0, ky1 := max(0, -iy), min(g.KH, g.H-iy)
			kx0, kx1 := max(0, -ix), min(g.KW, g.W-ix)
			if kx0 >= kx1 {
				continue
			}
			for ky := ky0; ky < ky1; ky++ {
				p := (n*g.H+iy+ky)*g.W + ix // pixel (iy+ky, ix): kx = 0
				if g.C == 1 {
					// One channel: the taps of a kernel row are a run of
					// pixels, copied whole.
					copy(o[ky*g.KW+kx0:ky*g.KW+kx1], xf[p+kx0:p+kx1])
					continue
				}
				for kx := kx0; kx < kx1; kx++ {
					// Pixel (iy+ky, ix+kx): its C channels are one run of x,
					// written to columns (c, ky, kx) taps apart.
					px := xf[(p+kx)*g.C : (p+kx+1)*g.C]
					d := o[ky*g.KW+kx:]
					_ = d[(len(px)-1)*taps]
					for ch, v := range px {
						d[ch*taps] = v
					}
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, rows, cols), nil
}
