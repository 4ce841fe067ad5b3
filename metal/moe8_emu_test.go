//go:build mslemu

package metal

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// TestMoEInt8Emulated: with the tensor path forced on the emulated GPU,
// q4_K experts run the int8 kernels (quant_q8k_rows over the chunk's x,
// moe_gu_t8_q4_K, quant_q8k_rows over every routed h, moe_down_t8_q4_K)
// and agree with the CPU backend's arithmetic (x and h quantized to q8_K,
// quant.VecDot per output: NMSE 1e-9, far inside the rounding a q8_K code
// of h can take when g·u differs in its last bits) and with the exact
// product of the dequantized weights within the conformance suite's
// TolBlock; on the thinker's shapes (hidden 2048, 128 experts top-8, expert
// FFN 768) at 3 tokens, and on 130 tokens top-2 of 6 experts routed 0, 1,
// 63, 64, 65 and 67 times; q4_K gate-up with q6_K down (clef quantize's
// q4_k_m in half the layers) and q6_K experts take each format's int8
// kernel. Experts whose down has no int8 kernel (q8_0) keep the half
// kernels.
func TestMoEInt8Emulated(t *testing.T) {
	b := tensorEmulated(t)
	if !b.tensorFamilyOn(tensorFamilyMoE8) {
		t.Fatal("the int8 MoE family is off with the tensor path forced")
	}
	rng := rand.New(rand.NewSource(88))
	thinker := []int{3, 17, 36, 55, 72, 93, 110, 127} // distinct weight patterns (e % 16)
	cases := []struct {
		name        string
		L, E, k     int
		hidden, ffn int
		guType      quant.Type
		downType    quant.Type
		route       func(r int) []int // experts of token r, best first
		int8        bool
	}{
		{name: "thinker", L: 3, E: 128, k: 8, hidden: 2048, ffn: 768, guType: quant.Q4_K, downType: quant.Q4_K, int8: true,
			route: func(r int) []int {
				p := rng.Perm(8)
				out := make([]int, 8)
				for i, j := range p {
					out[i] = thinker[j]
				}
				return out
			}},
		{name: "odd counts", L: 130, E: 6, k: 2, hidden: 256, ffn: 256, guType: quant.Q4_K, downType: quant.Q4_K, int8: true, route: oddRoute(rng)},
		{name: "q4_k_m: q6_K down", L: 3, E: 128, k: 8, hidden: 2048, ffn: 768, guType: quant.Q4_K, downType: quant.Q6_K, int8: true,
			route: func(r int) []int { p := rng.Perm(128); return p[:8] }},
		{name: "q6_K experts, odd counts", L: 130, E: 6, k: 2, hidden: 512, ffn: 256, guType: quant.Q6_K, downType: quant.Q6_K, int8: true, route: oddRoute(rng)},
		{name: "q8_0 down", L: 10, E: 4, k: 2, hidden: 256, ffn: 256, guType: quant.Q4_K, downType: quant.Q8_0, int8: false,
			route: func(r int) []int { p := rng.Perm(4); return p[:2] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gate := q4kPatterns(rng, c.E, c.ffn, c.hidden, c.guType)
			up := q4kPatterns(rng, c.E, c.ffn, c.hidden, c.guType)
			down := q4kPatterns(rng, c.E, c.hidden, c.ffn, c.downType)
			ex := backend.Experts{}
			for _, p := range []struct {
				dst  **backend.Tensor
				pat  *expertPatterns
				name string
			}{{&ex.Gate, gate, "gate"}, {&ex.Up, up, "up"}, {&ex.Down, down, "down"}} {
				w, err := b.Weight(&weights.Tensor{Name: p.name, Type: p.pat.typ, Shape: []int{c.E, p.pat.rows, p.pat.cols}, Data: p.pat.stack()})
				if err != nil {
					t.Fatal(err)
				}
				*p.dst = w
			}
			logits := make([]float32, c.L*c.E)
			for r := range c.L {
				for e := range c.E {
					logits[r*c.E+e] = -10 - float32(rng.Float64())
				}
				for i, e := range c.route(r) {
					logits[r*c.E+e] = float32(c.k-i) + float32(rng.Float64())*0.5
				}
			}
			x := make([]float32, c.L*c.hidden)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			lt, err := b.Upload(logits, c.L, c.E)
			if err != nil {
				t.Fatal(err)
			}
			ids, ws, err := b.Route(lt, c.k, true)
			if err != nil {
				t.Fatal(err)
			}
			xt, err := b.Upload(x, c.L, c.hidden)
			if err != nil {
				t.Fatal(err)
			}
			out, idv, wv, ran := runMoE(t, b, xt, ids, ws, ex)
			sg, _ := kernelSuffix(c.guType)
			sd, _ := kernelSuffix(c.downType)
			for _, k := range []string{"moe_gu_t8_" + sg, "moe_down_t8_" + sd, "quant_q8k_rows"} {
				if ran(k) != c.int8 {
					t.Errorf("%s dispatched: %v, want %v", k, ran(k), c.int8)
				}
			}
			gh, dh := ran("moe_gu_t_"+sg), ran("moe_down_t_"+sd)
			if c.int8 && (gh || dh) || !c.int8 && !(gh && dh) {
				t.Errorf("half tensor kernels moe_gu_t_%s and moe_down_t_%s dispatched: %v and %v, want %v", sg, sd, gh, dh, !c.int8)
			}
			mirror, exact := moeRefs(t, c.L, c.k, c.hidden, c.ffn, x, idv, wv, gate, up, down)
			for i, v := range out {
				if math.IsNaN(float64(v)) {
					t.Fatalf("NaN at row %d column %d", i/c.hidden, i%c.hidden)
				}
			}
			if c.int8 {
				t.Logf("NMSE %.3g against the exact product, %.3g against the CPU's arithmetic", conformance.NMSE(out, exact), conformance.NMSE(out, mirror))
			} else { // mirror multiplies q8_K activations: not the half kernels' arithmetic
				t.Logf("NMSE %.3g against the exact product", conformance.NMSE(out, exact))
			}
			if e := conformance.NMSE(out, exact); !(e <= conformance.TolBlock) {
				t.Errorf("NMSE %.3g against the exact product > TolBlock %g", e, conformance.TolBlock)
			}
			if c.int8 {
				if e := conformance.NMSE(out, mirror); !(e <= 1e-9) {
					t.Errorf("NMSE %.3g against the CPU's q8_K arithmetic > 1e-9", e)
				}
			}
		})
	}
}

// oddRoute routes 130 tokens top-2 over 6 experts 0, 1, 63, 64, 65 and 67
// times: the sorted labels, label i paired with label i + 130 (distinct,
// since no expert has 130).
func oddRoute(rng *rand.Rand) func(r int) []int {
	var labels []int
	for e, n := range []int{0, 1, 63, 64, 65, 67} {
		for range n {
			labels = append(labels, e)
		}
	}
	return func(r int) []int {
		a, b := labels[r], labels[r+130]
		if rng.Intn(2) == 0 {
			a, b = b, a
		}
		return []int{a, b}
	}
}

// expertPatterns are E experts of rows x cols weights of typ made of 16
// random matrices (expert e is pattern e % 16), random block bytes with
// moderate block scales.
type expertPatterns struct {
	typ        quant.Type
	rows, cols int
	rowBytes   int
	pat        [][]byte
	E          int
}

func q4kPatterns(rng *rand.Rand, E, rows, cols int, typ quant.Type) *expertPatterns {
	rb, _ := quant.RowBytes(typ, cols)
	p := &expertPatterns{typ: typ, rows: rows, cols: cols, rowBytes: rb, E: E}
	f, err := quant.FormatOf(typ)
	if err != nil {
		panic(err)
	}
	for range min(E, 16) {
		m := make([]byte, rows*rb)
		rng.Read(m)
		for o := 0; o < len(m); o += f.BlockBytes {
			blk := m[o : o+f.BlockBytes]
			switch typ {
			case quant.Q4_K: // d, dmin: w = d·sc·q − dmin·m stays within about ±0.05
				binary.LittleEndian.PutUint16(blk, quant.Float32ToFloat16(float32(1+rng.Float64())/(1<<14)))
				binary.LittleEndian.PutUint16(blk[2:], quant.Float32ToFloat16(float32(1+rng.Float64())/(1<<12)))
			case quant.Q6_K: // d at the end: w = d·sc·q, |sc·q| <= 128·32
				binary.LittleEndian.PutUint16(blk[208:], quant.Float32ToFloat16(float32(1+rng.Float64())/(1<<16)))
			case quant.Q8_0: // d first: w = d·q, |q| <= 128
				binary.LittleEndian.PutUint16(blk, quant.Float32ToFloat16(float32(1+rng.Float64())/(1<<12)))
			}
		}
		p.pat = append(p.pat, m)
	}
	return p
}

func (p *expertPatterns) stack() []byte {
	var out []byte
	for e := range p.E {
		out = append(out, p.pat[e%len(p.pat)]...)
	}
	return out
}

func (p *expertPatterns) row(e, r int) []byte {
	return p.pat[e%len(p.pat)][r*p.rowBytes : (r+1)*p.rowBytes]
}

// moeRefs returns the MoE output computed as the CPU backend computes it
// (x and h quantized to q8_K, the VecDotType of every K format, quant.VecDot
// per output), with h rounded to half before its quantization and each
// entry's row rounded to bf16 as the device passes them on, and the exact
// float64 product of the dequantized weights,
// both with the routing the device chose (ids, route weights).
func moeRefs(t *testing.T, L, k, hidden, ffn int, x, ids, ws []float32, gate, up, down *expertPatterns) (mirror, exact []float32) {
	mirror, exact = make([]float32, L*hidden), make([]float32, L*hidden)
	q8x := make([]byte, hidden/256*292)
	q8h := make([]byte, ffn/256*292)
	h := make([]float32, ffn)
	hx := make([]float64, ffn)
	deq := func(p *expertPatterns, e, r int) []float32 {
		v := make([]float32, p.cols)
		if err := quant.Dequantize(p.typ, v, p.row(e, r)); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for r := range L {
		xr := x[r*hidden : (r+1)*hidden]
		if err := quant.QuantizeActivations(quant.Q8_K, q8x, xr); err != nil {
			t.Fatal(err)
		}
		accM, accX := make([]float64, hidden), make([]float64, hidden)
		for j := range k {
			e := int(ids[r*k+j]) // Read converts I32 to float
			w := float64(ws[r*k+j])
			for i := range ffn {
				g, _ := quant.VecDot(gate.typ, hidden, gate.row(e, i), q8x)
				u, _ := quant.VecDot(up.typ, hidden, up.row(e, i), q8x)
				// h passes to its quantizer in half (quant_q8k_rows_h).
				h[i] = quant.Float16ToFloat32(quant.Float32ToFloat16(g / (1 + float32(math.Exp(float64(-g)))) * u))
				gd, ud := deq(gate, e, i), deq(up, e, i)
				var gx, ux float64
				for c := range hidden {
					gx += float64(gd[c]) * float64(xr[c])
					ux += float64(ud[c]) * float64(xr[c])
				}
				hx[i] = gx / (1 + math.Exp(-gx)) * ux
			}
			if err := quant.QuantizeActivations(quant.Q8_K, q8h, h); err != nil {
				t.Fatal(err)
			}
			for o := range hidden {
				y, err := quant.VecDot(down.typ, ffn, down.row(e, o), q8h)
				if err != nil {
					t.Fatal(err)
				}
				// The entry's row passes to the combine in bf16 (moeBF16Rows).
				accM[o] += w * float64(quant.BF16ToFloat32(quant.Float32ToBF16(y)))
				dd := deq(down, e, o)
				var s float64
				for c := range ffn {
					s += float64(dd[c]) * hx[c]
				}
				accX[o] += w * s
			}
		}
		for o := range hidden {
			mirror[r*hidden+o], exact[r*hidden+o] = float32(accM[o]), float32(accX[o])
		}
	}
	return mirror, exact
}

// runMoE runs b.MoE on the routed x and reads back the output, the routing
// ids and weights; ran reports whether a kernel was dispatched by it.
func runMoE(t *testing.T, b *Backend, xt, ids, ws *backend.Tensor, ex backend.Experts) (out, idv, wv []float32, ran func(string) bool) {
	t.Helper()
	before := b.Stats().Kernels
	got, err := b.MoE(xt, ids, ws, ex)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range []struct {
		dst *[]float32
		src *backend.Tensor
	}{{&out, got}, {&idv, ids}, {&wv, ws}} {
		if *r.dst, err = b.Read(ctx, r.src); err != nil {
			t.Fatal(err)
		}
	}
	after := b.Stats().Kernels
	return out, idv, wv, func(k string) bool { return after[k].Dispatches > before[k].Dispatches }
}
