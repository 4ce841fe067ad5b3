package metal

import (
	"context"
	"fmt"
	"testing"

	"github.com/clefrt/clef/engine/backend"
)

// hostBuf is device memory of fakeGPU: the bytes of an upload or view (a
// new buffer has none: nothing runs), and its length.
type hostBuf struct {
	data  []byte
	n     int
	freed bool
}

func (b *hostBuf) Len() int { return b.n }

// fakeGPU is a gpu that runs nothing: it records what the backend asks of
// it (buffers, views, uploads, launches per command buffer) so tests can
// check the backend's host logic at any size. Wrap fails with errTooLarge
// past limit bytes (0: no limit).
type fakeGPU struct {
	limit      int
	workingSet uint64

	wraps, uploads, news int
	live                 map[*hostBuf]bool
	prepared             map[string]bool
	open                 []string   // kernels of the open batch
	buffers              [][]string // kernels of each committed buffer
	dispatches           int
	waits                int
	misuse               []string

	// Completion lags: a committed buffer completes only when Throttle or
	// Wait asks for it. unfinished holds the sequence numbers of those not
	// completed; maxUnfinished is the most there ever were.
	unfinished    []int
	maxUnfinished int
	throttles     int
	// timing, when set, measures a completed buffer from its kernels
	// (GPUTimes reports it); times are those not reported yet.
	timing func(kernels []string) float64
	times  []BufferTime
	// failDispatch fails the Dispatch call of that number (counting from 1).
	failDispatch, dispatchCalls int
}

func newFakeGPU() *fakeGPU {
	return &fakeGPU{live: map[*hostBuf]bool{}, prepared: map[string]bool{}}
}

func (g *fakeGPU) Name() string { return "fake" }
func (g *fakeGPU) Info() DeviceInfo {
	return DeviceInfo{Name: "fake", MaxBuffer: 1 << 40, WorkingSet: g.workingSet}
}

func (g *fakeGPU) add(b *hostBuf) *hostBuf { g.live[b] = true; return b }

func (g *fakeGPU) NewBuffer(n int) (gbuf, error) {
	if n <= 0 {
		return nil, fmt.Errorf("NewBuffer(%d)", n)
	}
	g.news++
	return g.add(&hostBuf{n: n}), nil
}

func (g *fakeGPU) Upload(data []byte) (gbuf, error) {
	g.uploads++
	return g.add(&hostBuf{data: append([]byte(nil), data...), n: len(data)}), nil
}

func (g *fakeGPU) Wrap(data []byte) (gbuf, int, error) {
	if g.limit > 0 && len(data) > g.limit {
		return nil, 0, fmt.Errorf("a %d-byte tensor is %w", len(data), errTooLarge)
	}
	g.wraps++
	return g.add(&hostBuf{data: data, n: len(data)}), 0, nil
}

func (g *fakeGPU) Free(b gbuf) {
	hb := b.(*hostBuf)
	if !g.live[hb] {
		g.misuse = append(g.misuse, "double free")
	}
	delete(g.live, hb)
	hb.freed = true
}

func (g *fakeGPU) Prepare(kernel string, consts []fconst) error {
	g.prepared[pipeKey(kernel, consts)] = true
	return nil
}

func (g *fakeGPU) PipelineInfo(kernel string, consts []fconst) (PipelineInfo, error) {
	return PipelineInfo{MaxThreads: 1024, ExecWidth: 32}, nil
}

func (g *fakeGPU) Dispatch(d *dispatch) error {
	g.dispatchCalls++
	if g.dispatchCalls == g.failDispatch {
		return fmt.Errorf("launch %d refused", g.dispatchCalls)
	}
	for _, a := range d.Bufs {
		if !g.live[a.Buf.(*hostBuf)] {
			g.misuse = append(g.misuse, d.Kernel+": buffer used after Free")
		}
	}
	g.open = append(g.open, d.Kernel)
	g.dispatches++
	return nil
}

func (g *fakeGPU) Commit() error {
	if len(g.open) > 0 {
		g.buffers = append(g.buffers, g.open)
		g.open = nil
		g.unfinished = append(g.unfinished, len(g.buffers))
		g.maxUnfinished = max(g.maxUnfinished, len(g.unfinished))
	}
	return nil
}

func (g *fakeGPU) Drop() { g.open = nil }

// complete completes the oldest unfinished buffers until n are left.
func (g *fakeGPU) complete(n int) {
	for len(g.unfinished) > n {
		seq := g.unfinished[0]
		g.unfinished = g.unfinished[1:]
		if g.timing != nil {
			g.times = append(g.times, BufferTime{Seq: seq, Seconds: g.timing(g.buffers[seq-1])})
		}
	}
}

func (g *fakeGPU) Throttle(ctx context.Context, n int) error {
	g.throttles++
	g.complete(n)
	return nil
}

func (g *fakeGPU) Wait(ctx context.Context) error {
	g.waits++
	g.complete(0)
	return ctx.Err()
}

func (g *fakeGPU) Read(b gbuf, off int, dst []byte) error {
	if len(g.open) > 0 {
		return fmt.Errorf("read with launches not committed")
	}
	hb := b.(*hostBuf)
	if hb.data != nil {
		copy(dst, hb.data[off:])
	}
	return nil
}

func (g *fakeGPU) GPUTimes() []BufferTime {
	t := g.times
	g.times = nil
	return t
}

func (g *fakeGPU) Close() error { return nil }

// fakeBackend opens the backend on g and uploads an 8x8 activation of
// zeros for the tests' launches.
func fakeBackend(t *testing.T, g *fakeGPU) (*Backend, *backend.Tensor) {
	t.Helper()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.Upload(make([]float32, 64), 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	return b, x
}
