package cpu

import (
	"fmt"
	"math"
	"sort"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu/kernels"
	"github.com/clefrt/clef/engine/weights"
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
	if err := b.parallel(L, 16, func(lo, hi int) {
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
	}); err != nil {
		return nil, nil, err
	}
	idT := &backend.Tensor{Type: quant.I32, Shape: []int{L, k}, Handle: ids}
	return idT, newAct(ws, L, k), nil
}

// stacked is the handle of stacked expert weights [E, out, in]: one bound
// 2-D weight per expert, over that expert's bytes of the mapped tensor
// (either stacked form of weights.Tensor).
type stacked struct {
	experts []*backend.Tensor
}

// stackOf returns the per-expert weights of a stacked tensor.
func stackOf(t *backend.Tensor, what string) ([]*backend.Tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("cpu: MoE: no %s experts", what)
	}
	st, ok := t.Handle.(*stacked)
	if !ok {
		return nil, fmt.Errorf("cpu: MoE: %s experts are %v %T, not a stacked [E, out, in] weight", what, t.Shape, t.Handle)
	}
	return st.experts, nil
}

// stackWeight binds a stacked weights.Tensor [E, out, in] expert by expert.
func (b *Backend) stackWeight(t *weights.Tensor) (*backend.Tensor, error) {
	E := t.Shape[0]
	if E <= 0 || (t.Parts != nil && len(t.Parts) != E) {
		return nil, fmt.Errorf("cpu: weight %s: %d parts for shape %v", t.Name, len(t.Parts), t.Shape)
	}
	if t.Parts == nil && E > 0 && len(t.Data)%E != 0 {
		return nil, fmt.Errorf("cpu: weight %s: %d bytes do not split into %d experts", t.Name, len(t.Data), E)
	}
	st := &stacked{experts: make([]*backend.Tensor, E)}
	for e := range st.experts {
		w, err := b.Weight(t.Slice(e))
		if err != nil {
			return nil, fmt.Errorf("%w (expert %d)", err, e)
		}
		st.experts[e] = w
	}
	return &backend.Tensor{Type: t.Type, Shape: append([]int(nil), t.Shape...), Handle: st}, nil
}

// MoE runs the routed experts as a gathered matmul: the rows routed to each
// expert are gathered into one matrix and pushed through that expert's
// gate, up and down projections as three GEMMs; workers take experts one at
// a time. Each row then sums its experts' outputs, weighted, in expert order.
func (b *Backend) MoE(x, ids, weights *backend.Tensor, ex backend.Experts) (*backend.Tensor, error) {
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
	gates, err := stackOf(ex.Gate, "gate")
	if err != nil {
		return nil, err
	}
	ups, err := stackOf(ex.Up, "up")
	if err != nil {
		return nil, err
	}
	downs, err := stackOf(ex.Down, "down")
	if err != nil {
		return nil, err
	}
	E := len(gates)
	if len(ups) != E || len(downs) != E {
		return nil, fmt.Errorf("cpu: MoE: %d gate, %d up and %d down experts", E, len(ups), len(downs))
	}
	experts := make([]struct{ Gate, Up, Down *backend.Tensor }, E)
	for e := range experts {
		experts[e].Gate, experts[e].Up, experts[e].Down = gates[e], ups[e], downs[e]
	}
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
	if err := b.moeGroups(out, xf, L, hidden, k, id, wf, active, projs, count, start, rowOf, slotAt); err != nil {
		return nil, fmt.Errorf("cpu: MoE: %w", err)
	}
	return newAct(out, L, hidden), nil
}

// moeBufferFloats bounds the expert-output buffer of moeGroups (16 MiB:
// a 512-row chunk of the thinker, top-8 of hidden 2048, runs in two
// groups; 32 MiB was measured at most 1% faster and 30 MiB more resident).
// A variable so tests can force small groups.
var moeBufferFloats = 1 << 22

// moeProj is one routed expert's projections.
type moeProj struct {
	gate, up, down func([]float32, int)
	gw, uw, dw     *weight // nil for float32 activations as weights
	ffn            int
}

// moeScratch is one worker's reusable buffers for expertFFN.
type moeScratch struct {
	xe, gt, up []float32
	xq         []byte
}

// moeShared is x quantized once for the gate and up weights of every
// expert that reads the same activation format (each row is quantized on
// its own, so gathering its bytes gives the bits quantizing the gathered
// rows would): nil when the format differs or is not 8-bit.
type moeShared struct {
	typ quant.Type
	rb  int    // bytes per quantized row
	xq  []byte // [L, rb]
}

// grow returns (*s)[:n], reallocating when its capacity is short.
func grow(s *[]float32, n int) []float32 {
	if cap(*s) < n {
		*s = make([]float32, n)
	}
	return (*s)[:n]
}

// expertFFN computes ye [n, hidden] = down(silu(gate xe) * up xe) for one
// expert, the rows of xf listed in rows gathered into sc.xe first; par
// selects the worker-parallel matmuls.
func (b *Backend) expertFFN(ye, xf []float32, rows []int, hidden int, pj *moeProj, par bool, sc *moeScratch, sh *moeShared) error {
	n := len(rows)
	var xe []float32
	var xq []byte
	if sh != nil && pj.gw != nil && pj.gw.t.Type == sh.typ && b.quantized(pj.gw) && !floatKernel(pj.gw) {
		if cap(sc.xq) < n*sh.rb {
			sc.xq = make([]byte, n*sh.rb)
		}
		xq = sc.xq[:n*sh.rb]
		for g, r := range rows {
			copy(xq[g*sh.rb:(g+1)*sh.rb], sh.xq[r*sh.rb:(r+1)*sh.rb])
		}
	} else {
		xe = grow(&sc.xe, n*hidden)
		for g, r := range rows {
			copy(xe[g*hidden:(g+1)*hidden], xf[r*hidden:(r+1)*hidden])
		}
	}
	gt := grow(&sc.gt, n*pj.ffn)
	upv := grow(&sc.up, n*pj.ffn)
	xq, err := b.project(gt, xe, n, hidden, pj.ffn, pj.gate, pj.gw, xq, par)
	if err != nil {
		return err
	}
	if pj.uw == nil || pj.gw == nil || pj.uw.t.Type != pj.gw.t.Type {
		xq = nil // up reads another activation format
		if xe == nil {
			xe = grow(&sc.xe, n*hidden)
			for g, r := range rows {
				copy(xe[g*hidden:(g+1)*hidden], xf[r*hidden:(r+1)*hidden])
			}
		}
	}
	if _, err = b.project(upv, xe, n, hidden, pj.ffn, pj.up, pj.uw, xq, par); err != nil {
		return err
	}
	if par {
		if err := b.siluMulParallel(gt, upv); err != nil {
			return err
		}
	} else {
		siluMul(gt, upv)
	}
	_, err = b.project(ye, gt, n, pj.ffn, hidden, pj.down, pj.dw, nil, par)
	return err
}

// moeGroups runs the active experts in groups of consecutive ids whose
// outputs fit in moeBufferFloats. Within a group the workers pull whole
// experts, largest first (each expert's three GEMMs on one worker: no
// fork-join per GEMM); a group of one expert splits its GEMMs over the
// workers instead. After each group every row adds its experts' weighted
// outputs in ascending expert order, so the sums, and their bits, do not
// depend on the grouping or the thread count.
func (b *Backend) moeGroups(out, xf []float32, L, hidden, k int, id []int32, wf []float32, active []int, projs []moeProj, count, start, rowOf, slotAt []int) error {
	// order[r*k:(r+1)*k] lists row r's slots by ascending expert id.
	order := make([]int, L*k)
	if err := b.parallel(L, 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o := order[r*k : (r+1)*k]
			for j := range o {
				o[j] = j
				for t := j; t > 0 && id[r*k+o[t]] < id[r*k+o[t-1]]; t-- {
					o[t], o[t-1] = o[t-1], o[t]
				}
			}
		}
	}); err != nil {
		return err
	}
	sh, err := b.moeShare(xf, L, hidden, active, projs)
	if err != nil {
		return err
	}
	maxRows := moeBufferFloats / max(1, hidden)
	scratch := make([]moeScratch, b.threads)
	var y []float32
	var group []int
	for a0 := 0; a0 < len(active); {
		rows := count[active[a0]]
		a1 := a0 + 1
		for a1 < len(active) && rows+count[active[a1]] <= maxRows {
			rows += count[active[a1]]
			a1++
		}
		g0 := start[active[a0]] // gathered index of the group's first row
		yg := grow(&y, rows*hidden)
		if a1 == a0+1 {
			e := active[a0]
			if err := b.expertFFN(yg, xf, rowOf[start[e]:start[e]+count[e]], hidden, &projs[e], true, &scratch[0], sh); err != nil {
				return err
			}
		} else {
			group = append(group[:0], active[a0:a1]...)
			sort.SliceStable(group, func(i, j int) bool { return count[group[i]] > count[group[j]] })
			errs := make([]error, len(group))
			if err := b.parallelDynamic(len(group), func(w, i int) {
				e := group[i]
				ye := yg[(start[e]-g0)*hidden : (start[e]-g0+count[e])*hidden]
				errs[i] = b.expertFFN(ye, xf, rowOf[start[e]:start[e]+count[e]], hidden, &projs[e], false, &scratch[w], sh)
			}); err != nil {
				return err
			}
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
		}
		eLo, eHi := int32(active[a0]), int32(active[a1-1])
		if err := b.parallel(L, 16, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				o := out[r*hidden : (r+1)*hidden]
				for _, j := range order[r*k : (r+1)*k] {
					if e := id[r*k+j]; e < eLo || e > eHi {
						continue
					}
					g := slotAt[r*k+j] - g0
					w := wf[r*k+j]
					yr := yg[g*hidden : (g+1)*hidden]
					for t := range o {
						o[t] += yr[t] * w
					}
				}
			}
		}); err != nil {
			return err
		}
		a0 = a1
	}
	return nil
}

// moeShare quantizes x once when the gate weights of all active experts
// are of one 8-bit-activation type (L rows quantized instead of L·k
// gathered ones); nil otherwise.
func (b *Backend) moeShare(xf []float32, L, hidden int, active []int, projs []moeProj) (*moeShared, error) {
	if len(active) == 0 {
		return nil, nil
	}
	gw := projs[active[0]].gw
	if gw == nil || !b.quantized(gw) || floatKernel(gw) {
		return nil, nil
	}
	for _, e := range active {
		if w := projs[e].gw; w == nil || w.t.Type != gw.t.Type {
			return nil, nil
		}
	}
	rb, err := kernels.ActivationRowBytes(gw.t.Type, hidden)
	if err != nil {
		return nil, err
	}
	xq, err := b.quantizeActs(gw, xf, L, hidden, true)
	if err != nil {
		return nil, err
	}
	return &moeShared{typ: gw.t.Type, rb: rb, xq: xq}, nil
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
			return nil, b.matmul(out, x, m, k, n, src)
		}
		matmulSerial(out, x, m, k, n, src)
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

// siluBlock is the block of siluMul: a slice that starts at a multiple of
// it gives each value the same bits however the rest is cut.
const siluBlock = 64

// siluMulParallel is siluMul on the workers, cut at whole blocks of
// siluBlock values: which values take the vector lanes depends only on
// their position, so the bits do not depend on the thread count.
func (b *Backend) siluMulParallel(g, u []float32) error {
	return b.parallel((len(g)+siluBlock-1)/siluBlock, (1<<14)/siluBlock, func(lo, hi int) {
		a, e := lo*siluBlock, min(hi*siluBlock, len(g))
		siluMul(g[a:e], u[a:e])
	})
}

// siluMulGeneric sets g[i] = silu(g[i])·u[i]: the generic twin of siluMul.
func siluMulGeneric(g, u []float32) {
	for i, v := range g {
		g[i] = silu(v) * u[i]
	}
}

// silu is x·sigmoid(x) in float32, as the reference computes it: e^-x by
// expf (within 2 ulp; +Inf past 88.7, so a very negative x gives -0), one
// add and one divide. (math.Exp in float64 was ~4% of a Q8_0 prefill.)
func silu(x float32) float32 {
	return x / (1 + expf(-x))
}
