package schemahead

import (
	"context"
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
)

// Cross-attention of a few query rows (the options, or the fields) over the
// L rows of the record's memory is nearly all of the head's work on a long
// record. torch computes it as
//
//	K = X·Wkᵀ + bk, V = X·Wvᵀ + bv   (two L×width×width products)
//	out_h = softmax(Q_h·K_hᵀ)·V_h     (per head h, Q already scaled)
//
// With few query rows the same quantities come cheaper by associativity:
// Q_h·K_hᵀ = (Q_h·Wk_h)·Xᵀ + Q_h·bk_h, and since every softmax row sums to 1,
// softmax(·)·V_h = (softmax(·)·X)·Wv_hᵀ + bv_h. The "folded" form runs two
// products of (rows·heads)×L×width instead of two of L×width×width, so it
// wins while rows·(heads−1) < width (a dozen options of a real head: about
// ten times less work). Both forms are the same arithmetic up to float32
// rounding; the head picks the cheaper one per attention.

// Cross-attention modes (Head.crossMode): automatic by cost, or one form
// always (tests run both on every golden case).
const (
	crossAuto = iota
	crossDirect
	crossFolded
)

// memory is the key/value source of a cross-attention: x [L, width]
// row-major, and on a bound head its copies on the backend: x as a matrix
// and its transpose [width, L] (the folded form's second product reads the
// rows of xᵀ).
type memory[T float] struct {
	x    []T
	rows int
	bx   *backend.Tensor // [L, width], nil when the products run in Go
	bxt  *backend.Tensor // [width, L], folded form only
	b    backend.Backend
}

// newMemory wraps x [L, w] for the cross-attentions of queries of nq rows,
// uploading what the chosen form needs when the head is bound and T is
// float32; xt is x's transpose when the caller has it, else nil.
func newMemory[T float](h *Head, x, xt []T, L, w, nq int) (*memory[T], error) {
	m := &memory[T]{x: x, rows: L}
	xf, ok := any(x).([]float32)
	if !ok || h.b == nil {
		return m, nil
	}
	m.b = h.b
	var err error
	if m.bx, err = h.b.Upload(xf, L, w); err != nil {
		return nil, fmt.Errorf("joint head: backend %s: memory upload: %w", h.b.Name(), err)
	}
	if h.folded(nq) {
		xtf, _ := any(xt).([]float32)
		if xtf == nil {
			xtf = transpose(xf, L, w)
		}
		if m.bxt, err = h.b.Upload(xtf, w, L); err != nil {
			m.free()
			return nil, fmt.Errorf("joint head: backend %s: memory upload: %w", h.b.Name(), err)
		}
	}
	return m, nil
}

// free releases the backend copies.
func (m *memory[T]) free() {
	for _, t := range []*backend.Tensor{m.bx, m.bxt} {
		if t != nil {
			m.b.Free(t)
		}
	}
	m.bx, m.bxt = nil, nil
}

// folded reports whether a cross-attention of nq query rows uses the folded
// form: forced by crossMode, else when it is the cheaper one (under
// crossAuto, crossAttend still keeps the float64 check path in the
// reference's direct form).
func (h *Head) folded(nq int) bool {
	switch h.crossMode {
	case crossDirect:
		return false
	case crossFolded:
		return true
	}
	return nq*(h.cfg.Heads-1) < h.cfg.Width
}

// crossAttend is torch's multi-head attention of the queries q [nq, width]
// over the memory (keys and values both m.x), out_proj included.
func crossAttend[T float](h *Head, a *attention, q []T, nq int, m *memory[T], w int) ([]T, error) {
	Q, err := scaledQuery(h, a, q, nq, w)
	if err != nil {
		return nil, err
	}
	_, isF64 := any(q).([]float64)
	if h.folded(nq) && !(isF64 && h.crossMode == crossAuto) {
		return foldedAttend(h, a, Q, nq, m, w)
	}
	K, err := memoryLinear(h, &a.k, m)
	if err != nil {
		return nil, err
	}
	V, err := memoryLinear(h, &a.v, m)
	if err != nil {
		return nil, err
	}
	return project(h, &a.outProj, attendKV(Q, nq, K, V, m.rows, a.heads, w), nq)
}

// memoryLinear is x·Wᵀ + b over the memory rows: on the backend when the
// memory is there, in Go otherwise.
func memoryLinear[T float](h *Head, l *linear, m *memory[T]) ([]T, error) {
	if m.bx == nil || l.bound == nil {
		return applyLinear(l, m.x, m.rows), nil
	}
	y, err := backendProduct(m.b, m.bx, l.bound, m.rows, l.out)
	if err != nil {
		return nil, err
	}
	if l.bias != nil {
		addBias(y, l.bias, m.rows)
	}
	return any(y).([]T), nil
}

// foldedAttend computes the attention of the scaled queries Q [nq, width]
// over m in the folded form (see the top of this file), out_proj included.
func foldedAttend[T float](h *Head, a *attention, Q []T, nq int, m *memory[T], w int) ([]T, error) {
	heads := a.heads
	hd := w / heads
	R, L := nq*heads, m.rows
	// Qk row (i, h) = Q_{i,h}·Wk_h [width]; c(i, h) = Q_{i,h}·bk_h.
	c := make([]T, R)
	for r := range R {
		i, hh := r/heads, r%heads
		c[r] = dotW(Q[i*w+hh*hd:i*w+(hh+1)*hd], a.k.bias[hh*hd:(hh+1)*hd])
	}
	Qk, err := queryKeys(h, a, Q, nq, w)
	if err != nil {
		return nil, err
	}
	S, err := rowsTimesMemory(m, Qk, R, w)
	if err != nil {
		return nil, err
	}
	parallel(R, L, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			s := S[r*L : (r+1)*L]
			for j := range s {
				s[j] += c[r]
			}
			softmaxInPlace(s)
		}
	})
	Z, err := weightsTimesMemory(m, S, R, w)
	if err != nil {
		return nil, err
	}
	out, err := headValues(h, a, Z, nq, w)
	if err != nil {
		return nil, err
	}
	return project(h, &a.outProj, out, nq)
}

// queryKeys returns Qk [nq·heads, width], row (i, h) = Q_{i,h}·Wk_h, the
// per-head query columns times the head's rows of Wk: per head on the
// backend after BindAll, in Go otherwise.
func queryKeys[T float](h *Head, a *attention, Q []T, nq, w int) ([]T, error) {
	heads := a.heads
	hd := w / heads
	Qk := make([]T, nq*heads*w)
	if qf, ok := any(Q).([]float32); ok && h.b != nil && len(a.kT) == heads {
		qh := make([]float32, nq*hd)
		for hh := range heads {
			for i := range nq {
				copy(qh[i*hd:(i+1)*hd], qf[i*w+hh*hd:i*w+(hh+1)*hd])
			}
			y, err := uploadProduct(h.b, qh, nq, hd, a.kT[hh], w)
			if err != nil {
				return nil, err
			}
			for i := range nq {
				copy(Qk[(i*heads+hh)*w:(i*heads+hh+1)*w], any(y[i*w:(i+1)*w]).([]T))
			}
		}
		return Qk, nil
	}
	parallel(nq*heads, hd*w, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			i, hh := r/heads, r%heads
			row := Qk[r*w : (r+1)*w]
			for d := range hd {
				j := hh*hd + d
				axpyW(row, Q[i*w+j], a.k.weight[j*w:(j+1)*w])
			}
		}
	})
	return Qk, nil
}

// headValues returns out [nq, width], out[i, h·hd+d] = Wv[h·hd+d]·Z(i, h) +
// bv[h·hd+d], for Z [nq·heads, width]: per head on the backend after
// BindAll, in Go otherwise.
func headValues[T float](h *Head, a *attention, Z []T, nq, w int) ([]T, error) {
	heads := a.heads
	hd := w / heads
	out := make([]T, nq*w)
	if zf, ok := any(Z).([]float32); ok && h.b != nil && len(a.vh) == heads {
		zh := make([]float32, nq*w)
		for hh := range heads {
			for i := range nq {
				copy(zh[i*w:(i+1)*w], zf[(i*heads+hh)*w:(i*heads+hh+1)*w])
			}
			y, err := uploadProduct(h.b, zh, nq, w, a.vh[hh], hd)
			if err != nil {
				return nil, err
			}
			for i := range nq {
				o := any(out[i*w+hh*hd : i*w+(hh+1)*hd]).([]float32)
				for d := range hd {
					o[d] = y[i*hd+d] + a.v.bias[hh*hd+d]
				}
			}
		}
		return out, nil
	}
	parallel(nq*heads, hd*w, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			i, hh := r/heads, r%heads
			z := Z[r*w : (r+1)*w]
			for d := range hd {
				j := hh*hd + d
				out[i*w+j] = dotW(z, a.v.weight[j*w:(j+1)*w]) + T(a.v.bias[j])
			}
		}
	})
	return out, nil
}

// rowsTimesMemory returns x·m.xᵀ [n, L] for x [n, width].
func rowsTimesMemory[T float](m *memory[T], x []T, n, w int) ([]T, error) {
	if m.bx != nil {
		y, err := uploadProduct(m.b, any(x).([]float32), n, w, m.bx, m.rows)
		return any(y).([]T), err
	}
	return matmulT(x, n, w, m.x, m.rows), nil
}

// weightsTimesMemory returns p·m.x [n, width] for p [n, L].
func weightsTimesMemory[T float](m *memory[T], p []T, n, w int) ([]T, error) {
	if m.bxt != nil {
		y, err := uploadProduct(m.b, any(p).([]float32), n, m.rows, m.bxt, w)
		return any(y).([]T), err
	}
	L := m.rows
	out := make([]T, n*w)
	parallel(n, L*w, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o := out[r*w : (r+1)*w]
			for j, pj := range p[r*L : (r+1)*L] {
				axpy(o, pj, m.x[j*w:(j+1)*w])
			}
		}
	})
	return out, nil
}

// uploadProduct uploads x [n, k] and returns x·wᵀ [n, out] from the backend.
func uploadProduct(b backend.Backend, x []float32, n, k int, w *backend.Tensor, out int) ([]float32, error) {
	xt, err := b.Upload(x, n, k)
	if err != nil {
		return nil, fmt.Errorf("joint head: backend %s: %w", b.Name(), err)
	}
	defer b.Free(xt)
	return backendProduct(b, xt, w, n, out)
}

// backendProduct returns x·wᵀ [n, out] computed and read back from b.
func backendProduct(b backend.Backend, x, w *backend.Tensor, n, out int) ([]float32, error) {
	yt, err := b.MatMul(x, w)
	if err != nil {
		return nil, fmt.Errorf("joint head: backend %s: %w", b.Name(), err)
	}
	defer b.Free(yt)
	y, err := b.Read(context.Background(), yt)
	if err != nil {
		return nil, fmt.Errorf("joint head: backend %s: %w", b.Name(), err)
	}
	if len(y) != n*out {
		return nil, fmt.Errorf("joint head: backend %s: matmul gave %d values, want %d", b.Name(), len(y), n*out)
	}
	return y, nil
}

// attendKV is the per-head softmax attention of the scaled queries Q
// [nq, width] over K and V [nk, width], before out_proj.
func attendKV[T float](Q []T, nq int, K, V []T, nk, heads, w int) []T {
	hd := w / heads
	out := make([]T, nq*w)
	parallel(nq*heads, nk*hd, func(lo, hi int) {
		scores := make([]T, nk)
		for c := lo; c < hi; c++ {
			i, hh := c/heads, c%heads
			qi := Q[i*w+hh*hd : i*w+(hh+1)*hd]
			for j := range nk {
				scores[j] = dot(qi, K[j*w+hh*hd:j*w+(hh+1)*hd])
			}
			softmaxInPlace(scores)
			o := out[i*w+hh*hd : i*w+(hh+1)*hd]
			for j := range nk {
				axpy(o, scores[j], V[j*w+hh*hd:j*w+(hh+1)*hd])
			}
		}
	})
	return out
}

// scaledQuery is the query projection of q [nq, width] times 1/sqrt(head_dim).
func scaledQuery[T float](h *Head, a *attention, q []T, nq, w int) ([]T, error) {
	Q, err := project(h, &a.q, q, nq)
	if err != nil {
		return nil, err
	}
	scale := T(1 / math.Sqrt(float64(w/a.heads)))
	for i := range Q {
		Q[i] *= scale
	}
	return Q, nil
}

// matmulT returns x·yᵀ [n, m] for x [n, k] and y [m, k], rows of y shared
// out among the CPUs.
func matmulT[T float](x []T, n, k int, y []T, m int) []T {
	out := make([]T, n*m)
	parallel(m, n*k, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			yj := y[j*k : (j+1)*k]
			for i := range n {
				out[i*m+j] = dot(x[i*k:(i+1)*k], yj)
			}
		}
	})
	return out
}

// transpose returns xᵀ [cols, rows] of x [rows, cols], in 8×8 blocks
// shared out among the CPUs.
func transpose(x []float32, rows, cols int) []float32 {
	const blk = 8
	out := make([]float32, rows*cols)
	parallel((cols+blk-1)/blk, blk*rows, func(lo, hi int) {
		for c0 := lo * blk; c0 < min(hi*blk, cols); c0 += blk {
			c1 := min(c0+blk, cols)
			for r0 := 0; r0 < rows; r0 += blk {
				r1 := min(r0+blk, rows)
				for c := c0; c < c1; c++ {
					dst := out[c*rows+r0 : c*rows+r1]
					for k := range dst {
						dst[k] = x[(r0+k)*cols+c]
					}
				}
			}
		}
	})
	return out
}

// axpy adds a·x to y.
func axpy[T float](y []T, a T, x []T) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// axpyW adds a·x to y for float32 weights x.
func axpyW[T float](y []T, a T, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * T(x[i])
	}
}

// addBias adds bias [out] to each of the n rows of y.
func addBias(y, bias []float32, n int) {
	out := len(bias)
	for r := range n {
		row := y[r*out : (r+1)*out]
		for o, bv := range bias {
			row[o] += bv
		}
	}
}
