package metal

// The cost model: how long a dispatch would keep a slow Apple GPU busy,
// estimated from the bytes it moves and the floating-point operations it
// does. The backend uses it (and only it) to decide where command buffers
// end: macOS stops a command buffer that holds the GPU for seconds on a Mac
// with a display, and a cancelled request can only stop at a buffer
// boundary. The chip is deliberately the slowest one the backend runs on
// (the M1 base chip), so a buffer estimated at a quarter second there is
// shorter on every other Mac.
const (
	// chipBandwidth is the M1's memory bandwidth in bytes per second.
	chipBandwidth = 68e9
	// chipFLOPs is the M1's float32 peak in floating-point operations per
	// second (8 cores × 128 ALUs × 2 × 1.278 GHz).
	chipFLOPs = 2.6e12
	// launchSeconds is the fixed cost of one dispatch (setup, the drain of a
	// barrier), so that a batch of tiny dispatches is not estimated at zero.
	launchSeconds = 5e-6

	// bufferSeconds is the estimated GPU work after which the open batch is
	// committed as one command buffer.
	bufferSeconds = 0.25
	// bufferDispatches is the most dispatches one command buffer holds, so
	// that a cancelled decision stops within a few dozen launches and the
	// GPU starts on the first ones while the host encodes the rest.
	bufferDispatches = 48
	// maxInFlight is how many committed command buffers may wait unfinished
	// while the host encodes the next one (as ggml-metal): the GPU always
	// has the next buffer queued, and a cancelled decision waits for these
	// few only (Metal itself would queue 64).
	maxInFlight = 2
	// calibrateSeconds is the least estimated work of a command buffer
	// whose measured GPU time calibrates the commit policy (calibrate).
	calibrateSeconds = 0.02
	// maxSlowdown bounds the measured slowdown against the estimate.
	maxSlowdown = 32
	// slowdownDecay is how much of the slowdown above 1 fades with each
	// calibrating buffer that is not as slow.
	slowdownDecay = 0.02
	// maxEstimates bounds the estimates kept for buffers whose time was
	// not reported yet.
	maxEstimates = 256
	// opSeconds is the estimated work one dispatch may hold before its op
	// splits it (rows of a matmul or of the experts, query chunks of
	// attention): one dispatch is never split across buffers, so this is
	// what keeps every buffer near bufferSeconds.
	opSeconds = 0.2
)

// cost is one dispatch's estimated work.
type cost struct {
	bytes float64 // bytes read and written in device memory
	flops float64 // floating-point operations
}

// seconds is the roofline estimate on the conservative chip: the dispatch
// is as slow as the slower of its memory traffic and its arithmetic.
func (c cost) seconds() float64 {
	return launchSeconds + max(c.bytes/chipBandwidth, c.flops/chipFLOPs)
}

// add returns the sum of two costs.
func (c cost) add(o cost) cost { return cost{c.bytes + o.bytes, c.flops + o.flops} }

// streamCost is the cost of a kernel that reads and writes n float32 values
// per element of its grid a fixed number of times: bytes moved, flops per
// element.
func streamCost(elems, bytesPerElem, flopsPerElem int) cost {
	return cost{bytes: float64(elems) * float64(bytesPerElem), flops: float64(elems) * float64(flopsPerElem)}
}

// matmulCost is the cost of y [n, m] = x [n, k] · wᵀ where w's rows take
// rowBytes (and sRowBytes of MLX scales and of biases): every weight row is
// read once, x and y once (the tiles' reuse is served by the caches).
func matmulCost(m, n, k, rowBytes, sRowBytes int) cost {
	return cost{
		bytes: float64(m)*float64(rowBytes+2*sRowBytes) + 4*float64(n)*float64(k) + 4*float64(n)*float64(m),
		flops: 2 * float64(m) * float64(n) * float64(k),
	}
}

// attentionCost is the cost of flash attention for nq queries of heads
// heads (head size d) in threadgroups of perGroup queries, each seeing keys
// keys on average: every threadgroup streams the keys and values of its
// kv head from memory (at 64k keys they are far larger than any cache).
func attentionCost(nq, heads, d, perGroup int, keys float64) cost {
	groups := float64((nq + perGroup - 1) / perGroup)
	return cost{
		bytes: groups*float64(heads)*keys*float64(d)*8 + 8*float64(nq)*float64(heads*d),
		flops: 4 * float64(nq) * float64(heads) * float64(d) * keys,
	}
}
