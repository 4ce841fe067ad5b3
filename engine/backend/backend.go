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

// RoPE describes a rotary position embedding in the NeoX "rotate half"
// layout: dimension i of a head pairs with i+HeadDim/2 and turns by
// pos*Theta^(-2i/HeadDim). With Sections set (M-RoPE), each of the
// HeadDim/2 frequencies takes its position from one of three streams
// (temporal, height, width). Interleaved M-RoPE (Qwen3-VL/Omni) assigns
// frequency i to H when i%3==1 and i < 3*Sections[1], to W when i%3==2 and
// i < 3*Sections[2], and to T otherwise; the chunked layout (Qwen2-VL) gives
// the first Sections[0] frequencies to T, the next Sections[1] to H and the
// rest to W. With all sections zero every frequency uses stream 0.
type RoPE struct {
	HeadDim     int
	Theta       float64
	Sections    [3]int
	Interleaved bool
}

// Expert is one SiLU-gated feed-forward expert: down(silu(gate x) * up x).
type Expert struct {
	Gate *Tensor // [ffn, hidden]
	Up   *Tensor // [ffn, hidden]
	Down *Tensor // [hidden, ffn]
}

// Backend is the closed op set of the thinker forward. Every op returns a new
// tensor and leaves its inputs untouched; shapes are checked and a mismatch
// is an error, never a panic.
type Backend interface {
	// Name is the registry name ("cpu", "metal").
	Name() string
	// Threads reports how many worker threads the backend uses (1 for a GPU).
	Threads() int

	// Weight binds a checkpoint tensor without copying its bytes. Its type
	// must be one the backend supports; 1-D tensors (norm weights) are [n].
	Weight(t *weights.Tensor) (*Tensor, error)
	// Upload copies host float32 data into a new [rows, cols] tensor.
	Upload(data []float32, rows, cols int) (*Tensor, error)
	// Read returns the float32 contents of t (executing pending work first).
	Read(ctx context.Context, t *Tensor) ([]float32, error)
	// Free releases t's storage; using t afterwards is an error. Weights
	// bound with Weight are not freed (the mapping owns them).
	Free(ts ...*Tensor)

	// Embed gathers rows of table [vocab, dim] for ids: out [len(ids), dim].
	// An id outside [0, vocab) is an error.
	Embed(table *Tensor, ids []int) (*Tensor, error)
	// MatMul computes x Wᵀ: x [M, K], w [N, K] in any supported type, out [M, N].
	MatMul(x, w *Tensor) (*Tensor, error)
	// RMSNorm normalises every group of len(weight) consecutive values of x
	// (a whole row, or one head when x is [rows, heads*headDim]):
	// y = x / sqrt(mean(x²) + eps) * weight, the mean taken in float32.
	RMSNorm(x, weight *Tensor, eps float32) (*Tensor, error)
	// RoPE rotates x [L, heads*HeadDim] in place of a copy; pos[p] holds the
	// three position streams of row p (equal for plain text).
	RoPE(x *Tensor, pos [][3]int, r RoPE) (*Tensor, error)
	// Attention is causal scaled-dot-product attention with grouped query
	// heads: q [L, nHead*headDim], k and v [L, nKV*headDim]; query head h
	// reads kv head h/(nHead/nKV); out [L, nHead*headDim]. Implementations
	// use an online softmax so memory stays O(L·headDim).
	Attention(q, k, v *Tensor, nHead, nKV int, scale float32) (*Tensor, error)
	// Add returns a + b (same shape).
	Add(a, b *Tensor) (*Tensor, error)
	// AddRows returns a copy of x [L, n] with row i of y [len(rows), n]
	// added to row rows[i] (DeepStack features at visual positions).
	AddRows(x *Tensor, rows []int, y *Tensor) (*Tensor, error)
	// Route turns router logits [L, E] into the top-k experts of every row:
	// softmax over all E (float32), the k largest (ties to the lower index,
	// descending order), renormalised to sum 1 when norm is set. ids is an
	// I32 tensor [L, k] and weights an F32 tensor [L, k]; both can be Read.
	Route(logits *Tensor, k int, norm bool) (ids, weights *Tensor, err error)
	// MoE applies the routed experts as a gathered matmul (rows grouped by
	// expert, one GEMM per active expert): out[p] = Σ_j weights[p,j] ·
	// expert[ids[p,j]](x[p]). x [L, hidden], out [L, hidden].
	MoE(x, ids, weights *Tensor, experts []Expert) (*Tensor, error)

	// Close releases the backend. Tensors must not be used afterwards.
	Close() error
}

// RowChunker is an optional extension of Backend (found by type assertion):
// with it the model runs every layer over chunks of rows, so activation
// memory is bounded by the chunk instead of the whole prompt (K and V of
// one layer still cover every row).
type RowChunker interface {
	// Rows returns a view of rows [lo, hi) of an activation, sharing its
	// storage: valid while t lives; freeing the view releases nothing.
	Rows(t *Tensor, lo, hi int) (*Tensor, error)
	// Concat stacks activations with the same column count.
	Concat(ts ...*Tensor) (*Tensor, error)
	// AttentionTail is Attention for queries that are the last Lq of Lk
	// positions: q [Lq, nHead*headDim], k and v [Lk, nKV*headDim], Lk >= Lq;
	// query row i attends keys 0..Lk-Lq+i.
	AttentionTail(q, k, v *Tensor, nHead, nKV int, scale float32) (*Tensor, error)
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

// Streams returns, for each of the HeadDim/2 frequencies, which position
// stream (0 temporal, 1 height, 2 width) it reads. All-zero sections select
// stream 0 everywhere; otherwise the sections must sum to HeadDim/2.
func (r RoPE) Streams() ([]int, error) {
	half := r.HeadDim / 2
	if half <= 0 || r.HeadDim%2 != 0 {
		return nil, fmt.Errorf("rope head dim %d must be even and positive", r.HeadDim)
	}
	s := make([]int, half)
	sec := r.Sections
	if sec == [3]int{} {
		return s, nil
	}
	if sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[0]+sec[1]+sec[2] != half {
		return nil, fmt.Errorf("mrope sections %v do not sum to %d frequencies", sec, half)
	}
	for i := range s {
		switch {
		case r.Interleaved && i%3 == 1 && i < 3*sec[1]:
			s[i] = 1
		case r.Interleaved && i%3 == 2 && i < 3*sec[2]:
			s[i] = 2
		case r.Interleaved:
			s[i] = 0
		case i < sec[0]:
			s[i] = 0
		case i < sec[0]+sec[1]:
			s[i] = 1
		default:
			s[i] = 2
		}
	}
	return s, nil
}
