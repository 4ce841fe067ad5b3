// Package vision is the thinker's vision tower (the Qwen3-VL ViT with
// DeepStack, spec qwen3-omni-thinker.md §4.2), written once against
// backend.Backend: weight binding over the tower's tensor table
// (release.VisionTensors, configuration release.Vision) and the forward
// pass, top to bottom in the spec's order, in this file. The host computes
// only the layout of a batch (positions, attention segments, the bilinear
// taps of the position table); every tensor product is a backend op. It
// never imports a backend implementation.
package vision

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// Constants of the reference classes, which the configuration does not
// carry.
const (
	normEps   = 1e-6  // every LayerNorm of the tower
	ropeTheta = 10000 // the 2-D rotary embedding's base
	maxGrid   = 1 << 20
)

// DefaultChunk is the number of rows a block's MLP runs at a time on a
// backend that can run in chunks (backend.RowChunker): the widest
// activation, [rows, intermediate], is then bounded by the chunk.
const DefaultChunk = 1024

// Model is the vision tower bound to one backend.
type Model struct {
	Config release.Vision
	// Chunk is the number of rows a block's MLP runs at a time on a
	// backend that implements backend.RowChunker; 0 means DefaultChunk.
	Chunk int
	b     backend.Backend

	patch     *backend.Tensor // patch_embed.proj.weight [hidden, C·T·P·P] (the Conv3d kernel as a matrix)
	patchBias *backend.Tensor // patch_embed.proj.bias [hidden]
	pos       *backend.Tensor // pos_embed.weight [side², hidden]
	blocks    []block
	merger    merger   // merger.*: LayerNorm before the 2×2 shuffle
	deep      []merger // merger_list.K.*: LayerNorm after the shuffle
	// deepAt maps a block to the DeepStack merger that taps its output:
	// merger K taps block deepstack_visual_indexes[K].
	deepAt map[int]int

	side    int // the learned position grid is side × side
	heads   int
	scale   float32          // head_dim^-0.5
	act     backend.GELUKind // hidden_act of the blocks' MLP
	rope    backend.RoPE     // the 2-D rotary table
	patchIn int              // C·T·P·P values per patch
}

// block holds one ViT block's weights (names after thinker.visual.blocks.B.).
type block struct {
	norm1, norm1Bias *backend.Tensor // norm1.weight, norm1.bias [hidden]
	q, k, v          *backend.Tensor // attn.qkv.weight rows [0,h), [h,2h), [2h,3h): [hidden, hidden] each
	qBias, kBias     *backend.Tensor // attn.qkv.bias, the same thirds: [hidden] each
	vBias            *backend.Tensor // [hidden]
	proj, projBias   *backend.Tensor // attn.proj.weight [hidden, hidden], attn.proj.bias [hidden]
	norm2, norm2Bias *backend.Tensor // norm2.weight, norm2.bias [hidden]
	fc1, fc1Bias     *backend.Tensor // mlp.linear_fc1.weight [intermediate, hidden], .bias [intermediate]
	fc2, fc2Bias     *backend.Tensor // mlp.linear_fc2.weight [hidden, intermediate], .bias [hidden]
}

// merger holds one patch merger's weights (names after thinker.visual.merger.
// or thinker.visual.merger_list.K.).
type merger struct {
	norm, normBias *backend.Tensor // ln_q.weight, ln_q.bias: [hidden] (merger) or [hidden·merge²] (merger_list)
	fc1, fc1Bias   *backend.Tensor // mlp.0.weight [hidden·merge², hidden·merge²], mlp.0.bias [hidden·merge²]
	fc2, fc2Bias   *backend.Tensor // mlp.2.weight [out_hidden, hidden·merge²], mlp.2.bias [out_hidden]
	postShuffle    bool            // the norm runs on the merged rows
}

// Load binds the vision tower of m (release.VisionTensors(cfg)) on b: every
// row found under its checkpoint or MLX name and checked against cfg's
// shapes. The Conv3d kernel is bound as the matrix [hidden, C·T·P·P] and
// the fused qkv projection as three matrices, both over the mapped bytes.
func Load(m weights.Model, cfg release.Vision, b backend.Backend) (*Model, error) {
	md, err := newModel(cfg, b)
	if err != nil {
		return nil, err
	}
	for _, t := range release.VisionTensors(cfg) {
		w, _, err := release.Lookup(m, t)
		if err != nil {
			return nil, fmt.Errorf("vision: %w", err)
		}
		if err := md.bind(t, w); err != nil {
			return nil, fmt.Errorf("vision: %s: %w", t.Name, err)
		}
	}
	return md, nil
}

// newModel checks cfg and sets up everything of the model but its weights.
func newModel(cfg release.Vision, b backend.Backend) (*Model, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"depth", cfg.Depth}, {"hidden_size", cfg.Hidden}, {"num_heads", cfg.Heads}, {"intermediate_size", cfg.Intermediate},
		{"in_channels", cfg.InChannels}, {"patch_size", cfg.PatchSize}, {"temporal_patch_size", cfg.TemporalPatchSize},
		{"spatial_merge_size", cfg.SpatialMergeSize}, {"out_hidden_size", cfg.OutHidden}, {"num_position_embeddings", cfg.NumPositionEmbeddings}} {
		if f.v <= 0 || f.v > 1<<24 {
			return nil, fmt.Errorf("vision: vision_config %s = %d is missing or out of range", f.name, f.v)
		}
	}
	if cfg.Hidden%cfg.Heads != 0 || (cfg.Hidden/cfg.Heads)%4 != 0 {
		return nil, fmt.Errorf("vision: head size %d/%d must be a whole multiple of 4 (two rotary axes of rotated pairs)", cfg.Hidden, cfg.Heads)
	}
	if cfg.PatchSize > 1<<10 || cfg.TemporalPatchSize > 1<<10 || cfg.InChannels > 1<<10 || cfg.SpatialMergeSize > 1<<10 {
		return nil, fmt.Errorf("vision: patch %d, temporal patch %d, channels %d or merge %d is implausibly large",
			cfg.PatchSize, cfg.TemporalPatchSize, cfg.InChannels, cfg.SpatialMergeSize)
	}
	side := int(math.Round(math.Sqrt(float64(cfg.NumPositionEmbeddings))))
	if side*side != cfg.NumPositionEmbeddings {
		return nil, fmt.Errorf("vision: num_position_embeddings %d is not a square grid", cfg.NumPositionEmbeddings)
	}
	var act backend.GELUKind
	switch cfg.HiddenAct {
	case "", "gelu_pytorch_tanh", "gelu_new": // "" is the reference class's default, gelu_pytorch_tanh
		act = backend.GELUTanh
	case "gelu":
		act = backend.GELUErf
	default:
		return nil, fmt.Errorf("vision: hidden_act %q is not supported (want gelu_pytorch_tanh or gelu)", cfg.HiddenAct)
	}
	md := &Model{Config: cfg, b: b, blocks: make([]block, cfg.Depth), deep: make([]merger, len(cfg.DeepstackVisualIndexes)),
		deepAt: map[int]int{}, side: side, heads: cfg.Heads, act: act,
		scale:   float32(1 / math.Sqrt(float64(cfg.Hidden/cfg.Heads))),
		rope:    rope2D(cfg.Hidden / cfg.Heads),
		patchIn: cfg.InChannels * cfg.TemporalPatchSize * cfg.PatchSize * cfg.PatchSize}
	for k, l := range cfg.DeepstackVisualIndexes {
		if l < 0 || l >= cfg.Depth {
			return nil, fmt.Errorf("vision: deepstack index %d outside the %d blocks", l, cfg.Depth)
		}
		if _, dup := md.deepAt[l]; dup {
			return nil, fmt.Errorf("vision: deepstack_visual_indexes %v names block %d twice", cfg.DeepstackVisualIndexes, l)
		}
		md.deepAt[l] = k
		md.deep[k].postShuffle = true
	}
	return md, nil
}

// rope2D is the tower's rotary table (spec §4.2 step 4) for heads of d
// values: the reference's VisionRotaryEmbedding(d/2) has d/4 inverse
// frequencies 1/θ^(2j/(d/2)), computed in float32 as torch does; the row
// (stream 1) turns the first d/4 rotated pairs and the column (stream 2)
// the next d/4, each pair i with i+d/2.
func rope2D(d int) backend.RoPE {
	half, q := d/2, d/4
	r := backend.RoPE{HeadDim: d, InvFreq: make([]float32, half), Streams: make([]int, half)}
	for j := range q {
		e := float32(2*j) / float32(half)
		f := float32(1 / float32(math.Pow(ropeTheta, float64(e))))
		r.InvFreq[j], r.InvFreq[q+j] = f, f
		r.Streams[j], r.Streams[q+j] = 1, 2
	}
	return r
}

// bind binds table row t, found as w, into its place.
func (md *Model) bind(t release.Tensor, w *weights.Tensor) error {
	b := md.b
	one := func(dst **backend.Tensor, w *weights.Tensor) error {
		var err error
		*dst, err = b.Weight(w)
		return err
	}
	thirds := func(dst [3]**backend.Tensor) error {
		parts, err := split3(w)
		if err != nil {
			return err
		}
		for i, p := range parts {
			if err := one(dst[i], p); err != nil {
				return err
			}
		}
		return nil
	}
	if t.Layer >= 0 && !isDeep(t.Key) {
		bl := &md.blocks[t.Layer]
		switch t.Key {
		case "attn.qkv.weight":
			return thirds([3]**backend.Tensor{&bl.q, &bl.k, &bl.v})
		case "attn.qkv.bias":
			return thirds([3]**backend.Tensor{&bl.qBias, &bl.kBias, &bl.vBias})
		}
		dst := map[string]**backend.Tensor{
			"norm1.weight":          &bl.norm1,
			"norm1.bias":            &bl.norm1Bias,
			"norm2.weight":          &bl.norm2,
			"norm2.bias":            &bl.norm2Bias,
			"attn.proj.weight":      &bl.proj,
			"attn.proj.bias":        &bl.projBias,
			"mlp.linear_fc1.weight": &bl.fc1,
			"mlp.linear_fc1.bias":   &bl.fc1Bias,
			"mlp.linear_fc2.weight": &bl.fc2,
			"mlp.linear_fc2.bias":   &bl.fc2Bias,
		}[t.Key]
		if dst == nil {
			return fmt.Errorf("the vision table has a block row the model does not bind")
		}
		return one(dst, w)
	}
	mg, key := &md.merger, t.Key
	switch {
	case t.Key == "patch_embed.proj.weight":
		flat, err := flatten(w)
		if err != nil {
			return err
		}
		return one(&md.patch, flat)
	case t.Key == "patch_embed.proj.bias":
		return one(&md.patchBias, w)
	case t.Key == "pos_embed.weight":
		return one(&md.pos, w)
	case isDeep(t.Key):
		mg, key = &md.deep[t.Layer], strings.TrimPrefix(t.Key, fmt.Sprintf("merger_list.%d.", t.Layer))
	default:
		key = strings.TrimPrefix(t.Key, "merger.")
	}
	dst := map[string]**backend.Tensor{
		"ln_q.weight":  &mg.norm,
		"ln_q.bias":    &mg.normBias,
		"mlp.0.weight": &mg.fc1,
		"mlp.0.bias":   &mg.fc1Bias,
		"mlp.2.weight": &mg.fc2,
		"mlp.2.bias":   &mg.fc2Bias,
	}[key]
	if dst == nil {
		return fmt.Errorf("the vision table has a row the model does not bind")
	}
	return one(dst, w)
}

// isDeep reports whether a table key is a DeepStack merger's.
func isDeep(key string) bool { return strings.HasPrefix(key, "merger_list.") }

// flatten returns the Conv3d kernel w [hidden, C, T, P, P] as the matrix
// [hidden, C·T·P·P] over the same bytes: a Conv3d whose kernel equals its
// stride is a Linear on each patch flattened in (C, T, y, x) order.
func flatten(w *weights.Tensor) (*weights.Tensor, error) {
	if w.Parts != nil || w.Scales != nil || len(w.Shape) < 2 {
		return nil, fmt.Errorf("a Conv3d kernel %v stored stacked or group-quantized cannot be bound as a matrix", w.Shape)
	}
	f := *w
	f.Shape = []int{w.Shape[0], w.Elements() / w.Shape[0]}
	return &f, nil
}

// split3 returns the three equal thirds of w along its outermost dimension
// (the q, k and v rows of attn.qkv, or of its bias) as tensors over the
// same bytes; MLX scales and biases are split alike.
func split3(w *weights.Tensor) ([3]*weights.Tensor, error) {
	var out [3]*weights.Tensor
	if w.Parts != nil || len(w.Shape) == 0 || len(w.Shape) > 2 || w.Shape[0]%3 != 0 {
		return out, fmt.Errorf("shape %v does not split into q, k and v thirds", w.Shape)
	}
	n := w.Shape[0]
	if len(w.Data)%n != 0 {
		return out, fmt.Errorf("%d bytes of %v %v are not whole rows", len(w.Data), w.Type, w.Shape)
	}
	per := len(w.Data) / n * (n / 3) // bytes of one third
	var scales, biases [3]*weights.Tensor
	var err error
	if w.Scales != nil {
		if scales, err = split3(w.Scales); err != nil {
			return out, fmt.Errorf("scales: %w", err)
		}
	}
	if w.Biases != nil {
		if biases, err = split3(w.Biases); err != nil {
			return out, fmt.Errorf("biases: %w", err)
		}
	}
	for i := range out {
		p := *w
		p.Name = fmt.Sprintf("%s[%s]", w.Name, "qkv"[i:i+1])
		p.Shape = slices.Clone(w.Shape)
		p.Shape[0] = n / 3
		p.Data = w.Data[i*per : (i+1)*per : (i+1)*per]
		p.Scales, p.Biases = scales[i], biases[i]
		out[i] = &p
	}
	return out, nil
}

// Output is what the tower gives the decoder: Embeds [tokens, out_hidden]
// (tokens = Σ t·h·w/merge² over the images, in image order) and Deepstack,
// one [tokens, out_hidden] per deepstack_visual_indexes entry, in the order
// of the blocks they tap (the reference's order; the configurations list
// the indexes ascending, so it is also the list's). The caller frees them.
type Output struct {
	Embeds    *backend.Tensor
	Deepstack []*backend.Tensor
}

// Free releases the output's tensors on b.
func (o Output) Free(b backend.Backend) {
	b.Free(o.Embeds)
	b.Free(o.Deepstack...)
}

// Forward runs the tower on the processor's patches: pixels [Σ rows,
// C·T·P·P] of all images concatenated (rows in merge-block order, as
// engine/processor makes them), grids the (t, h, w) of each image in
// patches. A video is an image with t > 1 temporal patches, whose frames
// attend only within themselves. The context is checked between blocks.
func (m *Model) Forward(ctx context.Context, pixels []float32, grids [][3]int) (Output, error) {
	return m.forward(ctx, pixels, grids, nil)
}

// forward is Forward that hands the input of block 0 (patch embedding plus
// interpolated position embedding) to tap when it is set.
func (m *Model) forward(ctx context.Context, pixels []float32, grids [][3]int, tap func(*backend.Tensor) error) (out Output, err error) {
	b := m.b
	lay, err := m.layout(pixels, grids)
	if err != nil {
		return Output{}, err
	}
	defer func() {
		if err != nil {
			out.Free(b)
			out = Output{}
		}
	}()
	x, err := m.embed(pixels, lay) // [N, hidden]
	if err != nil {
		return out, fmt.Errorf("vision: patch embedding: %w", err)
	}
	defer func() { b.Free(x) }()
	if tap != nil {
		if err := tap(x); err != nil {
			return out, err
		}
	}
	out.Deepstack = make([]*backend.Tensor, 0, len(m.deep))
	for l := range m.blocks {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		nx, err := m.block(l, x, lay) // [N, hidden]
		if err != nil {
			return out, fmt.Errorf("vision: block %d: %w", l, err)
		}
		b.Free(x)
		x = nx
		if k, ok := m.deepAt[l]; ok {
			f, err := m.merge(&m.deep[k], x) // [N/merge², out_hidden]
			if err != nil {
				return out, fmt.Errorf("vision: deepstack merger %d: %w", k, err)
			}
			out.Deepstack = append(out.Deepstack, f)
		}
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	if out.Embeds, err = m.merge(&m.merger, x); err != nil { // [N/merge², out_hidden]
		return out, fmt.Errorf("vision: merger: %w", err)
	}
	return out, nil
}

// layout is the host-side description of a batch of images: where every
// patch row sits and what it attends to. Rows follow the processor's
// merge-block order (spec §4.2 step 3): per image, per frame, per 2×2
// block (row-major), the block's patches row-major.
type layout struct {
	rows     int
	pos      [][3]int  // [rows] rotary positions (0, patch row, patch column)
	segments []int     // cumulative rows of every frame of every image (cu_seqlens)
	taps     []int     // [rows·4] the position-table rows each patch blends
	weights  []float32 // [rows·4] their bilinear weights
}

// layout checks pixels and grids against the configuration and computes
// the batch's layout.
func (m *Model) layout(pixels []float32, grids [][3]int) (*layout, error) {
	c, ms := m.Config, m.Config.SpatialMergeSize
	if len(grids) == 0 {
		return nil, fmt.Errorf("vision: no images")
	}
	lay := &layout{segments: []int{0}}
	limit := len(pixels) / m.patchIn
	for i, g := range grids {
		t, h, w := g[0], g[1], g[2]
		if t <= 0 || h <= 0 || w <= 0 || t > maxGrid || h > maxGrid || w > maxGrid {
			return nil, fmt.Errorf("vision: image %d: grid (t, h, w) = %v must be positive and at most %d", i, g, maxGrid)
		}
		if h%ms != 0 || w%ms != 0 {
			return nil, fmt.Errorf("vision: image %d: grid (t, h, w) = %v: h and w must be multiples of spatial_merge_size %d", i, g, ms)
		}
		if w > limit || h > limit/w || t > limit/(h*w) || lay.rows > limit-t*h*w { // no product can overflow
			return nil, fmt.Errorf("vision: the grids %v need more patch rows than the %d values of pixels hold (%d of %d values each)", grids, len(pixels), limit, m.patchIn)
		}
		lay.rows += t * h * w
		for range t {
			lay.segments = append(lay.segments, lay.segments[len(lay.segments)-1]+h*w)
		}
	}
	if len(pixels) != lay.rows*m.patchIn {
		return nil, fmt.Errorf("vision: pixels hold %d values, want %d patch rows (Σ t·h·w of the grids) of %d (%d channels × %d frames × %d×%d)",
			len(pixels), lay.rows, m.patchIn, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize)
	}
	lay.pos = make([][3]int, 0, lay.rows)
	lay.taps = make([]int, 0, 4*lay.rows)
	lay.weights = make([]float32, 0, 4*lay.rows)
	for _, g := range grids {
		t, h, w := g[0], g[1], g[2]
		n := len(lay.pos)
		m.frame(lay, h, w)
		for range t - 1 { // every frame of a video has the first one's positions and taps
			lay.pos = append(lay.pos, lay.pos[n:n+h*w]...)
			lay.taps = append(lay.taps, lay.taps[4*n:4*(n+h*w)]...)
			lay.weights = append(lay.weights, lay.weights[4*n:4*(n+h*w)]...)
		}
	}
	return lay, nil
}

// frame appends the rotary positions and the position-table taps of one
// h × w frame to lay, in merge-block order. The table is a side × side
// grid resized bilinearly with aligned corners (spec §4.2 step 2): patch
// row r reads grid row r·(side−1)/(h−1), as torch.linspace computes it in
// float32, blending its floor and the next row (clamped) by the fraction;
// columns likewise. The weights are the float32 products the reference
// forms: (1−dy)(1−dx), (1−dy)dx, dy(1−dx), dy·dx.
func (m *Model) frame(lay *layout, h, w int) {
	ms, side := m.Config.SpatialMergeSize, m.side
	ys, xs := linspace(float32(side-1), h), linspace(float32(side-1), w)
	for br := 0; br < h/ms; br++ {
		for bc := 0; bc < w/ms; bc++ {
			for ir := range ms {
				for ic := range ms {
					r, c := br*ms+ir, bc*ms+ic
					y0, x0 := int(ys[r]), int(xs[c]) // truncation: the values are not negative
					y1, x1 := min(y0+1, side-1), min(x0+1, side-1)
					dy, dx := ys[r]-float32(y0), xs[c]-float32(x0)
					lay.pos = append(lay.pos, [3]int{0, r, c})
					lay.taps = append(lay.taps, y0*side+x0, y0*side+x1, y1*side+x0, y1*side+x1)
					lay.weights = append(lay.weights, (1-dy)*(1-dx), (1-dy)*dx, dy*(1-dx), dy*dx)
				}
			}
		}
	}
}

// linspace returns n values from 0 to end as torch.linspace computes them
// in float32: step = end/(n−1); the first half counted up from 0
// (step·i), the second half down from end (end − step·(n−1−i)).
func linspace(end float32, n int) []float32 {
	v := make([]float32, n)
	if n == 1 {
		return v
	}
	step := end / float32(n-1)
	for i := range v {
		if i < n/2 {
			v[i] = step * float32(i)
		} else {
			v[i] = end - float32(step*float32(n-1-i)) // the conversion keeps the product rounded (no fused multiply-add)
		}
	}
	return v
}

// embed computes the input of block 0 (spec §4.2 steps 1-2): the patch
// embedding (the Conv3d as a matmul over the flattened patches, plus its
// bias) plus the interpolated position embedding.
func (m *Model) embed(pixels []float32, lay *layout) (*backend.Tensor, error) {
	b := m.b
	sc := backend.NewScope(b)
	defer sc.Free()
	step := sc.Keep
	px, err := step(b.Upload(pixels, lay.rows, m.patchIn)) // [N, C·T·P·P]
	if err != nil {
		return nil, err
	}
	pe, err := step(b.MatMul(px, m.patch)) // [N, hidden]
	if err != nil {
		return nil, err
	}
	b.Free(px)
	pe, err = step(b.AddBias(pe, m.patchBias)) // [N, hidden]
	if err != nil {
		return nil, err
	}
	pos, err := step(b.GatherBlend(m.pos, lay.taps, lay.weights, 4)) // [N, hidden]
	if err != nil {
		return nil, err
	}
	return b.Add(pe, pos) // [N, hidden]
}

// block runs ViT block l (spec §4.2 step 5) on x [N, hidden] and returns
// the new residual stream; x is left for the caller to free. Attention is
// bidirectional within each frame of each image (the layout's segments).
func (m *Model) block(l int, x *backend.Tensor, lay *layout) (*backend.Tensor, error) {
	b, bl := m.b, &m.blocks[l]
	sc := backend.NewScope(b)
	defer sc.Free()
	step, drop := sc.Keep, sc.Drop // drop frees early, so the next op can reuse the memory

	// Attention block.
	h, err := step(b.LayerNorm(x, bl.norm1, bl.norm1Bias, normEps)) // norm1 [N, hidden]
	if err != nil {
		return nil, err
	}
	proj := func(w, bias *backend.Tensor, rotate bool) (*backend.Tensor, error) {
		t, err := step(b.MatMul(h, w)) // [N, hidden]
		if err != nil {
			return nil, err
		}
		tb, err := step(b.AddBias(t, bias)) // [N, hidden]
		if err != nil || !rotate {
			return tb, err
		}
		drop(t)
		tr, err := step(b.RoPE(tb, lay.pos, m.rope)) // [N, hidden]
		drop(tb)
		return tr, err
	}
	q, err := proj(bl.q, bl.qBias, true) // q rows of attn.qkv, rotated [N, hidden]
	if err != nil {
		return nil, err
	}
	k, err := proj(bl.k, bl.kBias, true) // k rows of attn.qkv, rotated [N, hidden]
	if err != nil {
		return nil, err
	}
	v, err := proj(bl.v, bl.vBias, false) // v rows of attn.qkv [N, hidden]
	if err != nil {
		return nil, err
	}
	drop(h)
	a, err := step(b.Attention(q, k, v, backend.AttentionOptions{Heads: m.heads, KVHeads: m.heads, Scale: m.scale, Segments: lay.segments})) // [N, hidden]
	if err != nil {
		return nil, err
	}
	drop(q, k, v)
	o, err := step(b.MatMul(a, bl.proj)) // attn.proj [N, hidden]
	if err != nil {
		return nil, err
	}
	drop(a)
	ob, err := step(b.AddBias(o, bl.projBias)) // [N, hidden]
	if err != nil {
		return nil, err
	}
	drop(o)
	xa, err := step(b.Add(x, ob)) // [N, hidden]
	if err != nil {
		return nil, err
	}
	drop(ob)

	// MLP block, over row chunks where the backend allows.
	rc, ok := b.(backend.RowChunker)
	n, chunk := xa.Rows(), m.Chunk
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	if !ok || chunk >= n {
		return m.mlp(bl, xa)
	}
	var outs []*backend.Tensor
	defer func() { b.Free(outs...) }()
	for c0 := 0; c0 < n; c0 += chunk {
		xc, err := step(rc.Rows(xa, c0, min(n, c0+chunk))) // [C, hidden]
		if err != nil {
			return nil, err
		}
		oc, err := m.mlp(bl, xc) // [C, hidden]
		if err != nil {
			return nil, err
		}
		outs = append(outs, oc)
	}
	return rc.Concat(outs...) // [N, hidden]
}

// mlp returns x + fc2(act(fc1(norm2(x)))) for rows x [C, hidden]; x is left
// for the caller to free.
func (m *Model) mlp(bl *block, x *backend.Tensor) (*backend.Tensor, error) {
	b := m.b
	h, err := b.LayerNorm(x, bl.norm2, bl.norm2Bias, normEps) // norm2 [C, hidden]
	if err != nil {
		return nil, err
	}
	f, err := linear(b, h, bl.fc1, bl.fc1Bias) // mlp.linear_fc1 [C, intermediate]
	b.Free(h)
	if err != nil {
		return nil, err
	}
	g, err := b.GELU(f, m.act) // [C, intermediate]
	b.Free(f)
	if err != nil {
		return nil, err
	}
	f, err = linear(b, g, bl.fc2, bl.fc2Bias) // mlp.linear_fc2 [C, hidden]
	b.Free(g)
	if err != nil {
		return nil, err
	}
	out, err := b.Add(x, f) // [C, hidden]
	b.Free(f)
	return out, err
}

// merge runs a patch merger on x [N, hidden] (spec §4.2 steps 6-7): the
// final merger normalises each patch and then concatenates every 2×2 block
// (merge² consecutive rows) into one row; a DeepStack merger concatenates
// first and normalises the merged rows. Then Linear, exact GELU, Linear.
// x is left for the caller to free.
func (m *Model) merge(mg *merger, x *backend.Tensor) (*backend.Tensor, error) {
	b := m.b
	sc := backend.NewScope(b)
	defer sc.Free()
	step := sc.Keep
	ms2 := m.Config.SpatialMergeSize * m.Config.SpatialMergeSize
	rows, cols := x.Rows()/ms2, x.Cols()*ms2
	var h *backend.Tensor
	var err error
	if mg.postShuffle {
		r, err := step(b.Reshape(x, rows, cols)) // [N/merge², hidden·merge²]
		if err != nil {
			return nil, err
		}
		h, err = step(b.LayerNorm(r, mg.norm, mg.normBias, normEps)) // ln_q [N/merge², hidden·merge²]
		if err != nil {
			return nil, err
		}
	} else {
		hn, err := step(b.LayerNorm(x, mg.norm, mg.normBias, normEps)) // ln_q [N, hidden]
		if err != nil {
			return nil, err
		}
		if h, err = step(b.Reshape(hn, rows, cols)); err != nil { // [N/merge², hidden·merge²]
			return nil, err
		}
	}
	f, err := step(linear(b, h, mg.fc1, mg.fc1Bias)) // mlp.0 [N/merge², hidden·merge²]
	if err != nil {
		return nil, err
	}
	g, err := step(b.GELU(f, backend.GELUErf)) // mlp.1 [N/merge², hidden·merge²]
	if err != nil {
		return nil, err
	}
	return linear(b, g, mg.fc2, mg.fc2Bias) // mlp.2 [N/merge², out_hidden]
}

// linear returns x Wᵀ + bias.
func linear(b backend.Backend, x, w, bias *backend.Tensor) (*backend.Tensor, error) {
	y, err := b.MatMul(x, w)
	if err != nil {
		return nil, err
	}
	out, err := b.AddBias(y, bias)
	b.Free(y)
	return out, err
}
