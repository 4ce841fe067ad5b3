package metal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// layer64k runs one decoder layer of the 30B-A3B thinker (hidden 2048, 32
// query heads, 4 kv heads, head dim 128, 128 experts top-8 of
// moe_intermediate 768, q4_K weights) over L rows at once, as a backend
// without row chunking would, and reads the result.
func layer64k(t *testing.T, b *Backend, L int) {
	t.Helper()
	const hidden, heads, kvHeads, d, E, topk, ffn = 2048, 32, 4, 128, 128, 8, 768
	weight := func(name string, shape ...int) *backend.Tensor {
		t.Helper()
		typ := quant.Q4_K
		rb, err := quant.RowBytes(typ, shape[len(shape)-1])
		if err != nil {
			t.Fatal(err)
		}
		n := rb
		for _, s := range shape[:len(shape)-1] {
			n *= s
		}
		// Never touched by the fake GPU: the pages stay unbacked.
		w, err := b.Weight(&weights.Tensor{Name: name, Type: typ, Shape: shape, Data: make([]byte, n)})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	must := func(x *backend.Tensor, err error) *backend.Tensor {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	norm, err := b.Weight(&weights.Tensor{Name: "norm", Type: quant.F32, Shape: []int{hidden}, Data: make([]byte, 4*hidden)})
	if err != nil {
		t.Fatal(err)
	}
	headNorm, err := b.Weight(&weights.Tensor{Name: "head norm", Type: quant.F32, Shape: []int{d}, Data: make([]byte, 4*d)})
	if err != nil {
		t.Fatal(err)
	}
	embed := weight("embed", 256, hidden)
	wq, wk, wv, wo := weight("q", heads*d, hidden), weight("k", kvHeads*d, hidden), weight("v", kvHeads*d, hidden), weight("o", hidden, heads*d)
	router := weight("router", E, hidden)
	ex := backend.Experts{Gate: weight("gate", E, ffn, hidden), Up: weight("up", E, ffn, hidden), Down: weight("down", E, hidden, ffn)}
	rope, err := backend.MRoPE(d, 1e6, [3]int{24, 20, 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, L)
	pos := make([][3]int, L)
	for i := range ids {
		ids[i], pos[i] = i%256, [3]int{i, i, i}
	}
	x := must(b.Embed(embed, ids))
	h := must(b.RMSNorm(x, norm, 1e-6))
	q := must(b.RoPE(must(b.RMSNorm(must(b.MatMul(h, wq)), headNorm, 1e-6)), pos, rope))
	k := must(b.RoPE(must(b.RMSNorm(must(b.MatMul(h, wk)), headNorm, 1e-6)), pos, rope))
	v := must(b.MatMul(h, wv))
	a := must(b.Attention(q, k, v, backend.AttentionOptions{Heads: heads, KVHeads: kvHeads, Scale: 0.088, Causal: true}))
	xa := must(b.Add(x, must(b.MatMul(a, wo))))
	hn := must(b.RMSNorm(xa, norm, 1e-6))
	rid, rw, err := b.Route(must(b.MatMul(hn, router)), topk, true)
	if err != nil {
		t.Fatal(err)
	}
	out := must(b.Add(xa, must(b.MoE(hn, rid, rw, ex))))
	if _, err := b.Read(context.Background(), out); err != nil {
		t.Fatal(err)
	}
}

// TestCommitBudget64k: a whole layer over a 64k-token state, launched on a
// GPU that only records, puts at most ~1 s of estimated work (on the
// conservative chip of cost.go) in any command buffer: commits happen
// without waiting, attention runs in query chunks and the matmuls and
// experts in row chunks, and the host waits once, at the Read. (Before,
// the whole pass was one command buffer of tens of seconds.)
func TestCommitBudget64k(t *testing.T) {
	if testing.Short() {
		t.Skip("maps ~350 MiB of (untouched) weight memory")
	}
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	layer64k(t, b, 65536)
	s := b.Stats()
	var total float64
	for _, k := range s.Kernels {
		total += k.EstSeconds
	}
	t.Logf("%d command buffers, %d dispatches, %.1f s estimated in all, at most %.3f s and %d dispatches in one",
		s.Buffers, s.Dispatches, total, s.MaxBufferSeconds, s.MaxBufferDispatches)
	if total < 10 {
		t.Fatalf("the layer is estimated at %.2f s in all: not a long pass", total)
	}
	if s.MaxBufferSeconds > 1 {
		t.Errorf("a command buffer holds %.2f s of estimated work (> 1 s)", s.MaxBufferSeconds)
	}
	if s.MaxBufferDispatches > bufferDispatches {
		t.Errorf("a command buffer holds %d dispatches (> %d)", s.MaxBufferDispatches, bufferDispatches)
	}
	if s.Buffers != len(g.buffers) || s.Dispatches != g.dispatches {
		t.Errorf("stats say %d buffers, %d dispatches; the GPU saw %d, %d", s.Buffers, s.Dispatches, len(g.buffers), g.dispatches)
	}
	if g.waits != 1 {
		t.Errorf("the host waited %d times, want once (at the Read)", g.waits)
	}
	if n := s.Kernels["flash_attn_mma_d128"].Dispatches; n < 16 {
		t.Errorf("attention over 64k tokens in %d launches: not split into query chunks", n)
	}
	if len(g.misuse) > 0 {
		t.Errorf("misuse: %v", g.misuse)
	}
}

// TestCommitPolicy: launches go to the GPU in command buffers of at most
// bufferDispatches, committed without waiting; only Read waits.
func TestCommitPolicy(t *testing.T) {
	g := newFakeGPU()
	b, x := fakeBackend(t, g)
	for range 200 {
		y, err := b.Add(x, x)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	}
	if g.waits != 0 || len(g.buffers) != 200/bufferDispatches {
		t.Fatalf("after 200 launches: %d waits, %d buffers committed; want 0 and %d", g.waits, len(g.buffers), 200/bufferDispatches)
	}
	if _, err := b.Read(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	if g.waits != 1 || g.dispatches != 200 {
		t.Fatalf("after Read: %d waits, %d dispatches", g.waits, g.dispatches)
	}
	for i, buf := range g.buffers {
		if len(buf) > bufferDispatches {
			t.Errorf("buffer %d holds %d dispatches", i, len(buf))
		}
	}
}

// TestInterruptDropsBatch: once the decision's context is done, the next
// launch fails with its error, the open batch is never encoded, and what
// was committed before stays committed.
func TestInterruptDropsBatch(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	restore := b.Interrupt(ctx)
	defer restore()
	x, _ := b.Upload(make([]float32, 64), 8, 8)
	for range bufferDispatches + 5 {
		if _, err := b.Add(x, x); err != nil {
			t.Fatal(err)
		}
	}
	committed := g.dispatches
	if committed != bufferDispatches {
		t.Fatalf("%d dispatches committed, want %d", committed, bufferDispatches)
	}
	cancel()
	if _, err := b.Add(x, x); !errors.Is(err, context.Canceled) {
		t.Fatalf("launch after cancel: %v", err)
	}
	if _, err := b.Read(ctx, x); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read after cancel: %v", err)
	}
	if g.dispatches != committed || len(g.open) != 0 {
		t.Errorf("%d dispatches reached the GPU after the cancel (open %d)", g.dispatches-committed, len(g.open))
	}
	restore()
	if _, err := b.Add(x, x); err != nil {
		t.Fatalf("after restore: %v", err)
	}
	if _, err := b.Read(context.Background(), x); err != nil {
		t.Fatalf("after restore: %v", err)
	}
}

// failingGPU fails the command buffer holding kernel fail.
type failingGPU struct {
	*fakeGPU
	fail   string
	failed *BufferError
}

func (g *failingGPU) Commit() error {
	for _, k := range g.open {
		if k == g.fail && g.failed == nil {
			g.failed = &BufferError{Seq: len(g.buffers) + 1, First: g.open[0], Last: g.open[len(g.open)-1], Dispatches: len(g.open),
				Status: 5, Msg: "Caused GPU Address Fault Error (0000000b:kIOGPUCommandBufferCallbackErrorPageFault)"}
		}
	}
	return g.fakeGPU.Commit()
}

func (g *failingGPU) Wait(ctx context.Context) error {
	if f := g.failed; f != nil {
		g.failed = nil
		return f
	}
	return g.fakeGPU.Wait(ctx)
}

// TestTrace: with SetTrace every launch is its own command buffer, waited
// for at once, and a fault names the kernel, grid, threadgroup and buffer
// sizes of the launch that caused it (without tracing, only the command
// buffer's first and last kernels are known).
func TestTrace(t *testing.T) {
	g := &failingGPU{fakeGPU: newFakeGPU(), fail: "transpose_f32"}
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	b.SetTrace(true)
	x, _ := b.Upload(make([]float32, 6*10), 6, 10)
	if _, err := b.Add(x, x); err != nil {
		t.Fatal(err)
	}
	_, err = b.Transpose(x)
	if err == nil {
		t.Fatal("no error from the faulting launch")
	}
	var be *BufferError
	if !errors.As(err, &be) || be.Status != 5 {
		t.Errorf("error %v does not carry the command buffer's failure", err)
	}
	for _, want := range []string{"transpose_f32", "grid [1 1 1]", "group [256 1 1]", "1:240@0", "2:16384@0", "PageFault"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if len(g.buffers) != 2 || g.waits != 1 {
		t.Errorf("%d buffers, %d waits; want one buffer per launch, each waited for", len(g.buffers), g.waits)
	}
	s := b.Stats()
	if s.Buffers != 2 || s.MaxBufferDispatches != 1 {
		t.Errorf("stats: %d buffers, at most %d dispatches in one", s.Buffers, s.MaxBufferDispatches)
	}
}

// TestRoPETablesCached: the tables RoPE reads are uploaded once, not on
// every call (every layer rotates with the same positions and frequencies).
func TestRoPETablesCached(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	r, err := backend.MRoPE(8, 1e4, [3]int{2, 1, 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	pos := [][3]int{{0, 0, 0}, {1, 1, 1}, {2, 3, 4}}
	x, _ := b.Upload(make([]float32, 3*16), 3, 16)
	before := g.uploads
	if _, err := b.RoPE(x, pos, r); err != nil {
		t.Fatal(err)
	}
	first := g.uploads - before
	for range 5 {
		if _, err := b.RoPE(x, pos, r); err != nil {
			t.Fatal(err)
		}
	}
	if first != 3 || g.uploads-before != 3 {
		t.Errorf("uploads: %d on the first call, %d after six; want 3 and 3", first, g.uploads-before)
	}
	pos[2][0] = 7 // new positions: a new table, the others still cached
	if _, err := b.RoPE(x, pos, r); err != nil {
		t.Fatal(err)
	}
	if g.uploads-before != 4 {
		t.Errorf("changed positions: %d uploads in all, want 4", g.uploads-before)
	}
}

// TestPipelinesPrepared: every pipeline the ops can launch is prepared at
// open, and each names a kernel of shaders/.
func TestPipelinesPrepared(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range kernelNamesForTest() {
		names[n] = true
	}
	ps := b.Pipelines()
	if len(ps) != len(g.prepared) || len(ps) < 80 {
		t.Fatalf("%d pipelines reported, %d prepared", len(ps), len(g.prepared))
	}
	for _, p := range ps {
		k, _, _ := strings.Cut(p.Name, "[")
		if !names[k] || p.Err != nil || p.Info.MaxThreads != 1024 {
			t.Errorf("pipeline %s: kernel in shaders/ %v, err %v, info %+v", p.Name, names[k], p.Err, p.Info)
		}
	}
}

// prepareFails fails to build one pipeline.
type prepareFails struct{ *fakeGPU }

func (g prepareFails) Prepare(kernel string, consts []fconst) error {
	if kernel == "rope_f32" {
		return fmt.Errorf("program_source:12:3: error: use of undeclared identifier 'x'")
	}
	return g.fakeGPU.Prepare(kernel, consts)
}

// TestPrepareFailure: a pipeline that does not build fails the open, with
// the pipeline's name and the compiler's log.
func TestPrepareFailure(t *testing.T) {
	_, err := newBackend(prepareFails{newFakeGPU()}, "fake")
	if err == nil || !strings.Contains(err.Error(), "rope_f32") || !strings.Contains(err.Error(), "undeclared identifier") {
		t.Fatalf("open with a failing pipeline: %v", err)
	}
}
