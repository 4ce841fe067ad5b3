// Package backend defines the small, closed set of operations the model code
// calls and the registry through which a command or the engine picks an
// implementation. Model code talks only to the Backend interface; it never
// imports a backend package. Implementations (engine/cpu, metal) register
// themselves from an init function and are chosen by name:
//
//	import _ "github.com/clefrt/clef/engine/cpu"
//	b, err := backend.Open("cpu", backend.Options{Threads: 4})
//
// All activations are float32 row-major matrices [rows, cols]. Weights keep
// their storage type (any quant.Type the backend supports) and are bound
// without copying the mapped bytes. A backend may execute each op at once
// (cpu) or record ops and run them at the next Read (metal); either way an
// error of a recorded op is reported no later than that Read.
package backend

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Tensor is a handle to a tensor that lives on one backend. Shape lists
// dimensions outermost first (a weight is [out, in], an activation is
// [rows, cols]). Handle is the backend's own storage and is opaque to callers.
type Tensor struct {
	Type   quant.Type
	Shape  []int
	Handle any
}

// Rows returns the outermost dimension (1 for a vector).
func (t *Tensor) Rows() int {
	if len(t.Shape) < 2 {
		return 1
	}
	return t.Shape[0]
}

// Cols returns the innermost (contiguous) dimension.
func (t *Tensor) Cols() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// RoPE is a rotary position embedding in the NeoX "rotate half" layout,
// given as a table: dimension i of a head (i < HeadDim/2) pairs with
// i+HeadDim/2 and both turn by the angle pos[Streams[i]]·InvFreq[i], the
// float32 product of the row's position in that stream and the inverse
// frequency. The decoder's 3-D M-RoPE (MRoPE) and the vision encoder's 2-D
// RoPE (the head_dim/4 frequencies once for the row stream 1, once for the
// column stream 2) are both such tables.
type RoPE struct {
	HeadDim int
	InvFreq []float32 // [HeadDim/2] inverse frequency of each rotated pair
	Streams []int     // [HeadDim/2] which position stream (0 t, 1 h, 2 w) each frequency reads
}

// Check reports whether r is a well-formed table: an even positive head
// size, HeadDim/2 frequencies and streams, every stream in 0..2.
func (r RoPE) Check() error {
	half := r.HeadDim / 2
	if half <= 0 || r.HeadDim%2 != 0 {
		return fmt.Errorf("rope head dim %d must be even and positive", r.HeadDim)
	}
	if len(r.InvFreq) != half || len(r.Streams) != half {
		return fmt.Errorf("rope table has %d inverse frequencies and %d streams, want %d of each", len(r.InvFreq), len(r.Streams), half)
	}
	for i, s := range r.Streams {
		if s < 0 || s > 2 {
			return fmt.Errorf("rope frequency %d reads position stream %d (want 0, 1 or 2)", i, s)
		}
	}
	return nil
}

// MRoPE builds the decoder's rotary table: inverse frequency i is
// theta^(-2i/headDim), rounded to float32 as float32 torch computes it
// (float32(1 / float32(theta^(2i/headDim)))), and each frequency takes its
// position from one of three streams (temporal, height, width). Interleaved
// M-RoPE (Qwen3-VL/Omni) assigns frequency i to H when i%3==1 and
// i < 3*sections[1], to W when i%3==2 and i < 3*sections[2], and to T
// otherwise; the chunked layout (Qwen2-VL) gives the first sections[0]
// frequencies to T, the next sections[1] to H and the rest to W. With all
// sections zero every frequency reads stream 0 (plain RoPE); otherwise the
// sections must sum to headDim/2.
func MRoPE(headDim int, theta float64, sections [3]int, interleaved bool) (RoPE, error) {
	half := headDim / 2
	if half <= 0 || headDim%2 != 0 {
		return RoPE{}, fmt.Errorf("rope head dim %d must be even and positive", headDim)
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return RoPE{}, fmt.Errorf("rope theta %v must be positive and finite", theta)
	}
	sec := sections
	if sec != [3]int{} && (sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[0]+sec[1]+sec[2] != half) {
		return RoPE{}, fmt.Errorf("mrope sections %v do not sum to %d frequencies", sec, half)
	}
	r := RoPE{HeadDim: headDim, InvFreq: make([]float32, half), Streams: make([]int, half)}
	for i := range r.InvFreq {
		r.InvFreq[i] = float32(1 / float64(float32(math.Pow(theta, float64(2*i)/float64(headDim)))))
	}
	if sec == [3]int{} {
		return r, nil
	}
	for i := range r.Streams {
		switch {
		case interleaved && i%3 == 1 && i < 3*sec[1]:
			r.Streams[i] = 1
		case interleaved && i%3 == 2 && i < 3*sec[2]:
			r.Streams[i] = 2
		case interleaved:
			r.Streams[i] = 0
		case i < sec[0]:
			r.Streams[i] = 0
		case i < sec[0]+sec[1]:
			r.Streams[i] = 1
		default:
			r.Streams[i] = 2
		}
	}
	return r, nil
}

// GELUKind selects the form of GELU.
type GELUKind int

const (
	// GELUErf is the exact GELU: 0.5·x·(1 + erf(x/√2)).
	GELUErf GELUKind = iota
	// GELUTanh is the tanh approximation ("gelu_pytorch_tanh"):
	// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
	GELUTanh
)

// String names the kind.
func (k GELUKind) String() string {
	switch k {
	case GELUErf:
		return "erf"
	case GELUTanh:
		return "tanh"
	}
	return fmt.Sprintf("GELUKind(%d)", int(k))
}

// AttentionOptions describe one Attention call. Query row i sits at key
// position Lk-Lq+i (the last Lq of Lk positions). Every mask below is
// combined: a row sees the keys that all of them allow. With neither Causal
// nor Segments every row sees every key (bidirectional; Lq may differ from
// Lk, as in the head's cross-attention).
type AttentionOptions struct {
	// Heads and KVHeads are the query and key/value head counts: query
	// head h reads kv head h/(Heads/KVHeads).
	Heads, KVHeads int
	// Scale multiplies every score (usually 1/sqrt(head_dim)).
	Scale float32
	// Causal: query row i (the last Lq of Lk positions) sees keys
	// 0..Lk-Lq+i (Lk >= Lq).
	Causal bool
	// Segments are cumulative lengths [0, n1, n1+n2, ..., L] (cu_seqlens):
	// Lq == Lk == L and a row sees only keys of its own segment (per image,
	// per video frame, per audio window); nil means one segment.
	Segments []int
	// Window > 0: a row also sees only keys within Window positions before
	// it (key j is hidden when pos-j >= Window: a causal row sees at most
	// Window keys, itself included); 0 = no window.
	Window int
}

// Check validates o for q [lq, qc], k and v [lk, kc] and returns the head
// size.
func (o AttentionOptions) Check(lq, qc, lk, kc int) (int, error) {
	if o.Heads <= 0 || o.KVHeads <= 0 || o.Heads%o.KVHeads != 0 || qc%o.Heads != 0 || qc == 0 {
		return 0, fmt.Errorf("%d query heads over %d kv heads do not fit q rows of %d", o.Heads, o.KVHeads, qc)
	}
	d := qc / o.Heads
	if kc != o.KVHeads*d {
		return 0, fmt.Errorf("k and v rows of %d do not fit %d kv heads of %d", kc, o.KVHeads, d)
	}
	if o.Window < 0 {
		return 0, fmt.Errorf("negative attention window %d", o.Window)
	}
	if o.Causal && lk < lq {
		return 0, fmt.Errorf("causal attention of %d queries over %d keys (need at least as many keys)", lq, lk)
	}
	if o.Segments != nil {
		s := o.Segments
		if lq != lk {
			return 0, fmt.Errorf("segmented attention of %d queries over %d keys (need as many)", lq, lk)
		}
		if len(s) < 2 || s[0] != 0 || s[len(s)-1] != lq {
			return 0, fmt.Errorf("attention segments %v must run from 0 to %d", s, lq)
		}
		for i := 1; i < len(s); i++ {
			if s[i] < s[i-1] {
				return 0, fmt.Errorf("attention segments %v are not cumulative lengths", s)
			}
		}
	}
	if lk == 0 && lq > 0 {
		return 0, fmt.Errorf("attention of %d queries over no keys", lq)
	}
	return d, nil
}

// KeyRanges returns, for each of lq query rows over lk keys, the keys
// [lo, hi) the row sees under o (the masks combined). Check must have
// passed; every range is then non-empty.
func (o AttentionOptions) KeyRanges(lq, lk int) [][2]int {
	r := make([][2]int, lq)
	seg := 0
	for i := range r {
		pos := lk - lq + i
		lo, hi := 0, lk
		if o.Segments != nil {
			for i >= o.Segments[seg+1] {
				seg++
			}
			lo, hi = o.Segments[seg], o.Segments[seg+1]
		}
		if o.Causal {
			hi = min(hi, pos+1)
		}
		if o.Window > 0 {
			lo = max(lo, pos-o.Window+1)
		}
		r[i] = [2]int{lo, hi}
	}
	return r
}

// CheckSpans reports whether every span [lo, hi) is non-empty and lies in
// [0, rows) (SpanMeans).
func CheckSpans(spans [][2]int, rows int) error {
	for i, s := range spans {
		if s[0] < 0 || s[1] > rows || s[0] >= s[1] {
			return fmt.Errorf("span %d [%d, %d) is empty or outside %d rows", i, s[0], s[1], rows)
		}
	}
	return nil
}

// CheckRanges reports whether ranges (nil, or one per row) are non-empty
// column ranges [lo, hi) of rows of cols values (Softmax).
func CheckRanges(ranges [][2]int, rows, cols int) error {
	if ranges == nil {
		if cols == 0 && rows > 0 {
			return fmt.Errorf("softmax over rows of no values")
		}
		return nil
	}
	if len(ranges) != rows {
		return fmt.Errorf("%d column ranges for %d rows", len(ranges), rows)
	}
	for i, r := range ranges {
		if r[0] < 0 || r[1] > cols || r[0] >= r[1] {
			return fmt.Errorf("row %d: column range [%d, %d) is empty or outside %d columns", i, r[0], r[1], cols)
		}
	}
	return nil
}

// Conv2D is the geometry of Im2Col: N images of H×W pixels with C
// channels, a KH×KW kernel moved by strides SH, SW over the picture padded
// with PH, PW zeros on each side.
type Conv2D struct {
	N, H, W, C int // images, rows, columns, channels of the input
	KH, KW     int // kernel rows and columns
	SH, SW     int // strides
	PH, PW     int // zero padding on each side
}

// Out returns the output picture size: OH = (H+2PH-KH)/SH+1 rows, OW
// likewise. Check must have passed.
func (g Conv2D) Out() (oh, ow int) {
	return (g.H+2*g.PH-g.KH)/g.SH + 1, (g.W+2*g.PW-g.KW)/g.SW + 1
}

// Check reports whether g is a well-formed convolution of x [rows, cols]:
// positive sizes and strides, non-negative padding, a kernel that fits the
// padded picture, rows = N·H·W and cols = C, and an unfolded matrix
// [N·OH·OW, C·KH·KW] whose size is representable.
func (g Conv2D) Check(rows, cols int) error {
	if g.N <= 0 || g.H <= 0 || g.W <= 0 || g.C <= 0 {
		return fmt.Errorf("conv2d input %dx%dx%dx%d (N, H, W, C) must be positive", g.N, g.H, g.W, g.C)
	}
	if g.KH <= 0 || g.KW <= 0 || g.SH <= 0 || g.SW <= 0 {
		return fmt.Errorf("conv2d kernel %dx%d and strides %dx%d must be positive", g.KH, g.KW, g.SH, g.SW)
	}
	if g.PH < 0 || g.PW < 0 {
		return fmt.Errorf("conv2d padding %dx%d must not be negative", g.PH, g.PW)
	}
	const lim = 1 << 31 // every size below fits 32 bits, so no product overflows
	for _, v := range []int{g.N, g.H, g.W, g.C, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW} {
		if v >= lim {
			return fmt.Errorf("conv2d size %d is too large", v)
		}
	}
	if g.KH > g.H+2*g.PH || g.KW > g.W+2*g.PW {
		return fmt.Errorf("conv2d kernel %dx%d does not fit the padded %dx%d picture", g.KH, g.KW, g.H+2*g.PH, g.W+2*g.PW)
	}
	pix, ok := mulSmall(g.N, g.H, g.W)
	if !ok || rows != pix || cols != g.C {
		return fmt.Errorf("conv2d of %d images of %dx%d pixels and %d channels needs x [%d %d], got [%d %d]",
			g.N, g.H, g.W, g.C, g.N*g.H*g.W, g.C, rows, cols)
	}
	oh, ow := g.Out()
	if _, ok := mulSmall(g.N, oh, ow, g.C, g.KH, g.KW); !ok {
		return fmt.Errorf("conv2d unfolds %d images of %dx%d pixels into more than %d values", g.N, oh, ow, lim-1)
	}
	return nil
}

// mulSmall returns the product of positive factors and whether it stays
// below 2^31.
func mulSmall(vs ...int) (int, bool) {
	p := 1
	for _, v := range vs {
		if v <= 0 || v >= 1<<31 || p > (1<<31-1)/v {
			return 0, false
		}
		p *= v
	}
	return p, true
}

// CheckBlend reports whether ids and weights make a GatherBlend of k terms
// per output row over a table of rows rows.
func CheckBlend(ids []int, weights []float32, k, rows int) error {
	if k <= 0 {
		return fmt.Errorf("gather blend of %d terms per row (want at least 1)", k)
	}
	if len(ids) != len(weights) {
		return fmt.Errorf("gather blend of %d ids with %d weights", len(ids), len(weights))
	}
	if len(ids)%k != 0 {
		return fmt.Errorf("gather blend of %d ids is not a whole number of rows of %d terms", len(ids), k)
	}
	for i, id := range ids {
		if id < 0 || id >= rows {
			return fmt.Errorf("gather blend id %d at %d is outside the table's %d rows", id, i, rows)
		}
	}
	return nil
}

// Experts are the stacked projections of one MoE layer: expert e is the
// SiLU-gated feed-forward down_e(silu(gate_e x) * up_e x). Each tensor is
// bound from one stacked weights.Tensor, so the experts travel as one
// [E, out, in] tensor from the file to the kernel.
type Experts struct {
	Gate *Tensor // [E, ffn, hidden]
	Up   *Tensor // [E, ffn, hidden]
	Down *Tensor // [E, hidden, ffn]
}

// Backend is the closed op set of the thinker forward and the joint head
// (the head's row and shape ops: Reshape to GroupMatMul). Every op returns a new
// tensor and leaves its inputs untouched; shapes are checked and a mismatch
// is an error, never a panic.
type Backend interface {
	// Name is the registry name ("cpu", "metal").
	Name() string
	// Threads reports how many worker threads the backend uses (1 for a GPU).
	Threads() int

	// Weight binds a checkpoint tensor without copying its bytes. Its type
	// must be one the backend supports; 1-D tensors (norm weights) are [n];
	// 3-D tensors are stacked experts [E, out, in] (contiguous or parted,
	// see weights.Tensor) for MoE.
	Weight(t *weights.Tensor) (*Tensor, error)
	// Upload copies host float32 data into a new [rows, cols] tensor.
	Upload(data []float32, rows, cols int) (*Tensor, error)
	// Read returns the float32 contents of t (executing pending work first).
	Read(ctx context.Context, t *Tensor) ([]float32, error)
	// Free releases t's storage; using t afterwards is an error. Weights
	// bound with Weight are not freed (the mapping owns them).
	Free(ts ...*Tensor)

	// Embed gathers rows of table [vocab, dim] for ids: out [len(ids), dim].
	// The table is a bound weight or an activation (a row gather).
	// An id outside [0, vocab) is an error.
	Embed(table *Tensor, ids []int) (*Tensor, error)
	// MatMul computes x Wᵀ: x [M, K], w [N, K] in any supported type, out [M, N].
	MatMul(x, w *Tensor) (*Tensor, error)
	// RMSNorm normalises every group of len(weight) consecutive values of x
	// (a whole row, or one head when x is [rows, heads*headDim]):
	// y = x / sqrt(mean(x²) + eps) * weight, the mean taken in float32.
	RMSNorm(x, weight *Tensor, eps float32) (*Tensor, error)
	// RoPE rotates x [L, heads*HeadDim] into a new tensor by the table r;
	// pos[p] holds the three position streams of row p (equal for plain
	// text).
	RoPE(x *Tensor, pos [][3]int, r RoPE) (*Tensor, error)
	// Attention is scaled-dot-product attention with grouped query heads:
	// q [Lq, Heads*d], k and v [Lk, KVHeads*d]; query head h reads kv head
	// h/(Heads/KVHeads); out [Lq, Heads*d]. o selects the mask (causal,
	// segments, window; see AttentionOptions). Implementations use an
	// online softmax so memory stays O(L·d).
	Attention(q, k, v *Tensor, o AttentionOptions) (*Tensor, error)
	// LayerNorm normalises each row of x [rows, n]:
	// (x-mean)/sqrt(var+eps)*weight + bias, mean and (biased) variance in
	// float32 over the row; weight and bias are [n], bias may be nil.
	LayerNorm(x, weight, bias *Tensor, eps float32) (*Tensor, error)
	// GELU applies GELU elementwise: GELUErf (exact, erf) or GELUTanh
	// (tanh approximation).
	GELU(x *Tensor, kind GELUKind) (*Tensor, error)
	// AddBias returns x [rows, n] with bias [n] added to every row (bias in
	// any float type the backend binds: F32/F16/BF16, or an activation).
	AddBias(x, bias *Tensor) (*Tensor, error)
	// Add returns a + b (same shape).
	Add(a, b *Tensor) (*Tensor, error)
	// AddRows returns a copy of x [L, n] with row i of y [len(rows), n]
	// added to row rows[i] (DeepStack features at visual positions).
	AddRows(x *Tensor, rows []int, y *Tensor) (*Tensor, error)
	// GatherBlend returns out [len(ids)/k, n]: row i is Σ_j weights[i*k+j] ·
	// table[ids[i*k+j]] over j = 0..k-1, each product rounded to float32
	// and the sum accumulated in float32 in j order (as torch computes
	// embed(idx) * w, then sums the k terms in order). table is [rows, n]:
	// a bound weight (F32, F16, BF16) or an activation. An id outside
	// [0, rows), len(ids) != len(weights) or len(ids)%k != 0 is an error
	// (see CheckBlend). (The vision tower's bilinear interpolation of its
	// learned position embeddings: k = 4 corners.)
	GatherBlend(table *Tensor, ids []int, weights []float32, k int) (*Tensor, error)
	// Im2Col unfolds x, channels-last [N*H*W, C] (N images of H×W pixels,
	// C channels), for a 2-D convolution with a KH×KW kernel, strides SH,
	// SW and zero padding PH, PW (see Conv2D): out [N*OH*OW, C*KH*KW] with
	// OH = (H+2PH-KH)/SH+1, OW likewise; row (n, oy, ox), column
	// (c, ky, kx) in that order (c outermost) = x[n, oy*SH-PH+ky,
	// ox*SW-PW+kx, c], or 0 outside the picture. The column order matches
	// a torch Conv2d weight [Cout, Cin, KH, KW] flattened to
	// [Cout, Cin*KH*KW], so a convolution is MatMul(Im2Col(x), w) (+
	// AddBias), channels-last out. (The audio tower's stride-2 3×3
	// convolutions, and with KH = H, KW = 1 the reshuffle
	// [N, F, T, C] -> [N*T, C*F] before its conv_out.)
	Im2Col(x *Tensor, g Conv2D) (*Tensor, error)
	// Reshape returns x [rows, cols] as a tensor of another shape with as
	// many values, in the same row-major order. It may share x's storage:
	// it is valid while x lives, and freeing it releases nothing of x's.
	Reshape(x *Tensor, rows, cols int) (*Tensor, error)
	// Transpose returns xᵀ [cols, rows] of x [rows, cols].
	Transpose(x *Tensor) (*Tensor, error)
	// Softmax returns the softmax of every row of scale·x [rows, n] in
	// float32: each scaled value rounded to float32, the row's maximum
	// subtracted before the exponential. With ranges (one non-empty
	// [lo, hi) per row, see CheckRanges) row i's softmax covers its
	// columns [lo, hi) and its other columns are 0; nil: whole rows.
	Softmax(x *Tensor, scale float32, ranges [][2]int) (*Tensor, error)
	// SpanMeans returns out [len(spans), n]: row i is the mean of rows
	// [spans[i][0], spans[i][1]) of x [rows, n], summed in row order in
	// float32 and divided by their count (see CheckSpans).
	SpanMeans(x *Tensor, spans [][2]int) (*Tensor, error)
	// RowDots returns out [rows, 1]: the dot product of row i of a with row
	// i of b (both [rows, n]), accumulated in at least float32.
	RowDots(a, b *Tensor) (*Tensor, error)
	// PairFeatures returns out [rows, 4n] whose row i is [a_i, b_i,
	// a_i·b_i, |a_i−b_i|] (elementwise) for the rows of a and b [rows, n]:
	// the matching features of a pair of vectors.
	PairFeatures(a, b *Tensor) (*Tensor, error)
	// GroupMatMul is a block-diagonal product of groups: x [M, G·K] and w
	// [G·N, K] (float32 activations), out [M, G·N] with out[:, gN:(g+1)N] =
	// x[:, gK:(g+1)K] · w[gN:(g+1)N, :]ᵀ (per-head linear maps, as
	// attention heads use them). groups = 1 is MatMul.
	GroupMatMul(x, w *Tensor, groups int) (*Tensor, error)
	// Route turns router logits [L, E] into the top-k experts of every row:
	// softmax over all E (float32), the k largest (ties to the lower index,
	// descending order), renormalised to sum 1 when norm is set. ids is an
	// I32 tensor [L, k] and weights an F32 tensor [L, k]; both can be Read.
	Route(logits *Tensor, k int, norm bool) (ids, weights *Tensor, err error)
	// MoE applies the routed experts as a gathered matmul (rows grouped by
	// expert, one GEMM per active expert): out[p] = Σ_j weights[p,j] ·
	// expert[ids[p,j]](x[p]). x [L, hidden], out [L, hidden].
	MoE(x, ids, weights *Tensor, ex Experts) (*Tensor, error)

	// Close releases the backend. Tensors must not be used afterwards.
	Close() error
}

// RowChunker is an optional extension of Backend (found by type assertion):
// with it the model runs every layer over chunks of rows, so activation
// memory is bounded by the chunk instead of the whole prompt (K and V of
// one layer still cover every row; a chunk's queries are the last rows of
// its keys, which causal Attention takes as they are).
type RowChunker interface {
	// Rows returns a view of rows [lo, hi) of an activation, sharing its
	// storage: valid while t lives; freeing the view releases nothing.
	Rows(t *Tensor, lo, hi int) (*Tensor, error)
	// Concat stacks activations with the same column count.
	Concat(ts ...*Tensor) (*Tensor, error)
}

// ChunkSizer is an optional extension of a RowChunker (found by type
// assertion): the rows per chunk the backend runs best at. A model that
// chunks rows uses it when no chunk size is set explicitly, else its own
// default. Chunking changes no result (a row's ops are independent of the
// other rows', and attention spans every key either way); the size trades
// activation memory, bounded by the chunk, against the fill of the
// backend's tiles (the Metal MoE kernels' 64-token tiles hold a chunk's
// rows × top-k / experts tokens each).
type ChunkSizer interface {
	// PreferredChunkRows is the rows per chunk; 0 or less means no
	// preference.
	PreferredChunkRows() int
}

// Interruptible is an optional extension of Backend (found by type
// assertion) for backends whose ops can run long: one op over a long
// record (attention over tens of thousands of keys, a matmul over every
// row) can take seconds, and a caller that checks its context only between
// ops would keep the machine busy that long after the decision was
// abandoned. While an interrupt is set, the backend checks ctx between the
// work items of its ops (the CPU backend between the chunks its workers
// pull; the Metal backend at command-buffer boundaries), and an op that
// sees ctx done stops early and returns an error wrapping ctx.Err(). The
// results of an interrupted op are discarded; the bits of an op that runs
// to the end are the same as without an interrupt.
type Interruptible interface {
	// Interrupt makes the backend's ops give up once ctx is done, until
	// the returned function is called (which restores the previous
	// interrupt). A backend serves one decision at a time: the interrupt
	// applies to every op called meanwhile, from any goroutine.
	Interrupt(ctx context.Context) (restore func())
}

// Options configure a backend when it is opened.
type Options struct {
	// Threads is the number of CPU worker threads; 0 means all cores.
	Threads int
	// Precise makes matmuls on block-quantized weights read float32
	// activations (the weights dequantized exactly) instead of activations
	// quantized to 8-bit blocks as llama.cpp does: slower, and the mode the
	// float64 references are matched in.
	Precise bool
}

// Factory opens a backend.
type Factory func(Options) (Backend, error)

var (
	mu        sync.Mutex
	factories = map[string]Factory{}
)

// Register makes a backend available under name. It panics on a duplicate
// name, since that is a programming error caught at init.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	factories[name] = f
}

// Open opens the named backend.
func Open(name string, opts Options) (Backend, error) {
	mu.Lock()
	f, ok := factories[name]
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("backend: unknown backend %q (available: %v)", name, Names())
	}
	if opts.Threads < 0 {
		return nil, fmt.Errorf("backend: threads must be >= 0, got %d", opts.Threads)
	}
	return f(opts)
}

// Names lists the registered backends, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	var ns []string
	for n := range factories {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// Scope holds the intermediate tensors of one computation so that they are
// freed together: Keep records the tensor an op returned (passing its
// error through), Drop frees some early (so the next op can reuse their
// memory) and Free releases the rest. A model function makes one with
// NewScope, defers Free, and wraps every op whose result is temporary in
// Keep; what it returns to its caller it does not Keep.
type Scope struct {
	b    Backend
	live []*Tensor
}

// NewScope returns an empty scope over b.
func NewScope(b Backend) *Scope { return &Scope{b: b} }

// Keep records t for Free and returns it, or returns err when the op that
// made t failed.
func (s *Scope) Keep(t *Tensor, err error) (*Tensor, error) {
	if err != nil {
		return nil, err
	}
	s.live = append(s.live, t)
	return t, nil
}

// Drop frees ts now; Free will not free them again.
func (s *Scope) Drop(ts ...*Tensor) {
	for _, t := range ts {
		if i := slices.Index(s.live, t); i >= 0 {
			s.live = slices.Delete(s.live, i, i+1)
		}
	}
	s.b.Free(ts...)
}

// Free frees every tensor kept and not dropped.
func (s *Scope) Free() {
	s.b.Free(s.live...)
	s.live = nil
}
