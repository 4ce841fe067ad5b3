package qwen3moe

import (
	"context"
	"fmt"

	"github.com/clefrt/clef/engine/backend"
)

// EmbedTokens returns the decoder's input embedding rows of ids,
// [len(ids) * hidden] row-major on the host: what Forward starts from for
// text (spec §7 step 1), for a caller that merges media rows into them and
// passes the result as Input.Embeds.
func (m *Model) EmbedTokens(ctx context.Context, ids []int) ([]float32, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("qwen3moe: no tokens to embed")
	}
	x, err := m.b.Embed(m.embed, ids) // [L, hidden]
	if err != nil {
		return nil, fmt.Errorf("qwen3moe: %w", err)
	}
	defer m.b.Free(x)
	v, err := m.b.Read(ctx, x)
	if err != nil {
		return nil, fmt.Errorf("qwen3moe: %w", err)
	}
	return v, nil
}

// Backend is the backend the model is bound to: media towers whose rows
// go into its input run on it too.
func (m *Model) Backend() backend.Backend { return m.b }
