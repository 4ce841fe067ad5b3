package qwen3moe

import (
	"context"
	"fmt"

	"github.com/clefrt/clef/engine/backend"
)

// Prefix is the stored state of the first Len positions of a sequence: the
// keys and values every layer's attention consumed for them (keys after the
// k-norm and RoPE) and their final normed hidden rows. Causal attention
// makes them independent of what follows, so a sequence that starts with
// the same tokens can resume after them (Input.Past) and compute only its
// own rows. It lives in host memory as plain float32 slices, owned by
// whoever keeps it (a prefix cache); it is never modified once returned.
type Prefix struct {
	Len    int
	K, V   [][]float32 // per layer [Len * kv_heads*head_dim]
	Hidden []float32   // [Len * hidden]
}

// Bytes is the memory the prefix holds.
func (p *Prefix) Bytes() int64 {
	n := len(p.Hidden)
	for l := range p.K {
		n += len(p.K[l]) + len(p.V[l])
	}
	return int64(n) * 4
}

// PrefixBytes is what Bytes reports for a Prefix of n positions of this model.
func (m *Model) PrefixBytes(n int) int64 {
	c := m.Config
	return int64(n) * int64(2*c.Layers*c.KVHeads*c.HeadDim+c.Hidden) * 4
}

// CanResume reports whether the model's backend can keep and resume from
// stored prefixes (it implements backend.RowChunker).
func (m *Model) CanResume() bool { return m.chunks() }

func (m *Model) chunks() bool {
	_, ok := m.b.(backend.RowChunker)
	return ok
}

// HiddenPrefix is Hidden for in (IDs, or Embeds, with their Positions) that
// may resume after a stored prefix in.Past, and that keeps, when save > 0,
// the first save rows of in as a new Prefix (nil when save is 0). hidden
// holds the final normed rows of in's own positions, [rows * hidden]; with
// in.Past the prefix's rows are not included (they are in.Past.Hidden).
func (m *Model) HiddenPrefix(ctx context.Context, in Input, save int) (hidden []float32, saved *Prefix, err error) {
	if save < 0 {
		return nil, nil, fmt.Errorf("qwen3moe: cannot keep a prefix of %d rows", save)
	}
	var sp *Prefix
	if save > 0 {
		sp = &Prefix{Len: save, K: make([][]float32, m.Config.Layers), V: make([][]float32, m.Config.Layers)}
	}
	out, err := m.forward(ctx, in, nil, sp)
	if err != nil {
		return nil, nil, err
	}
	defer m.b.Free(out)
	hidden, err = m.b.Read(ctx, out)
	if err != nil {
		return nil, nil, fmt.Errorf("qwen3moe: %w", err)
	}
	if sp != nil {
		sp.Hidden = append([]float32(nil), hidden[:save*m.Config.Hidden]...)
	}
	return hidden, sp, nil
}

// checkPast checks that a stored prefix has this model's shape.
func (m *Model) checkPast(p *Prefix) error {
	c := m.Config
	kv := c.KVHeads * c.HeadDim
	if p.Len <= 0 || len(p.K) != c.Layers || len(p.V) != c.Layers || len(p.Hidden) != p.Len*c.Hidden {
		return fmt.Errorf("qwen3moe: stored prefix of %d rows has %d/%d layers and %d hidden values: not from this model (%d layers, hidden %d)",
			p.Len, len(p.K), len(p.V), len(p.Hidden), c.Layers, c.Hidden)
	}
	for l := range p.K {
		if len(p.K[l]) != p.Len*kv || len(p.V[l]) != p.Len*kv {
			return fmt.Errorf("qwen3moe: stored prefix layer %d has %d keys and %d values, want %d rows of %d", l, len(p.K[l]), len(p.V[l]), p.Len, kv)
		}
	}
	return nil
}

// readRows copies rows [0, n) of t to the host.
func (m *Model) readRows(ctx context.Context, rc backend.RowChunker, t *backend.Tensor, n int) ([]float32, error) {
	if n == t.Rows() {
		return m.b.Read(ctx, t)
	}
	r, err := rc.Rows(t, 0, n)
	if err != nil {
		return nil, err
	}
	defer m.b.Free(r)
	return m.b.Read(ctx, r)
}

// prepend returns the rows of a stored prefix (host) followed by the rows
// of t, and frees t.
func (m *Model) prepend(rc backend.RowChunker, host []float32, t *backend.Tensor) (*backend.Tensor, error) {
	b := m.b
	defer b.Free(t)
	p, err := b.Upload(host, len(host)/t.Cols(), t.Cols()) // [off, cols]
	if err != nil {
		return nil, err
	}
	defer b.Free(p)
	return rc.Concat(p, t) // [off+rows, cols]
}
