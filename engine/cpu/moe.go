package cpu

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

// Route computes the softmax over all experts of every row of logits
// [L, E], keeps the k most probable (descending, ties to the lower expert
// id) and renormalises them when norm is set.
func (b *Backend) Route(logits *backend.Tensor, k int, norm bool) (*backend.Tensor, *backend.Tensor, error) {
	lf, L, E, err := act(logits, "Route logits")
	if err != nil {
		return nil, nil, err
	}
	if k <= 0 || k > E {
		return nil, nil, fmt.Errorf("cpu: Route: top-%d of %d experts", k, E)
	}
	ids := make([]int32, L*k)
	ws := make([]float32, L*k)
	b.parallel(L, 16, func(lo, hi int) {
		p := make([]float32, E)
		order := make([]int, E)
		for r := lo; r < hi; r++ {
			row := lf[r*E : (r+1)*E]
			mx := float32(math.Inf(-1))
			for _, v := range row {
				mx = max(mx, v)
			}
			var sum float64
			for e, v := range row {
				ex := math.Exp(float64(v - mx))
				p[e] = float32(ex)
				sum += ex
			}
			inv := float32(1 / sum)
			for e := range p {
				p[e] *= inv
				order[e] = e
			}
			// Partial selection: k passes of a max scan (k is small).
			for j := 0; j < k; j++ {
				best := j
				for t := j + 1; t < E; t++ {
					if p[order[t]] > p[order[best]] || (p[order[t]] == p[order[best]] && order[t] < order[best]) {
						best = t
					}
				}
				order[j], order[best] = order[best], order[j]
			}
			var s float32
			for j := 0; j < k; j++ {
				s += p[order[j]]
			}
			for j := 0; j < k; j++ {
				e := order[j]
				ids[r*k+j] = int32(e)
				ws[r*k+j] = p[e]
				if norm {
					ws[r*k+j] = p[e] / s
				}
			}
		}
	})
	idT := &backend.Tensor{Type: quant.I32, Shape: []int{L, k}, Handle: ids}
	return idT, newAct(ws, L, k), nil
}

// MoE runs the routed experts as a gathered matmul: the rows routed to each
// expert are gathered into one matrix and pushed through that expert's
// gate, up and down projections as three GEMMs; workers take experts one at
// a time. Each row then sums its experts' outputs, weighted, in expert order.
func (b *Backend) MoE(x, ids, weights *backend.Tensor, experts []backend.Expert) (*backend.Tensor, error) {
	xf, L, hidden, err := act(x, "MoE x")
	if err != nil {
		return nil, err
	}
	if ids == nil || weights == nil {
		return nil, fmt.Errorf("cpu: MoE: nil routing")
	}
	id, ok := ids.Handle.([]int32)
	if !ok || ids.Rows() != L || len(id) != L*ids.Cols() {
		return nil, fmt.Errorf("cpu: MoE: ids must be an I32 [%d k] tensor, got %v %T", L, ids.Shape, ids.Handle)
	}
	k := ids.Cols()
	wf, wr, wc, err := act(weights, "MoE weights")
	if err != nil {
		return nil, err
	}
	if wr != L || wc != k {
		return nil, fmt.Errorf("cpu: MoE: weights %v do not match ids %v", weights.Shape, ids.Shape)
	}
	E := len(experts)
	// Group (row, slot) pairs by expert.
	count := make([]int, E)
	for i, e := range id {
		if e < 0 || int(e) >= E {
			return nil, fmt.Errorf("cpu: MoE: row %d routes to expert %d of %d", i/k, e, E)
		}
		count[e]++
	}
	start := make([]int, E+1)
	for e := 0; e < E; e++ {
		start[e+1] = start[e] + count[e]
	}
	rowOf := make([]int, L*k)  // gathered index -> row of x
	slotAt := make([]int, L*k) // (row, slot) -> gathered index
	fill := append([]int(nil), start[:E]...)
	for i, e := range id {
		g := fill[e]
		fill[e]++
		rowOf[g] = i / k
		slotAt[i] = g
	}
	var active []int
	projs := make([]moeProj, E)
	for e := 0; e < E; e++ {
		if count[e] == 0 {
			continue
		}
		ex := experts[e]
		gate, ffn, err := b.rowSource(ex.Gate, hidden, fmt.Sprintf("MoE expert %d gate", e))
		if err != nil {
			return nil, err
		}
		up, ffn2, err := b.rowSource(ex.Up, hidden, fmt.Sprintf("MoE expert %d up", e))
		if err != nil {
			return nil, err
		}
		if ffn2 != ffn {
			return nil, fmt.Errorf("cpu: MoE: expert %d gate has %d rows, up %d", e, ffn, ffn2)
		}
		down, h2, err := b.rowSource(ex.Down, ffn, fmt.Sprintf("MoE expert %d down", e))
		if err != nil {
			return nil, err
		}
		if h2 != hidden {
			return nil, fmt.Errorf("cpu: MoE: expert %d down gives %d values, want %d", e, h2, hidden)
		}
		gw, _ := ex.Gate.Handle.(*weight)
		uw, _ := ex.Up.Handle.(*weight)
		dw, _ := ex.Down.Handle.(*weight)
		projs[e] = moeProj{gate, up, down, gw, uw, dw, ffn}
		active = append(active, e)
	}
	out := make([]float32, L*hidden)
	if L*k*hidden <= moeBufferFloats {
		err = b.moeByExpert(out, xf, L, hidden, k, id, wf, active, projs, count, start, rowOf, slotAt)
	} else {
		err = b.moeInExpert(out, xf, hidden, active, projs, count, start, rowOf, id, wf, k)
	}
	if err != nil {
		return nil, fmt.Errorf("cpu: MoE: %w", err)
	}
	return newAct(out, L, hidden), nil
}

// moeBufferFloats bounds the expert-output buffer of moeByExpert; larger
// batches run moeInExpert, which needs none. A variable so tests can force
// either path.
var moeBufferFloats = 1 << 21

// moeProj is one routed expert's projections.
type moeProj struct {
	gate, up, down func([]float32, int)
	gw, uw, dw     *weight // nil for float32 activations as weights
	ffn            int
}

// expertFFN computes ye [n, hidden] = down(silu(gate xe) * up xe) for one
// expert; par selects the worker-parallel matmuls.
func (b *Backend) expertFFN(ye, xe []float32, n, hidden int, pj *moeProj, par bool) error {
	// Per-expert sizes vary, so this scratch is left to the collector
	// rather than the arena.
	gt := make([]float32, n*pj.ffn)
	upv := make([]float32, n*pj.ffn)
	xq, err := b.project(gt, xe, n, hidden, pj.ffn, pj.gate, pj.gw, nil, par)
	if err != nil {
		return err
	}
	if pj.uw == nil || pj.gw == nil || pj.uw.t.Type != pj.gw.t.Type {
		xq = nil // up reads another activation format
	}
	if _, err = b.project(upv, xe, n, hidden, pj.ffn, pj.up, pj.uw, xq, par); err != nil {
		return err
	}
	for i, g := range gt {
		gt[i] = silu(g) * upv[i]
	}
	_, err = b.project(ye, gt, n, pj.ffn, hidden, pj.down, pj.dw, nil, par)
	return err
}

// gather copies the rows routed to expert e into a [count[e], hidden] matrix.
func (b *Backend) gather(xf []float32, hidden, e int, count, start, rowOf []int) []float32 {
	n := count[e]
	xe := make([]float32, n*hidden)
	for g := 0; g < n; g++ {
		r := rowOf[start[e]+g]
		copy(xe[g*hidden:(g+1)*hidden], xf[r*hidden:(r+1)*hidden])
	}
	return xe
}

// moeByExpert gives whole experts to the workers (good when each has few
// rows), keeps every expert output, then sums each row's outputs weighted
// in ascending expert order.
func (b *Backend) moeByExpert(out, xf []float32, L, hidden, k int, id []int32, wf []float32, active []int, projs []moeProj, count, start, rowOf, slotAt []int) error {
	y := make([]float32, L*k*hidden) // expert outputs in gathered order
	var first error
	var mu sync.Mutex
	b.parallelDynamic(len(active), func(_, ai int) {
		e := active[ai]
		xe := b.gather(xf, hidden, e, count, start, rowOf)
		if err := b.expertFFN(y[start[e]*hidden:(start[e]+count[e])*hidden], xe, count[e], hidden, &projs[e], false); err != nil {
			mu.Lock()
			first = err
			mu.Unlock()
		}
	})
	if first != nil {
		return first
	}
	b.parallel(L, 16, func(lo, hi int) {
		order := make([]int, k)
		for r := lo; r < hi; r++ {
			for j := range order {
				order[j] = j
			}
			sort.Slice(order, func(a, c int) bool { return id[r*k+order[a]] < id[r*k+order[c]] })
			o := out[r*hidden : (r+1)*hidden]
			for _, j := range order {
				g := slotAt[r*k+j]
				w := wf[r*k+j]
				yr := y[g*hidden : (g+1)*hidden]
				for t := range o {
					o[t] += yr[t] * w
				}
			}
		}
	})
	return nil
}

// moeInExpert runs the experts one after another in ascending order, each
// expert's matmuls split over the workers, and adds each weighted output
// straight into its row: the same sums in the same order as moeByExpert,
// with no buffer of all expert outputs.
func (b *Backend) moeInExpert(out, xf []float32, hidden int, active []int, projs []moeProj, count, start, rowOf []int, id []int32, wf []float32, k int) error {
	for _, e := range active {
		n := count[e]
		xe := b.gather(xf, hidden, e, count, start, rowOf)
		ye := make([]float32, n*hidden)
		if err := b.expertFFN(ye, xe, n, hidden, &projs[e], true); err != nil {
			return err
		}
		for g := 0; g < n; g++ {
			r := rowOf[start[e]+g]
			var w float32
			for j := 0; j < k; j++ {
				if int(id[r*k+j]) == e {
					w = wf[r*k+j]
				}
			}
			o := out[r*hidden : (r+1)*hidden]
			for t, v := range ye[g*hidden : (g+1)*hidden] {
				o[t] += v * w
			}
		}
	}
	return nil
}

// project computes out [m, n] = x Wᵀ, on 8-bit activations when w's format
// allows it (xq, when non-nil, is x already quantized for w), over the
// workers when par is set or else on the calling goroutine. It returns the
// quantized activations it used.
func (b *Backend) project(out, x []float32, m, k, n int, src func([]float32, int), w *weight, xq []byte, par bool) ([]byte, error) {
	if floatKernel(w) {
		return nil, b.matmulFloat(out, x, m, k, n, w, par)
	}
	if w == nil || !b.quantized(w) {
		if par {
			b.matmul(out, x, m, k, n, src)
		} else {
			matmulSerial(out, x, m, k, n, src)
		}
		return nil, nil
	}
	if xq == nil {
		var err error
		if xq, err = b.quantizeActs(w, x, m, k, par); err != nil {
			return nil, err
		}
	}
	if par {
		return xq, b.gemmQParallel(out, xq, m, n, w)
	}
	return xq, gemmQ(out, xq, m, n, w, 0, n)
}

// silu is x·sigmoid(x).
func silu(x float32) float32 {
	return float32(float64(x) / (1 + math.Exp(-float64(x))))
}
