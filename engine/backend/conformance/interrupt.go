package conformance

import (
	"context"
	"errors"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/quant"
)

// testInterrupt checks the optional backend.Interruptible: with an
// interrupt whose context is done, the long ops fail with an error
// wrapping the context's error; with a live one, and after restore, they
// give the same bits as without one.
func testInterrupt(s *suite) {
	ib, ok := s.b.(backend.Interruptible)
	if !ok {
		s.t.Skip("backend does not implement backend.Interruptible")
	}
	L, nh, nkv, d, hidden, n := 150, 8, 2, 32, 64, 96
	q, k, v := s.upload(s.randn(L*nh*d, 1), L, nh*d), s.upload(s.randn(L*nkv*d, 1), L, nkv*d), s.upload(s.randn(L*nkv*d, 1), L, nkv*d)
	x := s.upload(s.randn(L*hidden, 1), L, hidden)
	wf, _ := s.weight("w", quant.F32, s.randn(n*hidden, 0.1), n, hidden)
	wq, _ := s.weight("wq", quant.Q8_0, s.randn(n*hidden, 0.1), n, hidden)
	norm, _ := s.weight("norm", quant.F32, s.randn(hidden, 1), 1, hidden)
	ops := []struct {
		name string
		run  func() (*backend.Tensor, error)
	}{
		{"Attention", func() (*backend.Tensor, error) {
			return s.b.Attention(q, k, v, backend.AttentionOptions{Heads: nh, KVHeads: nkv, Scale: 0.2, Causal: true})
		}},
		{"MatMul F32", func() (*backend.Tensor, error) { return s.b.MatMul(x, wf) }},
		{"MatMul Q8_0", func() (*backend.Tensor, error) { return s.b.MatMul(x, wq) }},
		{"RMSNorm", func() (*backend.Tensor, error) { return s.b.RMSNorm(x, norm, 1e-6) }},
		{"LayerNorm", func() (*backend.Tensor, error) { return s.b.LayerNorm(x, norm, nil, 1e-5) }},
		{"Softmax", func() (*backend.Tensor, error) { return s.b.Softmax(x, 1, nil) }},
	}
	want := make([][]float32, len(ops))
	for i, op := range ops {
		t, err := op.run()
		if err != nil {
			s.t.Fatalf("%s: %v", op.name, err)
		}
		want[i] = s.read(t)
	}
	same := func(when string) {
		for i, op := range ops {
			t, err := op.run()
			if err != nil {
				s.t.Fatalf("%s %s: %v", op.name, when, err)
			}
			got := s.read(t)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[i][j]) {
					s.t.Errorf("%s %s: value %d is %g, %g without an interrupt", op.name, when, j, got[j], want[i][j])
					break
				}
			}
		}
	}

	live, cancelLive := context.WithCancel(context.Background())
	defer cancelLive()
	restore := ib.Interrupt(live)
	same("with a live interrupt")
	restore()

	done, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("cancelled by the conformance suite")
	cancel(cause)
	restore = ib.Interrupt(done)
	for _, op := range ops {
		t, err := op.run()
		if err == nil {
			// A backend that records ops may report the error at the
			// Read at the latest.
			_, err = s.b.Read(done, t)
		}
		if !errors.Is(err, context.Canceled) {
			s.t.Errorf("%s with a done interrupt: %v, want an error wrapping context.Canceled", op.name, err)
		}
	}
	restore()
	same("after restore")

	// Interrupts nest: restore brings back the one before.
	outer := ib.Interrupt(done)
	inner := ib.Interrupt(live)
	inner()
	if _, err := ops[0].run(); !errors.Is(err, context.Canceled) {
		s.t.Errorf("after restoring an inner interrupt: %v, want the outer one's error", err)
	}
	outer()
	same("after restoring both")
}
