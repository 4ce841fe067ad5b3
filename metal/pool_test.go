package metal

import (
	"errors"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// TestPoolReuseAndTrim: released activations are reused by size class,
// the cache is bounded (least recently released trimmed first), and every
// byte (weights, uploads, activations, cache) is in Stats.
func TestPoolReuseAndTrim(t *testing.T) {
	g := newFakeGPU()
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	b.pool.cacheLimit = 3 << 20
	x, _ := b.Upload(make([]float32, 1<<18), 256, 1024) // 1 MiB upload
	var ys []*tensorRef
	for range 4 {
		y, err := b.Add(x, x)
		if err != nil {
			t.Fatal(err)
		}
		ys = append(ys, &tensorRef{y})
	}
	if g.news != 4 {
		t.Fatalf("%d buffers made for 4 live activations", g.news)
	}
	for _, y := range ys {
		b.Free(y.t)
	}
	s := b.Stats()
	if s.CachedBytes != 3<<20 || s.LiveBytes != 1<<20 || s.PeakBytes != 5<<20 {
		t.Errorf("after freeing: cached %d, live %d, peak %d; want 3 MiB (bounded), 1 MiB (the upload), 5 MiB", s.CachedBytes, s.LiveBytes, s.PeakBytes)
	}
	if len(g.live) != 4 {
		t.Errorf("%d buffers live on the device, want 4 (the upload, three cached)", len(g.live))
	}
	for range 3 {
		if _, err := b.Add(x, x); err != nil {
			t.Fatal(err)
		}
	}
	if g.news != 4 {
		t.Errorf("three more activations made %d new buffers, want none (reused)", g.news-4)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if len(g.live) != 0 || len(g.misuse) > 0 {
		t.Errorf("after Close: %d buffers live, misuse %v", len(g.live), g.misuse)
	}
	if s := b.Stats(); s.LiveBytes != 0 || s.CachedBytes != 0 || s.WeightBytes != 0 || s.Buffers != 0 {
		t.Errorf("after Close: stats %+v", s)
	}
}

type tensorRef struct{ t *backend.Tensor }

// TestWorkingSetBound: with a working set of 8 MiB, weights and
// activations that fit are made (the cache trimmed to make room), one that
// would not fit fails before reaching the GPU with an error that says how
// much, what holds the memory and what to do; a model larger than the
// working set fails at Weight.
func TestWorkingSetBound(t *testing.T) {
	g := newFakeGPU()
	g.workingSet = 8 << 20
	b, err := newBackend(g, "fake")
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Weight(&weights.Tensor{Name: "blk.0.w", Type: quant.F32, Shape: []int{1024, 1024}, Data: make([]byte, 4<<20)})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := b.Upload(make([]float32, 1<<18), 256, 1024) // 1 MiB
	y, err := b.MatMul(x, w)                            // 1 MiB
	if err != nil {
		t.Fatal(err)
	}
	b.Free(y) // cached
	// 2 MiB: fits only once the cached 1 MiB is trimmed.
	big, _ := b.Upload(make([]float32, 1<<19), 512, 1024)
	_, err = b.Add(big, big)
	if err == nil {
		t.Fatalf("a 2 MiB activation fit beside 4 MiB of weights, 1+2 MiB of uploads: stats %+v", b.Stats())
	}
	var me *MemoryError
	if !errors.As(err, &me) {
		t.Fatalf("error %v is not a MemoryError", err)
	}
	for _, want := range []string{"[512 1024] float32 activation", "needs 2.0 MiB", "keep 8.0 MiB", "weights 4.0 MiB, activations 3.0 MiB",
		"recommendedMaxWorkingSetSize", "shorter input", "--backend cpu", "iogpu.wired_limit_mb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if me.Cached != 0 || me.Weights != 4<<20 || me.Live != 3<<20 || me.Need != 2<<20 {
		t.Errorf("error accounting: %+v", me)
	}
	b.Free(x)
	if _, err := b.Add(big, big); err != nil {
		t.Fatalf("after freeing 1 MiB: %v", err)
	}
	if s := b.Stats(); s.PeakBytes > 8<<20 {
		t.Errorf("peak %d over the working set", s.PeakBytes)
	}
	_, err = b.Weight(&weights.Tensor{Name: "blk.1.w", Type: quant.F32, Shape: []int{512, 1024}, Data: make([]byte, 2<<20)})
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "blk.1.w") || !strings.Contains(err.Error(), "smaller quantization") {
		t.Errorf("a weight past the working set: %v", err)
	}
}

// TestMLXStackViews: an MLX stack of experts binds its scales and biases as
// one view each, shared by the experts, also when the weights themselves
// are too large for one buffer and are bound expert by expert (before,
// that path made a scale view and a bias view per expert, copied when
// small: 36,864 buffers for the 30B-A3B thinker).
func TestMLXStackViews(t *testing.T) {
	const E, rows, cols, gs = 8, 64, 256, 64
	data := make([]byte, E*rows*cols/2)
	scales := &weights.Tensor{Name: "s", Type: quant.BF16, Shape: []int{E, rows, cols / gs}, Data: make([]byte, E*rows*cols/gs*2)}
	biases := &weights.Tensor{Name: "b", Type: quant.BF16, Shape: []int{E, rows, cols / gs}, Data: make([]byte, E*rows*cols/gs*2)}
	for _, c := range []struct {
		what  string
		limit int
		views int
	}{{"one view", 0, 3}, {"expert by expert", rows * cols, E + 2}} {
		b, g := newCounting(t, c.limit)
		wt, err := b.Weight(&weights.Tensor{Name: "switch_mlp.gate_proj.weight", Type: quant.MLXAffine4, Shape: []int{E, rows, cols},
			Data: data, Scales: scales, Biases: biases, GroupSize: gs})
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		want := int64(len(data) + len(scales.Data) + len(biases.Data))
		if g.wraps != c.views || g.uploads != 0 || b.Stats().WeightBytes != want {
			t.Errorf("%s: %d views, %d copies, %d bytes; want %d views, no copies, %d bytes", c.what, g.wraps, g.uploads, b.Stats().WeightBytes, c.views, want)
		}
		h := wt.Handle.(*tensor)
		for e, p := range h.parts {
			if p.sBuf != h.sBuf || p.sOff != h.sOff+e*h.sStride || p.bBuf != h.bBuf || p.bOff != h.bOff+e*h.sStride {
				t.Errorf("%s: expert %d's scales are not the stack's at its stride", c.what, e)
			}
		}
	}
}
