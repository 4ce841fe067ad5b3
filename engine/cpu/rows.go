package cpu

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// Reshape returns x with another shape of as many values, sharing its
// storage (a view: freeing it releases nothing).
func (b *Backend) Reshape(x *backend.Tensor, rows, cols int) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "Reshape x")
	if err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 || rows*cols != r*c {
		return nil, fmt.Errorf("cpu: Reshape: [%d %d] into [%d %d]", r, c, rows, cols)
	}
	return &backend.Tensor{Type: x.Type, Shape: []int{rows, cols}, Handle: view(xf[:len(xf):len(xf)])}, nil
}

// transposeBlock is the side of the square tiles Transpose copies.
const transposeBlock = 32

// Transpose returns xᵀ, copied tile by tile.
func (b *Backend) Transpose(x *backend.Tensor) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "Transpose x")
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(xf))
	tiles := (c + transposeBlock - 1) / transposeBlock
	if err := b.parallel(tiles, max(1, 1<<14/max(1, r*transposeBlock)), func(lo, hi int) {
		for c0 := lo * transposeBlock; c0 < min(hi*transposeBlock, c); c0 += transposeBlock {
			c1 := min(c0+transposeBlock, c)
			for r0 := 0; r0 < r; r0 += transposeBlock {
				r1 := min(r0+transposeBlock, r)
				for j := c0; j < c1; j++ {
					dst := out[j*r+r0 : j*r+r1]
					for k := range dst {
						dst[k] = xf[(r0+k)*c+j]
					}
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, c, r), nil
}

// Softmax returns the softmax of every row of scale·x (or of its columns
// ranges[i] for row i, the others 0): each scaled value rounded to float32,
// the row maximum subtracted, e^v in float64 rounded to float32, the sum
// in float32 in column order.
func (b *Backend) Softmax(x *backend.Tensor, scale float32, ranges [][2]int) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "Softmax x")
	if err != nil {
		return nil, err
	}
	if err := backend.CheckRanges(ranges, r, c); err != nil {
		return nil, fmt.Errorf("cpu: Softmax: %w", err)
	}
	out := make([]float32, len(xf))
	if err := b.parallel(r, max(1, 1<<12/max(1, c)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			c0, c1 := 0, c
			if ranges != nil {
				c0, c1 = ranges[i][0], ranges[i][1]
			}
			in, o := xf[i*c+c0:i*c+c1], out[i*c+c0:i*c+c1]
			m := float32(math.Inf(-1))
			for j, v := range in {
				o[j] = v * scale
				m = max(m, o[j])
			}
			var sum float32
			for j, v := range o {
				o[j] = float32(math.Exp(float64(v - m)))
				sum += o[j]
			}
			for j := range o {
				o[j] /= sum
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, c), nil
}

// SpanMeans returns the mean of each span of rows of x: the rows summed in
// order in float32, then divided by their count.
func (b *Backend) SpanMeans(x *backend.Tensor, spans [][2]int) (*backend.Tensor, error) {
	xf, r, c, err := act(x, "SpanMeans x")
	if err != nil {
		return nil, err
	}
	if err := backend.CheckSpans(spans, r); err != nil {
		return nil, fmt.Errorf("cpu: SpanMeans: %w", err)
	}
	out := make([]float32, len(spans)*c)
	work := 0
	for _, s := range spans {
		work += s[1] - s[0]
	}
	if err := b.parallel(len(spans), max(1, len(spans)*(1<<14)/max(1, work*c)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o := out[i*c : (i+1)*c]
			for row := spans[i][0]; row < spans[i][1]; row++ {
				for j, v := range xf[row*c : (row+1)*c] {
					o[j] += v
				}
			}
			n := float32(spans[i][1] - spans[i][0])
			for j := range o {
				o[j] /= n
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, len(spans), c), nil
}

// RowDots returns the dot product of each row of a with the same row of b,
// accumulated in float64 and rounded once: out [rows, 1].
func (b *Backend) RowDots(x, y *backend.Tensor) (*backend.Tensor, error) {
	xf, yf, r, c, err := pair(x, y, "RowDots")
	if err != nil {
		return nil, err
	}
	out := make([]float32, r)
	if err := b.parallel(r, max(1, 1<<14/max(1, c)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var s float64
			ys := yf[i*c : (i+1)*c]
			for j, v := range xf[i*c : (i+1)*c] {
				s += float64(v) * float64(ys[j])
			}
			out[i] = float32(s)
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, 1), nil
}

// PairFeatures returns [a, b, a·b, |a−b|] row by row: out [rows, 4n].
func (b *Backend) PairFeatures(x, y *backend.Tensor) (*backend.Tensor, error) {
	xf, yf, r, c, err := pair(x, y, "PairFeatures")
	if err != nil {
		return nil, err
	}
	out := make([]float32, 4*len(xf))
	if err := b.parallel(r, max(1, 1<<14/max(1, c)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o := out[4*i*c : 4*(i+1)*c]
			xs, ys := xf[i*c:(i+1)*c], yf[i*c:(i+1)*c]
			copy(o[:c], xs)
			copy(o[c:2*c], ys)
			for j, v := range xs {
				o[2*c+j] = v * ys[j]
				o[3*c+j] = float32(math.Abs(float64(v - ys[j])))
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, r, 4*c), nil
}

// pair returns the data of two activations of one shape.
func pair(x, y *backend.Tensor, op string) (xf, yf []float32, r, c int, err error) {
	xf, r, c, err = act(x, op+" a")
	if err != nil {
		return nil, nil, 0, 0, err
	}
	yf, r2, c2, err := act(y, op+" b")
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if r != r2 || c != c2 {
		return nil, nil, 0, 0, fmt.Errorf("cpu: %s: shapes [%d %d] and [%d %d] differ", op, r, c, r2, c2)
	}
	return xf, yf, r, c, nil
}

// GroupMatMul multiplies each group of columns of x by its own block of
// rows of w: the groups' products run as one matmul each, shared out among
// the workers.
func (b *Backend) GroupMatMul(x, w *backend.Tensor, groups int) (*backend.Tensor, error) {
	xf, m, xc, err := act(x, "GroupMatMul x")
	if err != nil {
		return nil, err
	}
	wf, wr, k, err := act(w, "GroupMatMul w")
	if err != nil {
		return nil, err
	}
	if groups <= 0 || xc != groups*k || wr%groups != 0 {
		return nil, fmt.Errorf("cpu: GroupMatMul: x [%d %d] and w [%d %d] do not make %d groups", m, xc, wr, k, groups)
	}
	n := wr / groups
	out := make([]float32, m*groups*n)
	tiles := (n + tileRows - 1) / tileRows
	if err := b.parallel(groups*tiles, max(1, 1<<16/max(1, m*k*tileRows)), func(lo, hi int) {
		xg := make([]float32, m*k)
		og := make([]float32, m*n)
		for g := lo / tiles; g <= (hi-1)/tiles; g++ {
			t0, t1 := max(lo, g*tiles)-g*tiles, min(hi, (g+1)*tiles)-g*tiles
			for i := range m {
				copy(xg[i*k:(i+1)*k], xf[i*xc+g*k:i*xc+(g+1)*k])
			}
			wg := wf[g*n*k : (g+1)*n*k]
			src := func(dst []float32, r int) { copy(dst, wg[r*k:(r+1)*k]) }
			matmulTiles(og, xg, m, k, n, src, t0, t1)
			for i := range m {
				copy(out[i*groups*n+g*n+t0*tileRows:], og[i*n+t0*tileRows:i*n+min(n, t1*tileRows)])
			}
		}
	}); err != nil {
		return nil, err
	}
	return newAct(out, m, groups*n), nil
}
