package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/model/qwen3moe"
)

// spyBackend is the CPU backend that cancels a decision when a chosen op
// is first called, and counts the ops that still ran to completion after.
type spyBackend struct {
	*cpu.Backend
	cancelAt  string // op name
	cancel    context.CancelFunc
	cancelled atomic.Bool
	after     atomic.Int64 // ops that completed after the cancel
	names     []string     // their names, for the failure message
}

var lastSpy *spyBackend

func init() {
	backend.Register("cancel-spy", func(o backend.Options) (backend.Backend, error) {
		lastSpy = &spyBackend{Backend: cpu.New(o)}
		return lastSpy, nil
	})
}

func (s *spyBackend) op(name string, run func() (*backend.Tensor, error)) (*backend.Tensor, error) {
	if name == s.cancelAt && s.cancel != nil && !s.cancelled.Load() {
		s.cancel()
		s.cancelled.Store(true)
	}
	t, err := run()
	if err == nil && s.cancelled.Load() {
		s.after.Add(1)
		s.names = append(s.names, name)
	}
	return t, err
}

func (s *spyBackend) MatMul(x, w *backend.Tensor) (*backend.Tensor, error) {
	return s.op("MatMul", func() (*backend.Tensor, error) { return s.Backend.MatMul(x, w) })
}

func (s *spyBackend) Attention(q, k, v *backend.Tensor, o backend.AttentionOptions) (*backend.Tensor, error) {
	return s.op("Attention", func() (*backend.Tensor, error) { return s.Backend.Attention(q, k, v, o) })
}

func (s *spyBackend) RMSNorm(x, w *backend.Tensor, eps float32) (*backend.Tensor, error) {
	return s.op("RMSNorm", func() (*backend.Tensor, error) { return s.Backend.RMSNorm(x, w, eps) })
}

func (s *spyBackend) LayerNorm(x, w, b *backend.Tensor, eps float32) (*backend.Tensor, error) {
	return s.op("LayerNorm", func() (*backend.Tensor, error) { return s.Backend.LayerNorm(x, w, b, eps) })
}

func (s *spyBackend) MoE(x, ids, w *backend.Tensor, ex backend.Experts) (*backend.Tensor, error) {
	return s.op("MoE", func() (*backend.Tensor, error) { return s.Backend.MoE(x, ids, w, ex) })
}

func (s *spyBackend) Add(a, b *backend.Tensor) (*backend.Tensor, error) {
	return s.op("Add", func() (*backend.Tensor, error) { return s.Backend.Add(a, b) })
}

// A cancelled decision stops inside the op that sees the cancel, in the
// thinker (mid-layer, mid-chunk) and in the joint head alike: no op
// completes after it. The thinker used to finish its layer (every row
// chunk) and the head ignored cancellation altogether.
func TestCancelStopsWithinAnOp(t *testing.T) {
	state := strings.Repeat("the quick brown fox jumps over the lazy dog ", 60)
	for _, at := range []string{"Attention", "MoE", "LayerNorm"} { // LayerNorm: the head's first op
		t.Run(at, func(t *testing.T) {
			e := open(t, "release", Options{Backend: "cancel-spy"})
			spy := lastSpy
			req := prefixRequest(t, state, 0)
			p, err := e.Prepare(req)
			if err != nil {
				t.Fatal(err)
			}
			if n := p.Tokens(); n <= 2*qwen3moe.DefaultChunk || e.decoder.Chunk != 0 {
				t.Fatalf("record of %d tokens: want several row chunks of %d", n, qwen3moe.DefaultChunk)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			spy.cancelAt, spy.cancel = at, cancel
			_, _, err = e.DecidePrepared(ctx, p)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("decision cancelled at %s: %v, want an error wrapping context.Canceled", at, err)
			}
			if !spy.cancelled.Load() {
				t.Fatalf("the decision never reached %s", at)
			}
			if n := spy.after.Load(); n != 0 {
				t.Errorf("%d ops completed after the cancel at %s: %v", n, at, spy.names)
			}
			// The engine measured the cancelled work as a lower bound.
			if _, basis, ok := e.Estimate(p); !ok || !strings.Contains(basis, "stopped") {
				t.Errorf("no estimate from the cancelled decision (%v, %q)", ok, basis)
			}
			// The backend's interrupt is gone with the decision: the next
			// one runs.
			spy.cancelAt = ""
			if _, _, err := e.Decide(context.Background(), req); err != nil {
				t.Fatalf("decision after a cancelled one: %v", err)
			}
		})
	}
}

func TestSpeedEstimate(t *testing.T) {
	var s speed
	t0 := time.Unix(1e9, 0)
	if _, _, ok := s.estimate(1000, t0); ok {
		t.Fatal("estimate without a measurement")
	}
	s.observe(1000, time.Second, 1, t0)
	for _, c := range []struct {
		tokens int
		want   time.Duration
		ok     bool
	}{
		{1000, time.Second, true},
		{1500, 1500 * time.Millisecond, true}, // linear up to twice the length
		{2000, 2 * time.Second, true},
		{2001, 0, false},                    // past twice: no bound
		{500, 250 * time.Millisecond, true}, // quadratic below
	} {
		d, _, ok := s.estimate(c.tokens, t0)
		if ok != c.ok || (ok && d.Round(time.Millisecond) != c.want) {
			t.Errorf("estimate(%d) = %v %v, want %v %v", c.tokens, d, ok, c.want, c.ok)
		}
	}
	// A decision stopped after 2s with 10% of its row chunks done took at
	// least 20s; a weaker bound of the same length range does not replace
	// it, a stale one is not used.
	s.observe(64000, 2*time.Second, 0.1, t0)
	s.observe(60000, time.Second, 0.5, t0)
	d, basis, ok := s.estimate(64000, t0)
	if !ok || d != 20*time.Second || !strings.Contains(basis, "stopped after 2s with 10.0%") {
		t.Errorf("estimate(64000) = %v %q %v, want 20s from the stopped decision", d, basis, ok)
	}
	if _, _, ok := s.estimate(64000, t0.Add(speedTTL+time.Second)); ok {
		t.Error("a stale measurement is used")
	}
	// A finished measurement replaces a finished one (the machine got faster).
	s.observe(1000, 100*time.Millisecond, 1, t0)
	if d, _, _ := s.estimate(1000, t0); d != 100*time.Millisecond {
		t.Errorf("estimate(1000) after a faster run = %v", d)
	}
}
