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

// bigActivation returns a [rows, cols] activation made on the device (an
// Embed of one table row), so that a fakeGPU test can launch expensive ops
// without host memory for their data.
func bigActivation(t *testing.T, b *Backend, rows, cols int) *backend.Tensor {
	t.Helper()
	table, err := b.Weight(&weights.Tensor{Name: "table", Type: quant.F32, Shape: []int{1, cols}, Data: make([]byte, 4*cols)})
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.Embed(table, make([]int, rows))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestThrottle: a long pass never has more than maxInFlight command
// buffers unfinished behind the one just committed (the fake GPU completes
// a buffer only when the host waits for it), so a cancelled decision waits
// for a second of GPU work at most, not for the 64 buffers Metal would
// queue. (Before, nothing completed until the Read: every buffer of the
// pass was queued.)
func TestThrottle(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	x := bigActivation(t, b, 3456, 16384)
	for range 400 {
		y, err := b.Add(x, x)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	}
	if _, err := b.Read(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	if len(g.buffers) < 10 {
		t.Fatalf("%d command buffers: not a long pass", len(g.buffers))
	}
	if g.maxUnfinished > maxInFlight+1 {
		t.Errorf("%d command buffers were unfinished at once, want at most %d", g.maxUnfinished, maxInFlight+1)
	}
	if g.throttles != len(g.buffers) || g.waits != 1 {
		t.Errorf("%d buffers, %d throttles, %d waits: want a throttle after every commit", len(g.buffers), g.throttles, g.waits)
	}
}

// TestDispatchFailureDropsDeviceBatch: when the device refuses a launch of
// the batch being committed, the launches before it (already in the
// device's open batch) are dropped with it: the next command buffer holds
// only the launches made after the failure. (Before, it also encoded the
// stale ones, writing pool buffers that belonged to other tensors by then.)
func TestDispatchFailureDropsDeviceBatch(t *testing.T) {
	g := newFakeGPU()
	g.failDispatch = 5
	b, x := fakeBackend(t, g)
	for range 10 {
		y, err := b.Add(x, x)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	}
	if _, err := b.Read(context.Background(), x); err == nil || !strings.Contains(err.Error(), "launch 5 refused") {
		t.Fatalf("Read after a refused launch: %v", err)
	}
	if _, err := b.Transpose(x); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	if len(g.buffers) != 1 || len(g.buffers[0]) != 1 || g.buffers[0][0] != "transpose_f32" {
		t.Errorf("command buffers after the refused launch: %v, want one holding transpose_f32 alone", g.buffers)
	}
}

// TestCancelledTrimDoesNotFailNext: a commit made to free memory (the pool
// trimming) after the decision was cancelled fails with the interrupt; the
// next decision must not inherit that error. A failure the GPU reported
// (a *BufferError) still reaches the next op.
func TestCancelledTrimDoesNotFailNext(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	restore := b.Interrupt(ctx)
	x, err := b.Upload(make([]float32, 64), 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	var ys []*backend.Tensor
	for range 10 {
		y, err := b.Add(x, x)
		if err != nil {
			t.Fatal(err)
		}
		ys = append(ys, y)
	}
	cancel()
	// The op's deferred releases, then an upload that must trim: its
	// commit of the open batch meets the cancelled context.
	b.Free(ys...)
	b.mu.Lock()
	b.pool.budget = b.pool.total() + 100
	b.mu.Unlock()
	if _, err := b.Upload(make([]float32, 64), 8, 8); err != nil {
		t.Fatal(err)
	}
	restore()

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	restore2 := b.Interrupt(ctx2)
	defer restore2()
	y, err := b.Add(x, x)
	if err != nil {
		t.Fatalf("the next decision's first op: %v", err)
	}
	if _, err := b.Read(ctx2, y); err != nil {
		t.Fatalf("the next decision's Read: %v", err)
	}

	// A host-side failure an earlier decision left is forgotten by the
	// next one; a GPU failure left for the next op survives it.
	b.mu.Lock()
	b.failed = errors.New("metal: encoding add_f32: refused")
	b.mu.Unlock()
	restore3 := b.Interrupt(ctx2)
	defer restore3()
	if _, err := b.Add(x, x); err != nil {
		t.Fatalf("a stale host failure reached the next decision: %v", err)
	}
	b.mu.Lock()
	b.failed = &BufferError{Seq: 7, First: "add_f32", Last: "add_f32", Dispatches: 1, Status: 5, Msg: "page fault"}
	b.mu.Unlock()
	restore4 := b.Interrupt(ctx2)
	defer restore4()
	var be *BufferError
	if _, err := b.Add(x, x); !errors.As(err, &be) {
		t.Fatalf("a GPU failure before the decision: the next op returned %v", err)
	}
}

// TestCalibratedCommits: when the GPU measures every command buffer at 3×
// its estimated work, later buffers hold about a third of the work, so a
// buffer still holds the GPU about a quarter second.
func TestCalibratedCommits(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols = 3456, 16384
	perAdd := streamCost(rows*cols, 12, 4).seconds()
	g.timing = func(kernels []string) float64 {
		var s float64
		for _, k := range kernels {
			if k == "add_f32" {
				s += 3 * perAdd
			}
		}
		return s
	}
	x := bigActivation(t, b, rows, cols)
	for range 200 {
		y, err := b.Add(x, x)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(y)
	}
	if len(g.buffers) < 6 {
		t.Fatalf("%d command buffers", len(g.buffers))
	}
	first := len(g.buffers[1])
	if want := int(bufferSeconds / perAdd); first != want {
		t.Fatalf("the second buffer holds %d adds, want %d (uncalibrated)", first, want)
	}
	for i, buf := range g.buffers[5:] {
		if n := len(buf); 3*n > first+3 || 3*n < first-6 {
			t.Errorf("buffer %d holds %d adds, want about %d (a third of %d)", i+5, n, first/3, first)
		}
	}
	if b.slow < 2.9 || b.slow > 3.01 {
		t.Errorf("slowdown %.3f, want 3", b.slow)
	}
}

// TestRoPETableEviction: with a table budget smaller than one RoPE call's
// tables, the tables of the running call are never evicted: a commit made
// to free memory inside its next upload would free them before its launch.
func TestRoPETableEviction(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	b.tables.limit = 1
	r, err := backend.MRoPE(8, 1e4, [3]int{2, 1, 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	pos := [][3]int{{0, 0, 0}, {1, 1, 1}, {2, 3, 4}}
	x, err := b.Upload(make([]float32, 3*16), 3, 16)
	if err != nil {
		t.Fatal(err)
	}
	// A cached pool buffer of another size class, for a trim to free.
	big, err := b.Upload(make([]float32, 8192), 1, 8192)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Add(big, big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	b.Free(s)
	// Room for the output and the three tables, less one byte: the last
	// table's upload trims.
	b.mu.Lock()
	b.pool.budget = b.pool.total() + int64(sizeClass(3*16*4)) + 4*3*3 + 4*int64(len(r.InvFreq)) + 4*int64(len(r.Streams)) - 1
	b.mu.Unlock()
	y, err := b.RoPE(x, pos, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(context.Background(), y); err != nil {
		t.Fatal(err)
	}
	if len(g.misuse) > 0 {
		t.Errorf("misuse: %v", g.misuse)
	}
}

// limitsGPU reports pipeline limits: MaxThreads 64 for mul_mm_q4_K (a
// kernel starved of registers), ExecWidth 16 for rope_f32, fails to build
// rms_norm_f32.
type limitsGPU struct{ *fakeGPU }

func (g limitsGPU) Prepare(kernel string, consts []fconst) error {
	if kernel == "rms_norm_f32" {
		return fmt.Errorf("program_source:3:1: error: unknown type name 'flaot'")
	}
	return g.fakeGPU.Prepare(kernel, consts)
}

func (g limitsGPU) PipelineInfo(kernel string, consts []fconst) (PipelineInfo, error) {
	switch kernel {
	case "mul_mm_q4_K":
		return PipelineInfo{MaxThreads: 64, ExecWidth: 32}, nil
	case "rope_f32":
		return PipelineInfo{MaxThreads: 1024, ExecWidth: 16}, nil
	}
	return g.fakeGPU.PipelineInfo(kernel, consts)
}

// TestPrepareReportsAll: pipelines that cannot run what their ops launch
// (too few threads per threadgroup, SIMD groups not 32 wide) fail the open
// as a compile failure does, and the error carries every pipeline's result
// so that selftest prints the whole table, not the first failure alone.
func TestPrepareReportsAll(t *testing.T) {
	_, err := newBackend(limitsGPU{newFakeGPU()}, "fake")
	var pe *PrepareError
	if !errors.As(err, &pe) {
		t.Fatalf("open with failing pipelines: %v", err)
	}
	if pe.Failed != 4 || len(pe.Pipelines) != len(pipelineSpecs()) {
		t.Errorf("%d failed of %d reported, want 4 (two mul_mm_q4_K, rope_f32, rms_norm_f32) of %d", pe.Failed, len(pe.Pipelines), len(pipelineSpecs()))
	}
	if !strings.Contains(err.Error(), "and 3 more") {
		t.Errorf("error %q does not count the other failures", err)
	}
	var out strings.Builder
	if n := PipelineTable(&out, pe.Pipelines); n != 4 {
		t.Errorf("the table counts %d failures", n)
	}
	for _, want := range []string{"mul_mm_q4_K[fc0=0]", "allows 64 threads per threadgroup, its op launches 128",
		"rope_f32", "16 lanes wide", "rms_norm_f32", "unknown type name", "pipeline add_f32"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the pipeline table lacks %q", want)
		}
	}
}
