package qwen3moe

import (
	"context"
	"fmt"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
)

// sizedBackend is a chunking backend that states a preferred chunk size.
type sizedBackend struct {
	backend.Backend
	backend.RowChunker
	rows int
}

func (s sizedBackend) PreferredChunkRows() int { return s.rows }

// TestChunkFromBackend: with no Chunk set the layers run in the chunks the
// backend prefers (backend.ChunkSizer), DefaultChunk when it states none
// or a non-positive one, and an explicit Chunk wins; the hidden states are
// those of the unchunked run either way. The CPU backend states no
// preference (it keeps DefaultChunk).
func TestChunkFromBackend(t *testing.T) {
	if _, ok := any(cpu.New(backend.Options{Threads: 1})).(backend.ChunkSizer); ok {
		t.Fatal("the CPU backend states a chunk size: its chunks (DefaultChunk) would change")
	}
	ctx := context.Background()
	ids := textIDs(t, "text_len40")
	L := len(ids)
	m := openOmni(t, 2)
	cb := m.b
	full, err := m.Hidden(ctx, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct{ prefer, chunk, want int }{
		{7, 0, 7}, {16, 0, 16}, {0, 0, L}, {-3, 0, L}, {7, 16, 16}, {100, 0, L},
	} {
		t.Run(fmt.Sprintf("prefer=%d/chunk=%d", run.prefer, run.chunk), func(t *testing.T) {
			m.b = sizedBackend{cb, cb.(backend.RowChunker), run.prefer}
			m.Chunk = run.chunk
			defer func() { m.b, m.Chunk = cb, 0 }()
			var total int
			out, err := m.Forward(ctx, Input{IDs: ids, Progress: func(_, n int) { total = n }}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.b.Free(out)
			if want := m.Config.Layers * ((L + run.want - 1) / run.want); total != want {
				t.Errorf("%d row chunks in all, want %d (%d layers of %d rows in chunks of %d)", total, want, m.Config.Layers, L, run.want)
			}
			h, err := m.b.Read(ctx, out)
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := relErr(h, full); r > 1e-6 {
				t.Errorf("chunked hidden states differ from the whole run's: rel %g", r)
			}
		})
	}
}
