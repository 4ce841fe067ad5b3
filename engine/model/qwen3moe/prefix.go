package qwen3moe

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/clefrt/clef/engine/backend"
)

// Prefix is the stored state of the first Len positions of a sequence: the
// keys and values every layer's attention consumed for them (keys after the
// k-norm and RoPE) and their final normed hidden rows. Causal attention
// makes them independent of what follows, so a sequence that starts with
// the same tokens can resume after them (Input.Past) and compute only its
// own rows. It is never modified once returned.
//
// A Prefix from HiddenPrefix keeps K, V and Hidden in one block of host
// memory outside the Go heap (on Linux and macOS), sized exactly, so that
// what Bytes reports is what it costs: whoever keeps it (a prefix cache)
// calls Release when it drops it, and a user that reads it meanwhile
// brackets the reads with Acquire and Release. The block is also returned
// when the Prefix becomes unreachable without a Release. K, V and Hidden
// are valid while the Prefix is held: copy what must outlive it. A Prefix
// built by hand (a literal) lives on the Go heap; Acquire and Release do
// nothing to it.
type Prefix struct {
	Len    int
	K, V   [][]float32 // per layer [Len * kv_heads*head_dim]
	Hidden []float32   // [Len * hidden]

	mem *hostMem // the block K, V and Hidden live in; nil for a literal
}

// hostMem is a Prefix's block of host memory, reference counted: the
// keeper's reference (from HiddenPrefix), plus one per Acquire.
type hostMem struct {
	refs  atomic.Int64
	bytes int64 // mapped, a whole number of pages
	once  sync.Once
	unmap func()
}

// free returns the block (once, whichever of Release and the collector's
// cleanup comes first).
func (h *hostMem) free() { h.once.Do(h.unmap) }

// Acquire takes a reference for reading the prefix, released with
// Release. It reports false when the prefix was already released (a
// cache evicted it after handing it out): it must not be read then.
func (p *Prefix) Acquire() bool {
	if p == nil {
		return false
	}
	if p.mem == nil {
		return true
	}
	for {
		n := p.mem.refs.Load()
		if n <= 0 {
			return false
		}
		if p.mem.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release drops a reference (the keeper's, or one from Acquire); the
// memory is returned with the last one. It implements the server prefix
// cache's Releaser.
func (p *Prefix) Release() {
	if p == nil || p.mem == nil {
		return
	}
	if p.mem.refs.Add(-1) == 0 {
		p.mem.free()
	}
}

// pageSize rounds host blocks: a mapping costs whole pages.
var pageSize = int64(os.Getpagesize())

// hostBytes is the size of a block of n float32: whole pages.
func hostBytes(n int) int64 {
	b := int64(n) * 4
	return (b + pageSize - 1) / pageSize * pageSize
}

// prefixOverhead is what a Prefix of the given layer count holds besides
// its block: the Prefix and hostMem structs, and the two slices of
// per-layer slice headers.
func prefixOverhead(layers int) int64 {
	return int64(unsafe.Sizeof(Prefix{})+unsafe.Sizeof(hostMem{})) + 2*int64(layers)*int64(unsafe.Sizeof([]float32(nil)))
}

// Bytes is the memory the prefix holds: its block (whole pages; for a
// literal, the capacity of its slices) and the headers around it.
func (p *Prefix) Bytes() int64 {
	n := prefixOverhead(len(p.K))
	if p.mem != nil {
		return n + p.mem.bytes
	}
	floats := cap(p.Hidden)
	for l := range p.K {
		floats += cap(p.K[l])
	}
	for l := range p.V {
		floats += cap(p.V[l])
	}
	return n + int64(floats)*4
}

// PrefixBytes is what Bytes reports for a Prefix of n positions of this
// model made by HiddenPrefix.
func (m *Model) PrefixBytes(n int) int64 {
	return prefixOverhead(m.Config.Layers) + hostBytes(n*m.prefixFloats())
}

// prefixFloats is the float32 count of one position of a prefix: a key
// and a value row per layer, and a hidden row.
func (m *Model) prefixFloats() int {
	c := m.Config
	return 2*c.Layers*c.KVHeads*c.HeadDim + c.Hidden
}

// newPrefix returns an empty prefix of n positions in one block of host
// memory: K, V and Hidden are exact-size slices of it, filled by the
// forward pass.
func (m *Model) newPrefix(n int) *Prefix {
	c := m.Config
	kv := c.KVHeads * c.HeadDim
	f, bytes, unmap := mapFloats(n * m.prefixFloats())
	p := &Prefix{Len: n, K: make([][]float32, c.Layers), V: make([][]float32, c.Layers), mem: &hostMem{bytes: bytes, unmap: unmap}}
	p.mem.refs.Store(1)
	take := func(k int) []float32 {
		s := f[:k:k]
		f = f[k:]
		return s
	}
	for l := range p.K {
		p.K[l], p.V[l] = take(n*kv), take(n*kv)
	}
	p.Hidden = take(n * c.Hidden)
	runtime.AddCleanup(p, (*hostMem).free, p.mem)
	return p
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
// the first save rows of in as a new Prefix (nil when save is 0), which the
// caller owns (see Prefix: Release it when dropping it). hidden holds the
// final normed rows of in's own positions, [rows * hidden]; with in.Past
// the prefix's rows are not included (they are in.Past.Hidden).
func (m *Model) HiddenPrefix(ctx context.Context, in Input, save int) (hidden []float32, saved *Prefix, err error) {
	if save < 0 {
		return nil, nil, fmt.Errorf("qwen3moe: cannot keep a prefix of %d rows", save)
	}
	var sp *Prefix
	if save > 0 {
		L := len(in.IDs)
		if in.Embeds != nil && L == 0 {
			L = len(in.Embeds) / m.Config.Hidden
		}
		if save > L {
			return nil, nil, fmt.Errorf("qwen3moe: cannot keep a prefix of %d rows of %d", save, L)
		}
		sp = m.newPrefix(save)
		defer func() {
			if err != nil {
				sp.Release()
			}
		}()
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
		copy(sp.Hidden, hidden[:save*m.Config.Hidden])
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

// readRows copies rows [0, len(dst)/cols) of t into dst on the host.
func (m *Model) readRows(ctx context.Context, rc backend.RowChunker, t *backend.Tensor, dst []float32) error {
	n := len(dst) / max(1, t.Cols())
	src := t
	if n != t.Rows() {
		r, err := rc.Rows(t, 0, n)
		if err != nil {
			return err
		}
		defer m.b.Free(r)
		src = r
	}
	v, err := m.b.Read(ctx, src)
	if err != nil {
		return err
	}
	if len(v) != len(dst) {
		return fmt.Errorf("qwen3moe: read %d values for a prefix of %d", len(v), len(dst))
	}
	copy(dst, v)
	return nil
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
