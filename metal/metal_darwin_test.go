//go:build darwin && arm64

package metal

// The tests that only a Mac runs. None of them skips: on darwin/arm64 a
// device that does not open or shaders that Apple's compiler rejects are
// failures, reported with the compiler's log, so that the first run on a
// Mac tells the truth.

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/clefrt/clef/engine/backend/conformance"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// openForTest opens the device or fails the test with the reason (for a
// compile failure, Apple's compiler's whole log).
func openForTest(t testing.TB) *metalGPU {
	t.Helper()
	g, err := openGPU()
	if err != nil {
		t.Fatalf("the Metal device did not open on this Mac:\n%v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// newForTest opens the backend (every pipeline prepared) or fails.
func newForTest(t testing.TB) *Backend {
	t.Helper()
	b, err := New()
	if err != nil {
		t.Fatalf("the Metal backend did not open on this Mac:\n%v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestOpen is the first thing to run on a Mac: the device, the library
// compiled by Apple's compiler and every pipeline the ops use.
func TestOpen(t *testing.T) {
	if ok, why := Available(); !ok {
		t.Fatalf("no usable Metal device: %s", why)
	}
	b := newForTest(t)
	t.Logf("device: %s", b.Device())
	info := b.Info()
	if info.MaxBuffer == 0 || info.WorkingSet == 0 {
		t.Errorf("device limits unknown: %+v", info)
	}
}

// TestPipelines checks every pipeline prepared at open: it built, and its
// limits are sane for an Apple7+ GPU (the kernels assume 32-wide SIMD
// groups and at most 32 KiB of threadgroup memory).
func TestPipelines(t *testing.T) {
	b := newForTest(t)
	ps := b.Pipelines()
	if len(ps) == 0 {
		t.Fatal("no pipelines prepared")
	}
	for _, p := range ps {
		if p.Err != nil {
			t.Errorf("%s: %v", p.Name, p.Err)
			continue
		}
		t.Logf("%-32s max threads %4d  exec width %2d  static tg memory %5d", p.Name, p.Info.MaxThreads, p.Info.ExecWidth, p.Info.StaticTGMemory)
		if p.Info.MaxThreads <= 0 || p.Info.ExecWidth != 32 || p.Info.StaticTGMemory > maxThreadgroupTG {
			t.Errorf("%s: unexpected limits %+v", p.Name, p.Info)
		}
	}
	// Every entry point of the library builds (with the function constants
	// a kernel declares set to false).
	g := openForTest(t)
	for _, name := range shaders.KernelNames() {
		var consts []fconst
		if strings.HasPrefix(name, "mul_mm_") {
			consts = []fconst{{Index: 0, Bool: true}}
		}
		if err := g.Prepare(name, consts); err != nil {
			t.Error(err)
		}
	}
}

// TestConformanceMetal runs the shared conformance suite on the GPU.
func TestConformanceMetal(t *testing.T) {
	conformance.Run(t, newForTest(t))
}

// addKernel dispatches y = a + b over n floats.
func addKernel(g gpu, a, b, y gbuf, aOff, n int) error {
	k := shaders.KargsEltwise{N: int32(n), Cols: int32(n)}
	return g.Dispatch(&dispatch{Kernel: "add_f32", Grid: [3]int{(n + 255) / 256, 1, 1}, Group: [3]int{256, 1, 1},
		Args: shaders.Bytes(&k), Bufs: []arg{{Index: 1, Buf: a, Off: aOff}, {Index: 2, Buf: b}, {Index: 3, Buf: y, Out: true}}})
}

func f32s(b []byte) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4) }

func randBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return f32Bytes(v)
}

// chain runs y = ((a + b) + b) + ... (steps additions, each its own launch,
// committed every perBuffer launches) and returns y's bytes.
func chain(t *testing.T, g gpu, a []byte, steps, perBuffer int) []byte {
	t.Helper()
	n := len(a) / 4
	ab, err := g.Upload(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := g.Upload(a)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := g.NewBuffer(len(a))
	y, _ := g.NewBuffer(len(a))
	src := ab
	for s := range steps {
		dst := [2]gbuf{x, y}[s%2]
		if err := addKernel(g, src, bb, dst, 0, n); err != nil {
			t.Fatal(err)
		}
		src = dst
		if (s+1)%perBuffer == 0 {
			if err := g.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := g.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(a))
	if err := g.Read(src, 0, out); err != nil {
		t.Fatal(err)
	}
	for _, b := range []gbuf{ab, bb, x, y} {
		g.Free(b)
	}
	return out
}

// checkChain checks chain's result: a + steps·a.
func checkChain(t *testing.T, a, got []byte, steps int) {
	t.Helper()
	av, gv := f32s(a), f32s(got)
	for i := range av {
		want := av[i]
		for range steps {
			want += av[i]
		}
		if d := gv[i] - want; d > 1e-4 || d < -1e-4 {
			t.Fatalf("element %d: got %g, want %g", i, gv[i], want)
		}
	}
}

// TestBatches commits launches in several command buffers without waiting,
// then waits once: the results depend on every buffer in order.
func TestBatches(t *testing.T) {
	g := openForTest(t)
	a := randBytes(1<<16, 1)
	for _, per := range []int{1, 7, 64} {
		checkChain(t, a, chain(t, g, a, 40, per), 40)
	}
	ts := g.GPUTimes()
	var s float64
	for i, bt := range ts {
		s += bt.Seconds
		if i > 0 && bt.Seq <= ts[i-1].Seq {
			t.Errorf("GPUTimes out of order: %+v", ts)
			break
		}
	}
	if !(s > 0) {
		t.Errorf("GPUTimes add up to %g s after work", s)
	}
	if ts := g.GPUTimes(); len(ts) != 0 {
		t.Errorf("GPUTimes = %+v with no work since the last call", ts)
	}
}

// TestWaitCancelled: a done context still waits for the committed work,
// then says so.
func TestWaitCancelled(t *testing.T) {
	g := openForTest(t)
	a := randBytes(1<<20, 2)
	ab, _ := g.Upload(a)
	y, _ := g.NewBuffer(len(a))
	for range 20 {
		if err := addKernel(g, ab, ab, y, 0, len(a)/4); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Commit(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
	out := make([]byte, len(a))
	if err := g.Read(y, 0, out); err != nil {
		t.Fatal(err)
	}
	av, ov := f32s(a), f32s(out)
	for i := range av {
		if ov[i] != av[i]+av[i] {
			t.Fatalf("element %d: %g, want %g (Wait returned before the work completed)", i, ov[i], 2*av[i])
		}
	}
}

// TestFreeWhileCommitted frees every buffer right after committing work
// that uses them: the work still completes, and a later launch that names
// a freed buffer is refused.
func TestFreeWhileCommitted(t *testing.T) {
	g := openForTest(t)
	a := randBytes(1<<18, 3)
	data := append([]byte(nil), a...)
	view, off, err := g.Wrap(data)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := g.Upload(a)
	y, _ := g.NewBuffer(len(a))
	if err := addKernel(g, view, bb, y, off, len(a)/4); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(); err != nil {
		t.Fatal(err)
	}
	g.Free(view)
	g.Free(bb)
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(a))
	if err := g.Read(y, 0, out); err != nil {
		t.Fatal(err)
	}
	av, ov := f32s(a), f32s(out)
	for i := range av {
		if ov[i] != 2*av[i] {
			t.Fatalf("element %d: %g, want %g", i, ov[i], 2*av[i])
		}
	}
	if err := addKernel(g, y, bb, y, 0, len(a)/4); err == nil || !strings.Contains(err.Error(), "after Free") {
		t.Errorf("a launch naming a freed buffer: %v", err)
	}
	if err := g.Read(bb, 0, out); err == nil {
		t.Error("Read of a freed buffer succeeded")
	}
}

// TestWrapViews: every Wrap is a new view from the data's page to a page
// boundary, and kernels read the data at the offset Wrap returns.
func TestWrapViews(t *testing.T) {
	g := openForTest(t)
	page := os.Getpagesize()
	backing := randBytes(3*page, 4)
	data := backing[100 : 100+page+400] // neither starts nor ends on a page
	v1, off1, err := g.Wrap(data)
	if err != nil {
		t.Fatal(err)
	}
	v2, off2, err := g.Wrap(data)
	if err != nil {
		t.Fatal(err)
	}
	if v1 == v2 {
		t.Error("two Wraps of the same data returned the same view")
	}
	start := uintptr(unsafe.Pointer(&data[0]))
	if off1 != off2 || off1 != int(start%uintptr(page)) {
		t.Errorf("offsets %d, %d; want %d", off1, off2, start%uintptr(page))
	}
	if v1.Len()%page != 0 || v1.Len() < off1+len(data) {
		t.Errorf("view length %d for %d bytes at %d (page %d)", v1.Len(), len(data), off1, page)
	}
	got := make([]byte, len(data))
	if err := g.Read(v1, off1, got); err != nil || string(got) != string(data) {
		t.Errorf("Read through the view: %v, equal %t", err, string(got) == string(data))
	}
	n := len(data) / 4
	zero, _ := g.Upload(make([]byte, len(data)))
	y, _ := g.NewBuffer(len(data))
	if err := addKernel(g, v2, zero, y, off2, n); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Read(y, 0, got); err != nil || string(got[:4*n]) != string(data[:4*n]) {
		t.Errorf("the kernel read the view at the wrong offset (err %v)", err)
	}
	if _, _, err := g.Wrap(nil); err == nil {
		t.Error("Wrap of no bytes succeeded")
	}
}

// TestReopen closes an open and opens the device again: the same work
// gives the same answer, and the closed open refuses to be used.
func TestReopen(t *testing.T) {
	a := randBytes(4096, 5)
	var results [2][]byte
	var first *metalGPU
	for i := range results {
		g, err := openGPU()
		if err != nil {
			t.Fatalf("open %d: %v", i+1, err)
		}
		if i == 0 {
			first = g
		}
		results[i] = chain(t, g, a, 5, 2)
		if err := g.Close(); err != nil {
			t.Fatalf("close %d: %v", i+1, err)
		}
	}
	if string(results[0]) != string(results[1]) {
		t.Error("the second open computed something else")
	}
	checkChain(t, a, results[1], 5)
	if err := first.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := first.NewBuffer(16); !errors.Is(err, errClosed) {
		t.Errorf("NewBuffer after Close: %v", err)
	}
	if err := first.Commit(); !errors.Is(err, errClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	// Backend level: open, close, open.
	for range 2 {
		b, err := New()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEncodeErrors: launches the device cannot run fail at Dispatch or
// Commit with the kernel's name, and the device stays usable.
func TestEncodeErrors(t *testing.T) {
	g := openForTest(t)
	buf, _ := g.NewBuffer(1024)
	err := g.Dispatch(&dispatch{Kernel: "no_such_kernel", Grid: [3]int{1, 1, 1}, Group: [3]int{32, 1, 1}, Bufs: []arg{{Index: 1, Buf: buf}}})
	if err == nil {
		err = g.Commit()
	}
	if err == nil || !strings.Contains(err.Error(), "no_such_kernel") {
		t.Errorf("unknown kernel: %v", err)
	}
	if err := g.Dispatch(&dispatch{Kernel: "add_f32", Grid: [3]int{1, 1, 1}, Group: [3]int{2048, 1, 1}}); err == nil || !strings.Contains(err.Error(), "add_f32") {
		t.Errorf("2048 threads per threadgroup: %v", err)
	}
	if err := g.Dispatch(&dispatch{Kernel: "add_f32", Grid: [3]int{1, 1, 1}, Group: [3]int{32, 1, 1}, Bufs: []arg{{Index: 1, Buf: buf, Off: 2048}}}); err == nil {
		t.Error("an offset past the buffer's end was accepted")
	}
	a := randBytes(256, 6)
	checkChain(t, a, chain(t, g, a, 3, 1), 3)
}

// BenchmarkEncode measures the host cost of a batch: Dispatch of every
// launch and one Commit (encoding), without waiting for the GPU each time.
func BenchmarkEncode(b *testing.B) {
	g := openForTest(b)
	a := randBytes(1024, 7)
	x, _ := g.Upload(a)
	y, _ := g.NewBuffer(len(a))
	const launches = 256
	for b.Loop() {
		for range launches {
			if err := addKernel(g, x, x, y, 0, 256); err != nil {
				b.Fatal(err)
			}
		}
		if err := g.Commit(); err != nil {
			b.Fatal(err)
		}
		if err := g.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*launches), "ns/dispatch")
}

func benchMatMul(b *testing.B, typ quant.Type, tokens, n, k int) {
	be := newForTest(b)
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, n*k)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	rb, _ := quant.RowBytes(typ, k)
	data := make([]byte, n*rb)
	for r := 0; r < n; r++ {
		quant.Quantize(typ, data[r*rb:(r+1)*rb], v[r*k:(r+1)*k], nil)
	}
	w, err := be.Weight(&weights.Tensor{Name: "bench", Type: typ, Shape: []int{n, k}, Data: data})
	if err != nil {
		b.Fatal(err)
	}
	x, _ := be.Upload(make([]float32, tokens*k), tokens, k)
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		y, err := be.MatMul(x, w)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := be.Read(ctx, y); err != nil {
			b.Fatal(err)
		}
		be.Free(y)
	}
	b.ReportMetric(2*float64(tokens*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
}

func BenchmarkMulMvQ4K(b *testing.B) { benchMatMul(b, quant.Q4_K, 1, 4096, 4096) }
func BenchmarkMulMmQ4K(b *testing.B) { benchMatMul(b, quant.Q4_K, 512, 4096, 4096) }
func BenchmarkMulMmQ8(b *testing.B)  { benchMatMul(b, quant.Q8_0, 512, 4096, 4096) }
func BenchmarkMulMmF16(b *testing.B) { benchMatMul(b, quant.F16, 512, 4096, 4096) }
