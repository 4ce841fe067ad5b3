// Package audio is the thinker's audio encoder (AuT, Qwen3-Omni's
// Whisper-style "Qwen3OmniMoeAudioEncoder"), written once against
// backend.Backend: weight binding over the tower's tensor table
// (release.AudioTensors, configuration release.Audio) and the forward pass
// of spec §5.3, top to bottom in the spec's order, in this file. It never
// imports a backend implementation.
package audio

import (
	"context"
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// Fixed sizes of the tower (spec §5.2, §5.3).
const (
	// chunkFrames is the mel frames of one convolution chunk: 2·n_window,
	// with the n_window = 50 of every released configuration (the token
	// count formula of spec §5.4, which the processor shares, assumes it).
	chunkFrames = 100
	// chunkTokens is the tokens of a full chunk, ceil(100/8).
	chunkTokens = 13
	// normEps is the eps of every LayerNorm (torch's default; the
	// configuration has no key for it).
	normEps = 1e-5
	// maxTimescale is the longest period of the sinusoidal positions.
	maxTimescale = 10000
	// DefaultConvBatch is the most chunks the convolution stack runs at
	// once when Model.ConvBatch is 0; fewer when one chunk's activations are
	// large (convBudget).
	DefaultConvBatch = 64
	// convBudget bounds the bytes of the convolution stack's activations of
	// one batch of chunks when Model.ConvBatch is 0.
	convBudget = 256 << 20
)

// Model is the audio tower bound to one backend.
type Model struct {
	Config release.Audio
	// ConvBatch is the number of 100-frame chunks the convolution stack
	// runs at a time (bounding its memory); 0 means DefaultConvBatch, or
	// fewer when a batch's activations would exceed 256 MiB.
	ConvBatch int
	b         backend.Backend

	act     backend.GELUKind // activation_function of the layers and the head
	conv1   *backend.Tensor  // conv2d1.weight [downsample, 1*3*3] (bound 2-D)
	conv1b  *backend.Tensor  // conv2d1.bias [downsample]
	conv2   *backend.Tensor  // conv2d2.weight [downsample, downsample*3*3]
	conv2b  *backend.Tensor  // conv2d2.bias [downsample]
	conv3   *backend.Tensor  // conv2d3.weight [downsample, downsample*3*3]
	conv3b  *backend.Tensor  // conv2d3.bias [downsample]
	out     *backend.Tensor  // conv_out.weight [d_model, downsample*freq]
	layers  []layer
	lnPost  *backend.Tensor // ln_post.weight [d_model]
	lnPostB *backend.Tensor // ln_post.bias [d_model]
	proj1   *backend.Tensor // proj1.weight [d_model, d_model]
	proj1b  *backend.Tensor // proj1.bias [d_model]
	proj2   *backend.Tensor // proj2.weight [output_dim, d_model]
	proj2b  *backend.Tensor // proj2.bias [output_dim]
}

// layer holds one encoder layer's weights (names after
// thinker.audio_tower.layers.N.).
type layer struct {
	attnNorm, attnNormB   *backend.Tensor // self_attn_layer_norm.weight, .bias [d_model]
	q, qb                 *backend.Tensor // self_attn.q_proj.weight [d_model, d_model], .bias [d_model]
	k, kb                 *backend.Tensor // self_attn.k_proj.weight [d_model, d_model], .bias [d_model]
	v, vb                 *backend.Tensor // self_attn.v_proj.weight [d_model, d_model], .bias [d_model]
	o, ob                 *backend.Tensor // self_attn.out_proj.weight [d_model, d_model], .bias [d_model]
	finalNorm, finalNormB *backend.Tensor // final_layer_norm.weight, .bias [d_model]
	fc1, fc1b             *backend.Tensor // fc1.weight [ffn, d_model], .bias [ffn]
	fc2, fc2b             *backend.Tensor // fc2.weight [d_model, ffn], .bias [d_model]
}

// check reports the first value of c the tower cannot run with.
func check(c release.Audio) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"num_mel_bins", c.MelBins}, {"d_model", c.DModel}, {"encoder_layers", c.Layers}, {"encoder_attention_heads", c.Heads},
		{"encoder_ffn_dim", c.FFN}, {"downsample_hidden_size", c.DownsampleHidden}, {"output_dim", c.OutputDim}} {
		if f.v <= 0 || f.v > 1<<24 {
			return fmt.Errorf("audio_config: %s = %d is missing or out of range", f.name, f.v)
		}
	}
	if c.DModel%c.Heads != 0 {
		return fmt.Errorf("audio_config: d_model %d is not a multiple of encoder_attention_heads %d", c.DModel, c.Heads)
	}
	if c.DModel%2 != 0 || c.DModel < 4 {
		return fmt.Errorf("audio_config: d_model %d must be even and at least 4 (sinusoidal positions)", c.DModel)
	}
	if 2*c.NWindow != chunkFrames {
		return fmt.Errorf("audio_config: n_window %d is not supported (the audio token count assumes chunks of 2*50 frames)", c.NWindow)
	}
	if c.NWindowInfer < chunkFrames {
		return fmt.Errorf("audio_config: n_window_infer %d is shorter than one chunk of %d frames", c.NWindowInfer, chunkFrames)
	}
	if _, err := gelu(c.Activation); err != nil {
		return err
	}
	return nil
}

// gelu maps activation_function to the backend's GELU.
func gelu(name string) (backend.GELUKind, error) {
	switch name {
	case "gelu":
		return backend.GELUErf, nil
	case "gelu_new", "gelu_pytorch_tanh":
		return backend.GELUTanh, nil
	}
	return 0, fmt.Errorf("audio_config: activation_function %q is not supported (want gelu)", name)
}

// Load binds the audio tower of m (release.AudioTensors(cfg)) on b.
func Load(m weights.Model, cfg release.Audio, b backend.Backend) (*Model, error) {
	if err := check(cfg); err != nil {
		return nil, fmt.Errorf("audio: %w", err)
	}
	act, _ := gelu(cfg.Activation)
	md := &Model{Config: cfg, b: b, act: act, layers: make([]layer, cfg.Layers)}
	for _, t := range release.AudioTensors(cfg) {
		var dst **backend.Tensor
		if t.Layer < 0 {
			dst = map[string]**backend.Tensor{
				"conv2d1.weight":  &md.conv1,
				"conv2d1.bias":    &md.conv1b,
				"conv2d2.weight":  &md.conv2,
				"conv2d2.bias":    &md.conv2b,
				"conv2d3.weight":  &md.conv3,
				"conv2d3.bias":    &md.conv3b,
				"conv_out.weight": &md.out,
				"ln_post.weight":  &md.lnPost,
				"ln_post.bias":    &md.lnPostB,
				"proj1.weight":    &md.proj1,
				"proj1.bias":      &md.proj1b,
				"proj2.weight":    &md.proj2,
				"proj2.bias":      &md.proj2b,
			}[t.Key]
		} else {
			ly := &md.layers[t.Layer]
			dst = map[string]**backend.Tensor{
				"self_attn_layer_norm.weight": &ly.attnNorm,
				"self_attn_layer_norm.bias":   &ly.attnNormB,
				"self_attn.q_proj.weight":     &ly.q,
				"self_attn.q_proj.bias":       &ly.qb,
				"self_attn.k_proj.weight":     &ly.k,
				"self_attn.k_proj.bias":       &ly.kb,
				"self_attn.v_proj.weight":     &ly.v,
				"self_attn.v_proj.bias":       &ly.vb,
				"self_attn.out_proj.weight":   &ly.o,
				"self_attn.out_proj.bias":     &ly.ob,
				"final_layer_norm.weight":     &ly.finalNorm,
				"final_layer_norm.bias":       &ly.finalNormB,
				"fc1.weight":                  &ly.fc1,
				"fc1.bias":                    &ly.fc1b,
				"fc2.weight":                  &ly.fc2,
				"fc2.bias":                    &ly.fc2b,
			}[t.Key]
		}
		if dst == nil {
			return nil, fmt.Errorf("audio: the audio table has a row %s the model does not bind", t.Name)
		}
		w, _, err := release.Lookup(m, t)
		if err != nil {
			return nil, fmt.Errorf("audio: %w", err)
		}
		if len(w.Shape) == 4 {
			// A Conv2d kernel [out, in, kh, kw] is the matrix
			// [out, in*kh*kw] of the same bytes, whose columns (c, ky, kx)
			// are Im2Col's.
			flat := *w
			flat.Shape = []int{w.Shape[0], w.Shape[1] * w.Shape[2] * w.Shape[3]}
			w = &flat
		}
		if *dst, err = b.Weight(w); err != nil {
			return nil, fmt.Errorf("audio: %s: %w", t.Name, err)
		}
	}
	return md, nil
}

// Options select how Forward attends.
type Options struct {
	// FullAttention attends over the whole clip (what transformers 4.57
	// computed on eager/sdpa), for comparing with those older outputs; the
	// default is the 104-token windows the model was trained with.
	FullAttention bool
}

// convLen is the frames left of n after one convolution of kernel 3,
// stride 2, padding 1: ceil(n/2).
func convLen(n int) int { return (n + 1) / 2 }

// convTokens is the outputs of three convolutions over n frames: the
// tokens of a chunk of n frames.
func convTokens(n int) int { return convLen(convLen(convLen(n))) }

// Tokens is the number of output rows for frames valid mel frames (must
// equal the processor's token count): 13 per full 100-frame chunk and
// ceil(r/8) for a tail of r frames (spec §5.4); 0 for frames <= 0.
func Tokens(frames int) int {
	if frames <= 0 {
		return 0
	}
	return chunkTokens*(frames/chunkFrames) + convTokens(frames%chunkFrames)
}

// clip is the chunking of one clip (spec §5.3 step 1): chunks of 100 frames,
// the last one keeping the remainder, all padded with zeros to width, the
// longest chunk's frames.
type clip struct {
	frames, chunks int
	width          int // frames of every padded chunk
	widthTokens    int // tokens of a padded chunk (conv outputs per chunk)
	tokens         int // valid tokens of the clip, Tokens(frames)
}

func newClip(frames int) clip {
	c := clip{frames: frames, chunks: (frames + chunkFrames - 1) / chunkFrames, width: min(frames, chunkFrames)}
	c.widthTokens = convTokens(c.width)
	c.tokens = Tokens(frames)
	return c
}

// chunkLen is the valid frames of chunk i.
func (c clip) chunkLen(i int) int { return min(chunkFrames, c.frames-i*chunkFrames) }

// convBatch is the number of chunks the convolution stack runs at once.
func (m *Model) convBatch(c clip) int {
	if m.ConvBatch > 0 {
		return m.ConvBatch
	}
	// The largest step holds conv1's output, conv2's unfolded input and
	// its output at once (float32).
	ds, h1, w1 := m.Config.DownsampleHidden, convLen(m.Config.MelBins), convLen(c.width)
	h2, w2 := convLen(h1), convLen(w1)
	per := 4 * (2*h1*w1*ds + h2*w2*ds*9 + h2*w2*ds)
	return max(1, min(DefaultConvBatch, convBudget/max(per, 1)))
}

// Forward runs the tower on one clip's log-mel mel [bins, frames]
// row-major (bins = num_mel_bins): out [Tokens(frames), output_dim] on the
// backend; the caller frees it.
func (m *Model) Forward(ctx context.Context, mel []float32, frames int, o Options) (*backend.Tensor, error) {
	cfg, b := m.Config, m.b
	bins := cfg.MelBins
	if frames <= 0 {
		return nil, fmt.Errorf("audio: %d mel frames (want at least 1)", frames)
	}
	if len(mel)%bins != 0 || len(mel)/bins != frames {
		return nil, fmt.Errorf("audio: %d mel values are not %d bins x %d frames", len(mel), bins, frames)
	}
	c := newClip(frames)

	// Steps 1-5: the convolution stack, conv_out and the positions over
	// batches of padded chunks; each batch keeps its valid tokens.
	x, err := m.embed(ctx, mel, c) // [tokens, d_model]
	if err != nil {
		return nil, err
	}

	// Step 6: attention windows (cu_seqlens), or the whole clip.
	var segments []int
	if !o.FullAttention {
		segments = m.windows(c)
	}

	// Step 7: the encoder layers.
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			b.Free(x)
			return nil, err
		}
		nx, err := m.layer(l, x, segments)
		b.Free(x)
		if err != nil {
			return nil, fmt.Errorf("audio: layer %d: %w", l, err)
		}
		x = nx
	}
	if err := ctx.Err(); err != nil {
		b.Free(x)
		return nil, err
	}

	// Step 8: the head.
	out, err := m.head(x)
	b.Free(x)
	if err != nil {
		return nil, fmt.Errorf("audio: head: %w", err)
	}
	return out, nil
}

// embed runs steps 1-5 of spec §5.3: it pads the clip's chunks, runs the
// convolutions, conv_out and the sinusoidal positions over batches of
// chunks, and returns the valid tokens of all chunks, [tokens, d_model].
func (m *Model) embed(ctx context.Context, mel []float32, c clip) (*backend.Tensor, error) {
	d := m.Config.DModel
	batch := m.convBatch(c)
	pos := sinusoids(c.widthTokens, d) // [width_tokens, d_model]: positions restart in every chunk
	var parts []*backend.Tensor
	defer func() { m.b.Free(parts...) }()
	for c0 := 0; c0 < c.chunks; c0 += batch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c1 := min(c.chunks, c0+batch)
		e, err := m.convChunks(mel, c, c0, c1, pos) // [valid tokens of chunks c0..c1, d_model]
		if err != nil {
			return nil, fmt.Errorf("audio: chunks %d..%d: %w", c0, c1-1, err)
		}
		parts = append(parts, e)
	}
	x, err := m.concat(ctx, parts) // [tokens, d_model]
	if err != nil {
		return nil, fmt.Errorf("audio: %w", err)
	}
	parts = nil
	return x, nil
}

// convChunks runs chunks [c0, c1) of the clip through the convolution
// stack (steps 1-5): padded input, three Conv2d+GELU on (frequency, time),
// the (channel, frequency) flattening and conv_out, the positions, and the
// valid tokens of each chunk ([Σ valid, d_model]). Activations are
// channels-last: row (chunk, frequency, time), one column per channel.
func (m *Model) convChunks(mel []float32, c clip, c0, c1 int, pos []float32) (*backend.Tensor, error) {
	cfg, b := m.Config, m.b
	bins, ds, d, n := cfg.MelBins, cfg.DownsampleHidden, cfg.DModel, c1-c0
	sc := backend.NewScope(b)
	defer sc.Free()
	step, drop := sc.Keep, sc.Drop // drop frees early, so the next op can reuse the memory

	// Step 1: chunk i holds frames [100i, 100i+len) of every mel bin, then
	// zeros up to the padded width (they pass through the convolutions).
	in := make([]float32, n*bins*c.width)
	for i := range n {
		ch, l := c0+i, c.chunkLen(c0+i)
		for f := range bins {
			copy(in[(i*bins+f)*c.width:], mel[f*c.frames+ch*chunkFrames:][:l])
		}
	}
	x, err := step(b.Upload(in, n*bins*c.width, 1)) // [n*bins*width, 1]
	if err != nil {
		return nil, err
	}

	// Step 2: three Conv2d(kernel 3, stride 2, padding 1) + exact GELU.
	h, w, ch := bins, c.width, 1
	for _, cv := range []struct{ w, b *backend.Tensor }{{m.conv1, m.conv1b}, {m.conv2, m.conv2b}, {m.conv3, m.conv3b}} {
		g := backend.Conv2D{N: n, H: h, W: w, C: ch, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1}
		cols, err := step(b.Im2Col(x, g)) // [n*h/2*w/2, ch*3*3]
		if err != nil {
			return nil, err
		}
		drop(x)
		y, err := step(b.MatMul(cols, cv.w)) // [n*h/2*w/2, downsample]
		if err != nil {
			return nil, err
		}
		drop(cols)
		yb, err := step(b.AddBias(y, cv.b)) // [n*h/2*w/2, downsample]
		if err != nil {
			return nil, err
		}
		drop(y)
		if x, err = step(b.GELU(yb, backend.GELUErf)); err != nil { // [n*h/2*w/2, downsample]
			return nil, err
		}
		drop(yb)
		h, w = g.Out()
		ch = ds
	}

	// Step 3: per time step the (channel, frequency) vector, index
	// ch*freq + f (an unfold over the whole frequency axis), then conv_out.
	flat, err := step(b.Im2Col(x, backend.Conv2D{N: n, H: h, W: w, C: ds, KH: h, KW: 1, SH: 1, SW: 1})) // [n*width_tokens, downsample*freq]
	if err != nil {
		return nil, err
	}
	drop(x)
	e, err := step(b.MatMul(flat, m.out)) // [n*width_tokens, d_model]
	if err != nil {
		return nil, err
	}
	drop(flat)

	// Step 4: the sinusoid positions 0..width_tokens-1 of every chunk.
	tbl := make([]float32, 0, n*len(pos))
	for range n {
		tbl = append(tbl, pos...)
	}
	pt, err := step(b.Upload(tbl, n*c.widthTokens, d)) // [n*width_tokens, d_model]
	if err != nil {
		return nil, err
	}
	ep, err := b.Add(e, pt) // [n*width_tokens, d_model]
	if err != nil {
		return nil, err
	}
	drop(e, pt)

	// Step 5: the valid tokens of each chunk (only the clip's last chunk
	// can have fewer than the padded width).
	var keep []int
	for i := range n {
		for t := range convTokens(c.chunkLen(c0 + i)) {
			keep = append(keep, i*c.widthTokens+t)
		}
	}
	if len(keep) == ep.Rows() {
		return ep, nil
	}
	defer b.Free(ep)
	return b.Embed(ep, keep) // [Σ valid, d_model]
}

// sinusoids returns the position table [n, channels] of spec §5.3 step 4,
// rounded as float32 torch computes it: timescale k is
// exp(-(ln(10000)/(channels/2-1))·k), row p is sin(p·ts) ++ cos(p·ts).
func sinusoids(n, channels int) []float32 {
	half := channels / 2
	inc := float32(-math.Log(maxTimescale) / float64(half-1))
	ts := make([]float32, half)
	for k := range ts {
		ts[k] = float32(math.Exp(float64(inc * float32(k))))
	}
	out := make([]float32, n*channels)
	for p := range n {
		row := out[p*channels : (p+1)*channels]
		for k, s := range ts {
			a := float64(float32(p) * s)
			row[k], row[half+k] = float32(math.Sin(a)), float32(math.Cos(a))
		}
	}
	return out
}

// concat stacks the parts (which it frees) into one tensor: with the
// backend's Concat when it has one, else through host memory.
func (m *Model) concat(ctx context.Context, parts []*backend.Tensor) (*backend.Tensor, error) {
	b := m.b
	if len(parts) == 1 {
		return parts[0], nil
	}
	defer b.Free(parts...)
	if rc, ok := b.(backend.RowChunker); ok {
		return rc.Concat(parts...)
	}
	var all []float32
	rows := 0
	for _, p := range parts {
		v, err := b.Read(ctx, p)
		if err != nil {
			return nil, err
		}
		all = append(all, v...)
		rows += p.Rows()
	}
	return b.Upload(all, rows, parts[0].Cols())
}

// windows returns the cumulative window lengths (HF's cu_seqlens, spec
// §5.3 step 6) of the clip's tokens: windows of the padded chunk's tokens
// times n_window_infer // chunk frames (13·8 = 104 for the release), the
// last one holding the remainder.
func (m *Model) windows(c clip) []int {
	w := c.widthTokens * (m.Config.NWindowInfer / chunkFrames)
	cu := []int{0}
	for n := w; n <= c.tokens; n += w {
		cu = append(cu, n)
	}
	if r := c.tokens % w; r != 0 {
		cu = append(cu, c.tokens)
	}
	return cu
}

// layer runs encoder layer l (spec §5.3 step 7) on x [tokens, d_model] and
// returns the new residual stream; x is left for the caller to free.
// Attention is bidirectional within each segment (nil: the whole clip).
func (m *Model) layer(l int, x *backend.Tensor, segments []int) (*backend.Tensor, error) {
	cfg, b, ly := m.Config, m.b, &m.layers[l]
	sc := backend.NewScope(b)
	defer sc.Free()
	step, drop := sc.Keep, sc.Drop // drop frees early, so the next op can reuse the memory
	linear := func(in, w, bias *backend.Tensor) (*backend.Tensor, error) {
		y, err := b.MatMul(in, w)
		if err != nil {
			return nil, err
		}
		defer b.Free(y)
		return step(b.AddBias(y, bias))
	}

	// Attention block (pre-LN).
	h, err := step(b.LayerNorm(x, ly.attnNorm, ly.attnNormB, normEps)) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	q, err := linear(h, ly.q, ly.qb) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	k, err := linear(h, ly.k, ly.kb) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	v, err := linear(h, ly.v, ly.vb) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	drop(h)
	headDim := cfg.DModel / cfg.Heads
	a, err := step(b.Attention(q, k, v, backend.AttentionOptions{ // [tokens, d_model]
		Heads: cfg.Heads, KVHeads: cfg.Heads, Scale: float32(1 / math.Sqrt(float64(headDim))), Segments: segments}))
	if err != nil {
		return nil, err
	}
	drop(q, k, v)
	o, err := linear(a, ly.o, ly.ob) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	drop(a)
	xa, err := step(b.Add(x, o)) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	drop(o)

	// Feed-forward block (pre-LN).
	h, err = step(b.LayerNorm(xa, ly.finalNorm, ly.finalNormB, normEps)) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	f, err := linear(h, ly.fc1, ly.fc1b) // [tokens, ffn]
	if err != nil {
		return nil, err
	}
	drop(h)
	g, err := step(b.GELU(f, m.act)) // [tokens, ffn]
	if err != nil {
		return nil, err
	}
	drop(f)
	f2, err := linear(g, ly.fc2, ly.fc2b) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	drop(g)
	return b.Add(xa, f2) // [tokens, d_model]
}

// head runs spec §5.3 step 8 on x [tokens, d_model]: ln_post, proj1,
// GELU, proj2; out [tokens, output_dim]. x is left for the caller to free.
func (m *Model) head(x *backend.Tensor) (*backend.Tensor, error) {
	b := m.b
	h, err := b.LayerNorm(x, m.lnPost, m.lnPostB, normEps) // [tokens, d_model]
	if err != nil {
		return nil, err
	}
	p, err := b.MatMul(h, m.proj1) // [tokens, d_model]
	b.Free(h)
	if err != nil {
		return nil, err
	}
	pb, err := b.AddBias(p, m.proj1b) // [tokens, d_model]
	b.Free(p)
	if err != nil {
		return nil, err
	}
	g, err := b.GELU(pb, m.act) // [tokens, d_model]
	b.Free(pb)
	if err != nil {
		return nil, err
	}
	y, err := b.MatMul(g, m.proj2) // [tokens, output_dim]
	b.Free(g)
	if err != nil {
		return nil, err
	}
	defer b.Free(y)
	return b.AddBias(y, m.proj2b) // [tokens, output_dim]
}
