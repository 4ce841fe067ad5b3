// Package qwen3moe is the thinker's text decoder (Qwen3-MoE), written once
// against backend.Backend: weight binding over the decoder's tensor table
// (release.DecoderTensors, configuration release.Text) and the forward pass,
// top to bottom in the spec's order, in this file; stored prefixes in
// prefix.go. It never imports a backend implementation.
package qwen3moe

import (
	"context"
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// Model is the thinker's text decoder bound to one backend.
type Model struct {
	Config release.Text
	// Chunk is the number of rows a layer runs at a time on a backend that
	// implements backend.RowChunker; 0 means the backend's preference
	// (backend.ChunkSizer), else DefaultChunk.
	Chunk int
	b     backend.Backend

	embed  *backend.Tensor // embed_tokens.weight [vocab, hidden]
	layers []layer
	norm   *backend.Tensor // norm.weight [hidden]
	rope   backend.RoPE    // the (M-)RoPE table of rope_theta and mrope_section
}

// layer holds one decoder layer's weights (names after thinker.model.layers.N.).
type layer struct {
	inputNorm *backend.Tensor // input_layernorm.weight [hidden]
	q         *backend.Tensor // self_attn.q_proj.weight [heads*head_dim, hidden]
	k         *backend.Tensor // self_attn.k_proj.weight [kv_heads*head_dim, hidden]
	v         *backend.Tensor // self_attn.v_proj.weight [kv_heads*head_dim, hidden]
	o         *backend.Tensor // self_attn.o_proj.weight [hidden, heads*head_dim]
	qNorm     *backend.Tensor // self_attn.q_norm.weight [head_dim]
	kNorm     *backend.Tensor // self_attn.k_norm.weight [head_dim]
	postNorm  *backend.Tensor // post_attention_layernorm.weight [hidden]
	router    *backend.Tensor // mlp.gate.weight [experts, hidden]
	experts   backend.Experts
	// experts.Gate: mlp.experts.*.gate_proj.weight [experts, expert_ffn, hidden]
	// experts.Up:   mlp.experts.*.up_proj.weight   [experts, expert_ffn, hidden]
	// experts.Down: mlp.experts.*.down_proj.weight [experts, hidden, expert_ffn]
}

// Load binds the decoder weights of m on b: every row of the decoder's
// tensor table (release.DecoderTensors), found under its checkpoint, GGUF or
// MLX name and checked against cfg's shapes.
func Load(m weights.Model, cfg release.Text, b backend.Backend) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("qwen3moe: %w", err)
	}
	rope, err := backend.MRoPE(cfg.HeadDim, cfg.RopeTheta, cfg.MRoPESections, cfg.MRoPEInterleaved)
	if err != nil {
		return nil, fmt.Errorf("qwen3moe: %w", err)
	}
	md := &Model{Config: cfg, b: b, layers: make([]layer, cfg.Layers), rope: rope}
	for _, t := range release.DecoderTensors(cfg) {
		if t.Role == release.RoleOutput {
			continue // the output embedding is the joint head's lexicon, not the decoder's
		}
		var dst **backend.Tensor
		if t.Layer < 0 {
			switch t.Key {
			case "embed_tokens.weight":
				dst = &md.embed
			case "norm.weight":
				dst = &md.norm
			}
		} else {
			ly := &md.layers[t.Layer]
			dst = map[string]**backend.Tensor{
				"input_layernorm.weight":          &ly.inputNorm,
				"self_attn.q_proj.weight":         &ly.q,
				"self_attn.k_proj.weight":         &ly.k,
				"self_attn.v_proj.weight":         &ly.v,
				"self_attn.o_proj.weight":         &ly.o,
				"self_attn.q_norm.weight":         &ly.qNorm,
				"self_attn.k_norm.weight":         &ly.kNorm,
				"post_attention_layernorm.weight": &ly.postNorm,
				"mlp.gate.weight":                 &ly.router,
				"mlp.experts.*.gate_proj.weight":  &ly.experts.Gate,
				"mlp.experts.*.up_proj.weight":    &ly.experts.Up,
				"mlp.experts.*.down_proj.weight":  &ly.experts.Down,
			}[t.Key]
		}
		if dst == nil {
			return nil, fmt.Errorf("qwen3moe: the decoder table has a row %s the model does not bind", t.Name)
		}
		w, _, err := release.Lookup(m, t)
		if err != nil {
			return nil, fmt.Errorf("qwen3moe: %w", err)
		}
		if *dst, err = b.Weight(w); err != nil {
			return nil, fmt.Errorf("qwen3moe: %s: %w", t.Name, err)
		}
	}
	return md, nil
}

// Tap, when given to Forward, receives named intermediates: "ffn_moe_topk"
// (the I32 [C, k] expert ids of a layer, called once per row chunk in row
// order) and "l_out" (the residual stream [L, hidden] leaving a layer,
// llama.cpp's l_out-<il>). The tensors are only valid during the call.
type Tap func(name string, layer int, t *backend.Tensor) error

// TextPositions returns the 3-D positions of plain text: p on all streams.
func TextPositions(n int) [][3]int {
	pos := make([][3]int, n)
	for i := range pos {
		pos[i] = [3]int{i, i, i}
	}
	return pos
}

// Input is what one forward pass reads. IDs give the length and the
// embedding rows; Embeds, when set, is the merged decoder input [L*hidden]
// (embedding rows with media rows overwritten, spec §7) and replaces the
// embedding lookup. Positions holds the three M-RoPE streams per token; nil
// means plain text (0, 1, 2, ...). Deepstack[l], when set, holds one row per
// entry of VisualRows ([len(VisualRows)*hidden]) that is added to the
// residual stream at those positions after decoder layer l.
type Input struct {
	IDs        []int
	Embeds     []float32
	Positions  [][3]int
	VisualRows []int
	Deepstack  [][]float32
	// Past, when set, is a stored prefix (see Prefix): IDs are then the
	// positions after it, attending to its keys and values as well as to
	// their own, and nil Positions mean Past.Len, Past.Len+1, ... It needs
	// a backend that implements backend.RowChunker.
	Past *Prefix
	// Progress, when set, is called after each row chunk of each layer
	// with the chunks done and their total (layers × chunks per layer):
	// how far a forward got when it was cancelled. A layer's later chunks
	// attend to more keys, so done/total never overstates the share of
	// the work done.
	Progress func(done, total int)
}

// Hidden runs the decoder on ids and returns the final normed hidden state
// of every position, [len(ids) * hidden] row-major. positions holds the three
// M-RoPE streams per token; nil means plain text (0, 1, 2, ...).
func (m *Model) Hidden(ctx context.Context, ids []int, positions [][3]int) ([]float32, error) {
	out, err := m.Forward(ctx, Input{IDs: ids, Positions: positions}, nil)
	if err != nil {
		return nil, err
	}
	defer m.b.Free(out)
	return m.b.Read(ctx, out)
}

// Forward runs the decoder (spec §2.2) and returns the final normed hidden
// states [L, hidden] on the backend; the caller frees them.
func (m *Model) Forward(ctx context.Context, in Input, tap Tap) (*backend.Tensor, error) {
	return m.forward(ctx, in, tap, nil)
}

// forward is Forward that, with save set (save.Len > 0 and save.K, save.V
// of one slice of save.Len rows per layer, from newPrefix), also copies
// every layer's keys and values of the first save.Len rows into save.
func (m *Model) forward(ctx context.Context, in Input, tap Tap, save *Prefix) (*backend.Tensor, error) {
	c, b := m.Config, m.b
	L := len(in.IDs)
	if in.Embeds != nil && L == 0 {
		L = len(in.Embeds) / c.Hidden
	}
	if L == 0 {
		return nil, fmt.Errorf("qwen3moe: no input tokens")
	}
	off := 0
	if in.Past != nil {
		if err := m.checkPast(in.Past); err != nil {
			return nil, err
		}
		off = in.Past.Len
	}
	if (in.Past != nil || save != nil) && !m.chunks() {
		return nil, fmt.Errorf("qwen3moe: backend %s cannot resume from a stored prefix (no backend.RowChunker)", b.Name())
	}
	if save != nil && in.Past != nil {
		return nil, fmt.Errorf("qwen3moe: cannot keep a prefix while resuming from one")
	}
	if save != nil && (save.Len <= 0 || save.Len > L || len(save.K) != c.Layers || len(save.V) != c.Layers) {
		return nil, fmt.Errorf("qwen3moe: cannot keep a prefix of %d rows of %d", save.Len, L)
	}
	positions := in.Positions
	if positions == nil {
		positions = TextPositions(off + L)[off:]
	}
	if len(positions) != L {
		return nil, fmt.Errorf("qwen3moe: %d positions for %d tokens", len(positions), L)
	}
	if len(in.Deepstack) > c.Layers {
		return nil, fmt.Errorf("qwen3moe: %d deepstack levels for %d layers", len(in.Deepstack), c.Layers)
	}
	var deep []*backend.Tensor
	defer func() { b.Free(deep...) }()
	for l, f := range in.Deepstack {
		if len(f) != len(in.VisualRows)*c.Hidden {
			return nil, fmt.Errorf("qwen3moe: deepstack level %d has %d values, want %d rows of %d", l, len(f), len(in.VisualRows), c.Hidden)
		}
		t, err := b.Upload(f, len(in.VisualRows), c.Hidden) // [n_visual, hidden]
		if err != nil {
			return nil, fmt.Errorf("qwen3moe: %w", err)
		}
		deep = append(deep, t)
	}
	rope := m.rope
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))

	var x *backend.Tensor // [L, hidden]
	var err error
	if in.Embeds != nil {
		if len(in.Embeds) != L*c.Hidden {
			return nil, fmt.Errorf("qwen3moe: %d input embedding values for %d tokens of %d", len(in.Embeds), L, c.Hidden)
		}
		x, err = b.Upload(in.Embeds, L, c.Hidden)
	} else {
		x, err = b.Embed(m.embed, in.IDs)
	}
	if err != nil {
		return nil, fmt.Errorf("qwen3moe: %w", err)
	}
	var tick func()
	if in.Progress != nil {
		perLayer := 1
		if chunk := m.chunk(); m.chunks() && (chunk < L || off > 0) {
			perLayer = (L + chunk - 1) / chunk
		}
		done, total := 0, perLayer*len(m.layers)
		tick = func() {
			done++
			in.Progress(done, total)
		}
	}
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			b.Free(x)
			return nil, err
		}
		nx, err := m.layer(ctx, l, x, positions, rope, scale, tap, in.Past, save, tick)
		b.Free(x)
		if err != nil {
			return nil, fmt.Errorf("qwen3moe: layer %d: %w", l, err)
		}
		x = nx
		if l < len(deep) {
			nx, err := b.AddRows(x, in.VisualRows, deep[l]) // [L, hidden]
			b.Free(x)
			if err != nil {
				return nil, fmt.Errorf("qwen3moe: deepstack %d: %w", l, err)
			}
			x = nx
		}
	}
	out, err := b.RMSNorm(x, m.norm, c.NormEps) // [L, hidden]
	b.Free(x)
	if err != nil {
		return nil, fmt.Errorf("qwen3moe: final norm: %w", err)
	}
	return out, nil
}

// DefaultChunk is the number of rows a layer processes at a time on a
// backend that can run in chunks (backend.RowChunker) and states no
// preference (backend.ChunkSizer), as llama.cpp's default ubatch:
// activation memory is bounded by the chunk, while K and V of one layer
// span every row.
const DefaultChunk = 512

// chunk is the rows a layer runs at a time on a backend.RowChunker: Chunk
// when set, else the backend's preferred chunk, else DefaultChunk. The
// size changes no result, only memory and speed.
func (m *Model) chunk() int {
	if m.Chunk > 0 {
		return m.Chunk
	}
	if cs, ok := m.b.(backend.ChunkSizer); ok {
		if n := cs.PreferredChunkRows(); n > 0 {
			return n
		}
	}
	return DefaultChunk
}

// layer runs decoder layer l on the residual stream x [L, hidden] and
// returns the new stream; x is left for the caller to free. K and V are
// computed for every row; queries, attention output and the MoE block run
// over row chunks when the backend supports it.
//
// With past set, x holds the rows after the stored prefix and their queries
// attend to the prefix's keys and values of layer l too; with save set, the
// keys and values of the first save.Len rows are read back into save.
func (m *Model) layer(ctx context.Context, l int, x *backend.Tensor, pos [][3]int, rope backend.RoPE, scale float32, tap Tap, past, save *Prefix, tick func()) (*backend.Tensor, error) {
	c, b, ly := m.Config, m.b, &m.layers[l]
	L := x.Rows()
	chunk := m.chunk()
	rc, ok := b.(backend.RowChunker)
	if !ok || chunk >= L {
		chunk = L
	}
	off := 0
	if past != nil {
		off = past.Len
	}

	// Attention block, keys and values: every row. The normed rows are
	// recomputed per chunk for the queries rather than kept.
	h, err := b.RMSNorm(x, ly.inputNorm, c.NormEps) // attn_norm [L, hidden]
	if err != nil {
		return nil, err
	}
	k, err := b.MatMul(h, ly.k) // Kcur [L, kv_heads*head_dim]
	if err != nil {
		b.Free(h)
		return nil, err
	}
	kn, err := b.RMSNorm(k, ly.kNorm, c.NormEps) // per head [L, kv_heads*head_dim]
	b.Free(k)
	if err != nil {
		return nil, err
	}
	k, err = b.RoPE(kn, pos, rope) // [L, kv_heads*head_dim]
	b.Free(kn)
	if err != nil {
		return nil, err
	}
	defer func() { b.Free(k) }()
	v, err := b.MatMul(h, ly.v) // Vcur [L, kv_heads*head_dim]
	b.Free(h)
	if err != nil {
		return nil, err
	}
	defer func() { b.Free(v) }()
	if save != nil {
		if err := m.readRows(ctx, rc, k, save.K[l]); err != nil {
			return nil, err
		}
		if err := m.readRows(ctx, rc, v, save.V[l]); err != nil {
			return nil, err
		}
	}
	if past != nil {
		// The keys and values of every position: the prefix's, then these rows'.
		if k, err = m.prepend(rc, past.K[l], k); err != nil { // [off+L, kv_heads*head_dim]
			return nil, err
		}
		if v, err = m.prepend(rc, past.V[l], v); err != nil { // [off+L, kv_heads*head_dim]
			return nil, err
		}
	}

	if chunk == L && off == 0 {
		out, err := m.rows(l, x, k, v, pos, 0, L, 0, nil, rope, scale, tap)
		if err == nil && tick != nil {
			tick()
		}
		if err == nil && tap != nil {
			if err = tap("l_out", l, out); err != nil {
				b.Free(out)
			}
		}
		return out, err
	}
	var outs []*backend.Tensor
	defer func() { b.Free(outs...) }()
	for c0 := 0; c0 < L; c0 += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out, err := m.rows(l, x, k, v, pos, c0, min(L, c0+chunk), off, rc, rope, scale, tap)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
		if tick != nil {
			tick()
		}
	}
	var out *backend.Tensor
	if len(outs) == 1 {
		out, outs = outs[0], nil // l_out [L, hidden]
	} else {
		out, err = rc.Concat(outs...) // l_out [L, hidden]
	}
	if err == nil && tap != nil {
		if err = tap("l_out", l, out); err != nil {
			b.Free(out)
		}
	}
	return out, err
}

// rows runs the rest of layer l for rows [c0, c1) of x: queries, attention
// over keys 0..off+c1-1 (off stored prefix rows come first in k and v),
// output projection, residual, MoE block, residual. With rc nil the rows
// are the whole sequence and off is 0.
func (m *Model) rows(l int, x, k, v *backend.Tensor, pos [][3]int, c0, c1, off int, rc backend.RowChunker, rope backend.RoPE, scale float32, tap Tap) (*backend.Tensor, error) {
	c, b, ly := m.Config, m.b, &m.layers[l]
	sc := backend.NewScope(b)
	defer sc.Free()
	step, drop := sc.Keep, sc.Drop // drop frees early, so the next op can reuse the memory
	xc, kc, vc := x, k, v
	if rc != nil {
		var err error
		if xc, err = step(rc.Rows(x, c0, c1)); err != nil { // [C, hidden]
			return nil, err
		}
		if kc, err = step(rc.Rows(k, 0, off+c1)); err != nil { // [off+c1, kv_heads*head_dim]
			return nil, err
		}
		if vc, err = step(rc.Rows(v, 0, off+c1)); err != nil { // [off+c1, kv_heads*head_dim]
			return nil, err
		}
	}

	// Attention block, queries.
	hc, err := step(b.RMSNorm(xc, ly.inputNorm, c.NormEps)) // attn_norm [C, hidden]
	if err != nil {
		return nil, err
	}
	q, err := step(b.MatMul(hc, ly.q)) // Qcur [C, heads*head_dim]
	if err != nil {
		return nil, err
	}
	drop(hc)
	qn, err := step(b.RMSNorm(q, ly.qNorm, c.NormEps)) // per head [C, heads*head_dim]
	if err != nil {
		return nil, err
	}
	drop(q)
	qr, err := step(b.RoPE(qn, pos[c0:c1], rope)) // [C, heads*head_dim]
	if err != nil {
		return nil, err
	}
	drop(qn)
	// Causal over keys 0..off+c1-1: the chunk's queries are the last rows.
	a, err := step(b.Attention(qr, kc, vc, backend.AttentionOptions{Heads: c.Heads, KVHeads: c.KVHeads, Scale: scale, Causal: true})) // kqv_out [C, heads*head_dim]
	if err != nil {
		return nil, err
	}
	drop(qr)
	o, err := step(b.MatMul(a, ly.o)) // attn_out [C, hidden]
	if err != nil {
		return nil, err
	}
	drop(a)
	xa, err := step(b.Add(xc, o)) // ffn_inp [C, hidden]
	if err != nil {
		return nil, err
	}
	drop(o)

	// MoE block.
	hn, err := step(b.RMSNorm(xa, ly.postNorm, c.NormEps)) // ffn_norm [C, hidden]
	if err != nil {
		return nil, err
	}
	logits, err := step(b.MatMul(hn, ly.router)) // ffn_moe_logits [C, experts]
	if err != nil {
		return nil, err
	}
	ids, w, err := b.Route(logits, c.TopK, c.NormTopK) // ffn_moe_topk [C, k], ffn_moe_weights [C, k]
	if err != nil {
		return nil, err
	}
	sc.Keep(ids, nil)
	sc.Keep(w, nil)
	drop(logits)
	if tap != nil {
		if err := tap("ffn_moe_topk", l, ids); err != nil {
			return nil, err
		}
	}
	moe, err := step(b.MoE(hn, ids, w, ly.experts)) // ffn_moe_out [C, hidden]
	if err != nil {
		return nil, err
	}
	drop(hn, ids, w)
	return b.Add(xa, moe) // l_out [C, hidden]
}
