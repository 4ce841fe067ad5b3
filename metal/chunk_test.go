package metal

import (
	"testing"

	"github.com/clefrt/clef/engine/backend"
)

// TestChunkRowsSplitsNothing: the backend asks for ChunkRows-row chunks
// (backend.ChunkSizer), and at that many rows of the thinker (hidden 2048,
// 32 heads x 128, 128 experts top-8 of 768, q4_K) no launch of a chunk
// needs splitting on the cost model's conservative chip: the largest, a
// gathered gate or up projection (moeCost), and the query projection stay
// under opSeconds, as ChunkRows' comment says (a 64k-token MoE without
// chunks, 32 times as many rows, would be split).
func TestChunkRowsSplitsNothing(t *testing.T) {
	var b backend.Backend = &Backend{}
	cs, ok := b.(backend.ChunkSizer)
	if !ok || cs.PreferredChunkRows() != ChunkRows {
		t.Fatalf("the backend does not ask for %d-row chunks", ChunkRows)
	}
	const hidden, ffn, heads, headDim, experts, topK = 2048, 768, 32, 128, 128, 8
	q4K := func(cols int) int { return cols / 256 * 144 }
	gate := &tensor{rows: ffn, cols: hidden, rowBytes: q4K(hidden), experts: experts}
	down := &tensor{rows: hidden, cols: ffn, rowBytes: q4K(ffn), experts: experts}
	for _, c := range []struct {
		what string
		cost cost
	}{
		{"gathered gate", moeCost(gate, ChunkRows, topK, experts)},
		{"gathered down", moeCost(down, ChunkRows, topK, experts)},
		{"q projection", matmulCost(heads*headDim, ChunkRows, hidden, q4K(hidden), 0)},
	} {
		if s := c.cost.seconds(); s > opSeconds {
			t.Errorf("%s at %d rows: %.3f s on the conservative chip, over opSeconds (%.1f s): the chunk would split it", c.what, ChunkRows, s, opSeconds)
		}
	}
	if s := moeCost(gate, 32*ChunkRows, topK, experts).seconds(); s <= opSeconds {
		t.Errorf("gathered gate at %d rows: %.3f s, under opSeconds: the bound above checks nothing", 32*ChunkRows, s)
	}
}
