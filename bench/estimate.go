package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/internal/chips"
	"github.com/clefrt/clef/quant"
)

// The estimate of `clef bench kernels --estimate CHIP`: a thinker prefill
// enumerated launch by launch as the Metal backend makes it (Pass), each
// launch's bytes and FLOPs from the backend's own cost model (metal/cost.go,
// mirrored here), and its time on a chip from the chip table's bandwidth
// and FLOP rates at an assumed efficiency per kernel class (Efficiencies).
// Nothing here is measured: it is a roofline with stated assumptions.

// WeightFormat is how a weight matrix is stored, as the backend sizes it.
type WeightFormat struct {
	Suffix     string // kernel suffix: "q4_K", "bf16", "f32"
	BlockElems int    // weights per block
	BlockBytes int    // bytes per block
}

// Formats the estimate uses.
var (
	FormatQ4K  = WeightFormat{"q4_K", 256, 144}
	FormatBF16 = WeightFormat{"bf16", 1, 2}
	FormatF32  = WeightFormat{"f32", 1, 4}
)

// rowBytes is the storage of one row of cols weights.
func (f WeightFormat) rowBytes(cols int) int { return cols / f.BlockElems * f.BlockBytes }

// formatOf is the WeightFormat of storage type t (quant's format table).
func formatOf(t quant.Type) (WeightFormat, error) {
	f, err := quant.FormatOf(t)
	if err != nil {
		return WeightFormat{}, fmt.Errorf("bench: estimate: %w", err)
	}
	return WeightFormat{f.Name, f.BlockElems, f.BlockBytes}, nil
}

// ModelShape is what a pass's launches depend on.
type ModelShape struct {
	Layers, Hidden, Heads, KVHeads, HeadDim int
	Experts, TopK, FFN                      int
	Weights                                 WeightFormat // q, k, v, o and the experts
	Router, Embed                           WeightFormat
	// File, when set, names the clef quantize mixture the matrices come
	// from ("q4_k_m"): each one then takes the type convert.TensorType
	// gives its role and layer (the one place the mixtures are written
	// down; q4_k_m stores attn_v and ffn_down_exps in q6_K in 24 of the 48
	// layers and keeps the router in f32) instead of Weights, Router and
	// Embed.
	File string
	// Chunk is the rows a layer runs at a time (qwen3moe.DefaultChunk, or
	// the backend's preference: KernelSet.Chunk): keys and values for
	// every row, the rest per chunk.
	Chunk int
	// Parted: experts stored as separate tensors (a launch per expert)
	// instead of one stacked tensor (one launch per projection).
	Parted bool
}

// Thinker is the Qwen3-Omni thinker at 4-bit as clef quantize --type
// q4_k_m writes it (q4_K, q6_K attn_v and ffn_down_exps in 24 layers, the
// router in f32; experts stacked).
var Thinker = ModelShape{Layers: 48, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, Experts: 128, TopK: 8, FFN: 768,
	Weights: FormatQ4K, Router: FormatF32, Embed: FormatQ4K, File: "q4_k_m", Chunk: 512}

// format is the storage of the matrix of role in layer (-1: outside the
// layers) with rows of cols: File's mixture when set (with clef quantize's
// fallback for rows its blocks do not divide), else Weights, Router or
// Embed.
func (s ModelShape) format(role release.Role, layer, cols int) (WeightFormat, error) {
	if s.File == "" {
		switch role {
		case release.RoleRouter:
			return s.Router, nil
		case release.RoleEmbed:
			return s.Embed, nil
		}
		return s.Weights, nil
	}
	ft, err := convert.ParseFileType(s.File)
	if err != nil {
		return WeightFormat{}, fmt.Errorf("bench: estimate: %w", err)
	}
	return formatOf(convert.Fallback(convert.TensorType(ft, role, layer, s.Layers, s.Heads/s.KVHeads), cols))
}

// Class is what limits a kernel and which efficiency applies.
type Class string

// Kernel classes.
const (
	ClassStream    Class = "stream"    // norms, RoPE, element-wise, routing, gathers
	ClassMatVec    Class = "matvec"    // mul_mv (≤ 8 tokens)
	ClassMatMul    Class = "matmul"    // mul_mm: dense projections
	ClassMatMulF   Class = "matmul-f"  // mul_mm of f32 and bf16 weights: float tiles
	ClassMoE       Class = "moe"       // mul_mm_id: gathered expert matmuls
	ClassAttention Class = "attention" // flash attention
	// The M5 path's matmuls on the neural accelerators: half operands
	// (mul_mm_t_*, moe_*_t_*) and int8 ones on q8_K activations
	// (mul_mm_t8_*, moe_*_t8_*).
	ClassMatMulT Class = "matmul-t"
	ClassMoET    Class = "moe-t"
	ClassMatMul8 Class = "matmul8"
	ClassMoE8    Class = "moe8"
	// The int8 kernels of q6_K weights (mul_mm_t8_q6_K, moe_*_t8_q6_K):
	// sub-blocks of 16 with their own scales, so twice the integer
	// epilogue of q4_K's and heavier unpacking per MAC.
	ClassMatMul8Q6 Class = "matmul8-q6"
	ClassMoE8Q6    Class = "moe8-q6"
)

// int8Class is the class of the int8 tensor kernel for weights of suffix
// (mul_mm_t8_*, or moe_*_t8_* when moe).
func int8Class(suffix string, moe bool) Class {
	switch {
	case suffix == "q6_K" && moe:
		return ClassMoE8Q6
	case suffix == "q6_K":
		return ClassMatMul8Q6
	case moe:
		return ClassMoE8
	}
	return ClassMatMul8
}

// computeClasses are the classes of the prefill's matmuls and attention:
// what PrefillPeak measures and BreakEven varies.
var computeClasses = []Class{ClassMatMul, ClassMatMulF, ClassMoE, ClassAttention, ClassMatMulT, ClassMoET, ClassMatMul8, ClassMoE8, ClassMatMul8Q6, ClassMoE8Q6}

// isCompute reports whether c is one of computeClasses.
func isCompute(c Class) bool {
	for _, k := range computeClasses {
		if k == c {
			return true
		}
	}
	return false
}

// Launch is one dispatch of a pass with the backend's cost model's work.
type Launch struct {
	Kernel string
	Class  Class
	Layer  int // -1 outside the decoder layers
	Bytes  float64
	FLOPs  float64
}

// The backend's cost model (metal/cost.go), mirrored: the conservative
// chip it splits long ops on, and the cost of each kind of launch.
const (
	costBandwidth = 68e9   // metal chipBandwidth
	costFLOPs     = 2.6e12 // metal chipFLOPs
	costLaunch    = 5e-6   // metal launchSeconds
	costOpSeconds = 0.2    // metal opSeconds
	mvMaxTokens   = 8      // metal mvMaxTokens
)

func costSeconds(bytes, flops float64) float64 {
	return costLaunch + max(bytes/costBandwidth, flops/costFLOPs)
}

// stream is metal's streamCost.
func stream(kernel string, layer, elems, bytesPer, flopsPer int) Launch {
	return Launch{Kernel: kernel, Class: ClassStream, Layer: layer, Bytes: float64(elems) * float64(bytesPer), FLOPs: float64(elems) * float64(flopsPer)}
}

// matmulWork is metal's matmulCost: y [n, m] = x [n, k] · wᵀ.
func matmulWork(m, n, k, rowBytes int) (bytes, flops float64) {
	return float64(m)*float64(rowBytes) + 4*float64(n)*float64(k) + 4*float64(n)*float64(m), 2 * float64(m) * float64(n) * float64(k)
}

// attentionWork is metal's attentionCost.
func attentionWork(nq, heads, d, perGroup int, keys float64) (bytes, flops float64) {
	groups := float64((nq + perGroup - 1) / perGroup)
	return groups*float64(heads)*keys*float64(d)*8 + 8*float64(nq)*float64(heads*d), 4 * float64(nq) * float64(heads) * float64(d) * keys
}

// pass builds a Pass's launch list.
type pass struct {
	s      ModelShape
	fused  bool
	tensor bool // the M5 path: the tensor kernels where metal/tensor.go has them
	layer  int
	f      layerFormats // the layer's matrices
	out    []Launch
	chunks int
}

// layerFormats is the storage of a layer's matrices (ModelShape.format).
type layerFormats struct {
	q, k, v, o, router, gate, up, down WeightFormat
}

// formats returns layer's formats, an error when one does not fit the
// shape's rows.
func (s ModelShape) formats(layer int) (layerFormats, error) {
	var f layerFormats
	for _, r := range []struct {
		dst  *WeightFormat
		role release.Role
		cols int
	}{{&f.q, release.RoleAttnQ, s.Hidden}, {&f.k, release.RoleAttnK, s.Hidden}, {&f.v, release.RoleAttnV, s.Hidden},
		{&f.o, release.RoleAttnOut, s.Heads * s.HeadDim}, {&f.router, release.RoleRouter, s.Hidden},
		{&f.gate, release.RoleFFNGate, s.Hidden}, {&f.up, release.RoleFFNUp, s.Hidden}, {&f.down, release.RoleFFNDown, s.FFN}} {
		w, err := s.format(r.role, layer, r.cols)
		if err != nil {
			return f, err
		}
		if w.BlockElems <= 0 || w.BlockBytes <= 0 || r.cols%w.BlockElems != 0 {
			return f, fmt.Errorf("bench: estimate: format %+v does not fit rows of %d", w, r.cols)
		}
		*r.dst = w
	}
	return f, nil
}

// The formats metal/tensor.go has tensor kernels for, by kernel suffix:
// mul_mm_t_* (tensorTypes), mul_mm_t8_* (tensorInt8Types: q4_K and q6_K
// on q8_K activations from quant_q8k_rows), moe_gu_t_*/moe_down_t_*
// (tensorMoETypes) and moe_gu_t8_*/moe_down_t8_* (tensorMoE8Types, gate-up
// and down each of one of them, hidden and FFN multiples of 256); the
// tensor attention is flash_attn_t_d128 (tensorAttnDim), 64 queries per
// threadgroup (tensorAttnQueries).
var (
	tensorMatMulSuffixes = map[string]bool{"f16": true, "q8_0": true, "q5_K": true, "mlx4": true, "mlx8": true}
	tensorInt8Suffixes   = map[string]bool{"q4_K": true, "q6_K": true}
	tensorMoESuffixes    = map[string]bool{"f16": true, "q8_0": true, "q5_1": true, "q5_0": true, "q4_1": true, "q4_0": true,
		"q6_K": true, "q5_K": true, "q4_K": true, "q3_K": true, "q2_K": true, "mlx4": true, "mlx8": true}
	tensorMoE8Suffixes = map[string]bool{"q4_K": true, "q6_K": true}
)

// q8kRowBytes is the bytes of a row of cols activations as q8_K (292 per
// 256: float d, 256 codes, 16 int16 sums).
func q8kRowBytes(cols int) int { return cols / 256 * 292 }

// quantQ8K is metal's quantQ8K: one quant_q8k_rows launch over rows x cols
// (streamCost of 5 bytes and 4 FLOPs a value).
func (p *pass) quantQ8K(rows, cols int) { p.add(stream("quant_q8k_rows", p.layer, rows*cols, 5, 4)) }

const (
	tensorAttnDim     = 128
	tensorAttnQueries = 64
)

func (p *pass) add(l Launch) { p.out = append(p.out, l) }

// matmul is metal's Backend.matmul (no row splits: at the chunk's rows no
// projection comes near opSeconds).
func (p *pass) matmul(m, n, k int, f WeightFormat) {
	b, fl := matmulWork(m, n, k, f.rowBytes(k))
	kernel, class := "mul_mm_"+f.Suffix, ClassMatMul
	if f.Suffix == "f32" || f.Suffix == "bf16" {
		class = ClassMatMulF // matmul.metal's float tiles
	}
	switch {
	case n <= mvMaxTokens:
		kernel, class = "mul_mv_"+f.Suffix, ClassMatVec
	case p.tensor && tensorInt8Suffixes[f.Suffix] && k%256 == 0:
		// metal tensorMatMulInt8: x to q8_K once, then the int8 kernel,
		// which reads the q8_K rows instead of f32 ones.
		p.quantQ8K(n, k)
		kernel, class = "mul_mm_t8_"+f.Suffix, int8Class(f.Suffix, false)
		b += float64(n) * float64(q8kRowBytes(k)-4*k)
	case p.tensor && tensorMatMulSuffixes[f.Suffix]:
		kernel, class = "mul_mm_t_"+f.Suffix, ClassMatMulT
	}
	p.add(Launch{Kernel: kernel, Class: class, Layer: p.layer, Bytes: b, FLOPs: fl})
}

// rmsNorm is metal's RMSNorm over elems values.
func (p *pass) rmsNorm(elems int) { p.add(stream("rms_norm_f32", p.layer, elems, 8, 4)) }

// attention is metal's Attention, causal, for the last nq of lk keys, in
// query chunks each under opSeconds on the conservative chip.
func (p *pass) attention(nq, lk int) {
	s := p.s
	kernel, perGroup := "flash_attn_f32", 8
	limbs := false
	switch s.HeadDim {
	case 32, 64, 72, 128:
		kernel, perGroup = fmt.Sprintf("flash_attn_mma_d%d", s.HeadDim), 32
		if p.tensor && s.HeadDim == tensorAttnDim && nq > mvMaxTokens {
			kernel, perGroup, limbs = fmt.Sprintf("flash_attn_t_d%d", tensorAttnDim), tensorAttnQueries, true
		}
	}
	if limbs {
		// metal attnKVLimbsOf: the int8 limbs of every key and value, once
		// a call (streamCost of 7 bytes and 12 FLOPs an element each).
		n := lk * s.KVHeads * s.HeadDim
		p.add(stream("attn_limbs_qk", p.layer, n, 7, 12))
		p.add(stream("attn_limbs_v", p.layer, n, 7, 12))
	}
	keys := func(q0, n int) float64 { return float64(lk-nq+q0+1) + float64(n-1)/2 }
	for q0 := 0; q0 < nq; {
		n := nq - q0
		for n > perGroup && costSeconds(attentionWork(n, s.Heads, s.HeadDim, perGroup, keys(q0, n))) > costOpSeconds {
			n = max(perGroup, (n/2+perGroup-1)/perGroup*perGroup)
		}
		b, fl := attentionWork(n, s.Heads, s.HeadDim, perGroup, keys(q0, n))
		if limbs { // metal attnQLimbs: the chunk's queries
			p.add(stream("attn_limbs_qk", p.layer, n*s.Heads*s.HeadDim, 7, 12))
		}
		p.add(Launch{Kernel: kernel, Class: ClassAttention, Layer: p.layer, Bytes: b, FLOPs: fl})
		q0 += n
	}
}

// moeMatmul is one gathered projection of c rows of the unfused kernel
// set (mul_mm_id_*, costed as metal's moeCost).
func (p *pass) moeMatmul(rows, cols, c int, w WeightFormat) {
	s := p.s
	E, k := s.Experts, s.TopK
	rb := w.rowBytes(cols)
	kernel := "mul_mm_id_" + w.Suffix
	if s.Parted {
		p.add(stream("moe_grid", p.layer, E, 16, 0))
		b, fl := matmulWork(rows, c, cols, rb)
		for range E {
			p.add(Launch{Kernel: kernel, Class: ClassMoE, Layer: p.layer, Bytes: b, FLOPs: fl})
		}
		return
	}
	nTiles := c*k/32 + E + 1
	tiles := stream("moe_tiles", p.layer, E, 4, 0)
	tiles.Bytes += float64(nTiles) * 8
	p.add(tiles)
	entries := c * k
	b, fl := matmulWork(rows, entries, cols, rb)
	b += float64(min(E, entries)-1) * float64(rows) * float64(rb)
	p.add(Launch{Kernel: kernel, Class: ClassMoE, Layer: p.layer, Bytes: b, FLOPs: fl})
}

// moe is metal's MoE for c rows (one launch chunk). fused is the backend
// of issue 14: one tile table (or per-expert grid) per layer, gate and up
// in one launch writing SiLU(gate)·up (moe_gu_*), then moe_down_*; 64-token
// tiles. Unfused is the earlier kernel set (mul_mm_id_* three times and
// silu_mul), kept to reproduce the earlier estimates.
func (p *pass) moe(c int) {
	s := p.s
	p.add(stream("moe_map", p.layer, c*s.TopK, 12, 0))
	if p.fused {
		p.moeFused(c)
		return
	}
	p.moeMatmul(s.FFN, s.Hidden, c, p.f.gate)
	p.moeMatmul(s.FFN, s.Hidden, c, p.f.up)
	p.add(stream("silu_mul_f32", p.layer, c*s.TopK*s.FFN, 12, 4))
	p.moeMatmul(s.Hidden, s.FFN, c, p.f.down)
	p.add(stream("moe_combine_f32", p.layer, c*s.Hidden, 4*(2*s.TopK+1), 2*s.TopK))
}

// moeFused is the fused MoE's launches for c rows, costed as metal's
// moeGateUp and moeDown cost them (moeLaunchCost): the tile table (one
// moe_tiles, or one moe_grid when the experts are stored one by one), then
// gate+up (both projections' weights, x read and h written once) and down,
// one gathered launch each, or one per expert, each bounded by c rows,
// when parted; then the combine. h is half for every format but f32 and
// bf16 (the int8 path too, which quantizes it with quant_q8k_rows_h); the
// routed entries' outputs are bf16 for the block formats (moe_combine_bf16),
// f32 for f32, bf16 and f16 experts.
func (p *pass) moeFused(c int) {
	s := p.s
	E, k := s.Experts, s.TopK
	g, d := p.f.gate, p.f.down
	gu, down := "moe_gu_"+g.Suffix, "moe_down_"+d.Suffix
	guClass, downClass := ClassMoE, ClassMoE
	// metal tensorMoE8Kernels: both gate-up's and down's formats have int8
	// kernels (h passes between them as q8_K whatever the formats), hidden
	// and FFN whole q8_K blocks; else tensorMoEKernels per projection.
	int8 := p.tensor && tensorMoE8Suffixes[g.Suffix] && tensorMoE8Suffixes[d.Suffix] && s.Hidden%256 == 0 && s.FFN%256 == 0
	switch {
	case int8:
		gu, down = "moe_gu_t8_"+g.Suffix, "moe_down_t8_"+d.Suffix
		guClass, downClass = int8Class(g.Suffix, true), int8Class(d.Suffix, true)
	case p.tensor:
		if tensorMoESuffixes[g.Suffix] {
			gu, guClass = "moe_gu_t_"+g.Suffix, ClassMoET
		}
		if tensorMoESuffixes[d.Suffix] {
			down, downClass = "moe_down_t_"+d.Suffix, ClassMoET
		}
	}
	// metal moe: h in half but for f32 and bf16 gate-up (moeHalf), the
	// entries' outputs bf16 for block-format down (moeBF16Rows).
	xRow, hB, yB := 4*s.Hidden, 2, 2
	if g.Suffix == "f32" || g.Suffix == "bf16" {
		hB = 4
	}
	if d.Suffix == "f32" || d.Suffix == "bf16" || d.Suffix == "f16" {
		yB = 4
	}
	hIn := hB * s.FFN
	if int8 {
		// metal moe: the chunk's x to q8_K once; h quantized once over
		// every routed entry between the two launches.
		p.quantQ8K(c, s.Hidden)
		xRow, hIn = q8kRowBytes(s.Hidden), q8kRowBytes(s.FFN)
	}
	guCost := func(entries, active int) (float64, float64) {
		return 2*float64(active)*float64(s.FFN)*float64(g.rowBytes(s.Hidden)) + float64(entries)*float64(xRow+hB*s.FFN),
			4 * float64(s.FFN) * float64(entries) * float64(s.Hidden)
	}
	downCost := func(entries, active int) (float64, float64) {
		return float64(active)*float64(s.Hidden)*float64(d.rowBytes(s.FFN)) + float64(entries)*float64(hIn+yB*s.Hidden),
			2 * float64(s.Hidden) * float64(entries) * float64(s.FFN)
	}
	entries := c * k
	if s.Parted {
		p.add(stream("moe_grid", p.layer, E, 28, 0))
		gb, gf := guCost(c, 1)
		db, df := downCost(c, 1)
		for range E {
			p.add(Launch{Kernel: gu, Class: guClass, Layer: p.layer, Bytes: gb, FLOPs: gf})
		}
		if int8 {
			p.add(stream("quant_q8k_rows_h", p.layer, entries*s.FFN, 3, 4))
		}
		for range E {
			p.add(Launch{Kernel: down, Class: downClass, Layer: p.layer, Bytes: db, FLOPs: df})
		}
	} else {
		active := min(E, entries)
		nTiles := entries/64 + E + 1
		tiles := stream("moe_tiles", p.layer, E, 4, 0)
		tiles.Bytes += float64(nTiles) * 8
		p.add(tiles)
		gb, gf := guCost(entries, active)
		db, df := downCost(entries, active)
		p.add(Launch{Kernel: gu, Class: guClass, Layer: p.layer, Bytes: gb, FLOPs: gf})
		if int8 {
			p.add(stream("quant_q8k_rows_h", p.layer, entries*s.FFN, 3, 4))
		}
		p.add(Launch{Kernel: down, Class: downClass, Layer: p.layer, Bytes: db, FLOPs: df})
	}
	combine := "moe_combine_f32"
	if yB == 2 {
		combine = "moe_combine_bf16"
	}
	p.add(stream(combine, p.layer, c*s.Hidden, (yB+4)*k+4, 2*k))
}

// Pass lists the launches of a prefill of L tokens, as the thinker
// (engine/model/qwen3moe: forward, layer, rows) drives the Metal backend
// (metal/: the kernels each op launches). fused replaces gate, up and
// silu_mul by one gathered launch (stacked experts only). It is the one
// place this sequence is written down; TestPassMatchesBackend checks it
// against the backend's own accounting on the tiny model.
func Pass(s ModelShape, L int, fused bool) ([]Launch, error) { return buildPass(s, L, fused, false) }

// PassTensor is Pass on the M5 path (the "tensor" set): the launches
// metal/tensor.go moves to the tensor kernels are named as it names them
// (mul_mm_t_*, moe_gu_t_*, moe_down_t_*, flash_attn_t_d128 with 64 queries
// per threadgroup); the rest are Pass's fused launches.
func PassTensor(s ModelShape, L int) ([]Launch, error) { return buildPass(s, L, true, true) }

func buildPass(s ModelShape, L int, fused, tensor bool) ([]Launch, error) {
	if L <= 0 || s.Layers <= 0 || s.Hidden <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.Experts <= 0 || s.TopK <= 0 || s.FFN <= 0 {
		return nil, fmt.Errorf("bench: estimate: bad shape %+v for %d tokens", s, L)
	}
	if s.Heads%s.KVHeads != 0 || s.TopK > s.Experts {
		return nil, fmt.Errorf("bench: estimate: %d heads over %d kv heads, top-%d of %d experts", s.Heads, s.KVHeads, s.TopK, s.Experts)
	}
	embed, err := s.format(release.RoleEmbed, -1, s.Hidden)
	if err != nil {
		return nil, err
	}
	if embed.BlockElems <= 0 || embed.BlockBytes <= 0 || s.Hidden%embed.BlockElems != 0 {
		return nil, fmt.Errorf("bench: estimate: format %+v does not fit rows of %d", embed, s.Hidden)
	}
	chunk := s.Chunk
	if chunk <= 0 || chunk > L {
		chunk = L
	}
	p := &pass{s: s, fused: fused, tensor: tensor, layer: -1}
	qd, kvd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	// Embed: get_rows (cost: each id's row, its scales, and the output).
	p.add(Launch{Kernel: "get_rows_" + embed.Suffix, Class: ClassStream, Layer: -1, Bytes: float64(L) * float64(embed.rowBytes(s.Hidden)+4*s.Hidden)})
	for l := range s.Layers {
		p.layer = l
		if p.f, err = s.formats(l); err != nil {
			return nil, err
		}
		if p.f.gate != p.f.up {
			return nil, fmt.Errorf("bench: estimate: layer %d: gate (%s) and up (%s) stored differently", l, p.f.gate.Suffix, p.f.up.Suffix)
		}
		p.rmsNorm(L * s.Hidden)           // attn_norm, every row
		p.matmul(kvd, L, s.Hidden, p.f.k) // k
		p.rmsNorm(L * kvd)                // k norm
		p.add(stream("rope_f32", l, L*kvd, 8, 6))
		p.matmul(kvd, L, s.Hidden, p.f.v) // v
		n := 0
		for c0 := 0; c0 < L; c0 += chunk {
			c1 := min(L, c0+chunk)
			c := c1 - c0
			p.rmsNorm(c * s.Hidden)          // attn_norm again, per chunk
			p.matmul(qd, c, s.Hidden, p.f.q) // q
			p.rmsNorm(c * qd)                // q norm
			p.add(stream("rope_f32", l, c*qd, 8, 6))
			p.attention(c, c1)
			p.matmul(s.Hidden, c, qd, p.f.o) // o
			p.add(stream("add_f32", l, c*s.Hidden, 12, 4))
			p.rmsNorm(c * s.Hidden) // ffn_norm
			p.matmul(s.Experts, c, s.Hidden, p.f.router)
			p.add(stream("moe_topk_f32", l, c*s.Experts, 4, 8))
			p.moe(c)
			p.add(stream("add_f32", l, c*s.Hidden, 12, 4))
			n++
		}
		if n > 1 { // Concat of the chunks' outputs
			for c0 := 0; c0 < L; c0 += chunk {
				p.add(stream("copy_f32", l, (min(L, c0+chunk)-c0)*s.Hidden, 8, 4))
			}
		}
	}
	p.layer = -1
	p.rmsNorm(L * s.Hidden) // final norm
	return p.out, nil
}

// Efficiency is what one kernel class reaches on a chip, as fractions of
// the peaks.
type Efficiency struct {
	Compute float64 // of the FLOP rate the class runs on (Rate)
	// Rate is "f32", "f16" (shader), "tensor" (the neural accelerators'
	// f16 matrix rate) or "int8" (their int8 one).
	Rate string
	// Ops is the operations the class runs on Rate per FLOP of the cost
	// model (0 means 1): attention on int8 limbs forms each product from
	// three int8 ones.
	Ops       float64
	Bandwidth float64 // of the memory bandwidth
	// DRAM is the fraction of the cost model's bytes that reach memory
	// (attention's K/V re-reads are mostly served by the caches).
	DRAM float64
	Why  string
}

// KernelSet is a set of kernels with an efficiency per class.
type KernelSet struct {
	Name  string
	Fused bool // gate and up in one launch
	// Chunk is the rows per chunk the backend of these kernels asks the
	// model for (backend.ChunkSizer); 0: the shape's (qwen3moe's
	// DefaultChunk). Estimate runs the pass at it.
	Chunk int
	Eff   map[Class]Efficiency
	// NeedsTensor: the set runs only with neural accelerators; elsewhere
	// the backend falls back to FallBack.
	NeedsTensor bool
	FallBack    string
	Why         string
}

// bwStream: Apple GPUs stream at ~80-90% of the advertised bandwidth
// (STREAM-style copy/triad measurements on M1-M5); 80% is assumed
// everywhere.
const bwStream = 0.8

// attnDRAM: flash attention's cost model charges every threadgroup (32
// queries of one head) the whole K/V it sees. The grid runs the query
// groups of one head side by side, and the 8 query heads of a kv head
// read the same K/V: with ~2-4 threadgroups resident per core on a
// 40-core GPU, assume each K/V block read from memory serves 8
// threadgroups (1/8 reaches DRAM). At 14k tokens the pass is still
// compute-bound with 1/4; at 1/1 attention would be memory-bound.
const attnDRAM = 1.0 / 8

// metalChunk is the rows per chunk the Metal backend of issue 14 asks for
// (metal.ChunkRows): a chunk routes chunk × top-k / experts tokens to each
// expert, ~128 in the thinker, for the MoE's 64-token tiles.
const metalChunk = 2048

// Sets is the ONE table of assumed efficiencies. "current" is the kernels
// before issue 14 in qwen3moe's 512-row chunks (kept to reproduce the
// earlier estimates); "shader" the simdgroup kernels of issue 14 in the
// Metal backend's 2048-row chunks; "tensor" the M5 path on Metal 4 tensor
// ops. Each entry gives its reasoning from the kernel's structure; a Mac's
// `clef selftest` timings should replace them.
var Sets = []KernelSet{
	{Name: "current", Why: "today's kernels: float tiles, separate gate/up, 16-key attention blocks", FallBack: "current",
		Eff: map[Class]Efficiency{
			// shaders/README.md: ~40% of peak after the q4_K word loads
			// (first pass assumed 35%).
			ClassMatMul:  {Compute: 0.40, Rate: "f32", Bandwidth: bwStream, DRAM: 1, Why: "README roofline: float tiles, dequant per K step, ~40% of peak"},
			ClassMatMulF: floatMatMul,
			ClassMoE:     {Compute: 0.40, Rate: "f32", Bandwidth: bwStream, DRAM: 1, Why: "as mul_mm: one launch per projection over every tile"},
			// mul_mv is bandwidth-bound (decode-sized rows only).
			ClassMatVec:    {Compute: 0.25, Rate: "f32", Bandwidth: 0.6, DRAM: 1, Why: "mat-vec: weight streaming at ~60% of bandwidth"},
			ClassAttention: {Compute: 0.35, Rate: "f32", Bandwidth: bwStream, DRAM: attnDRAM, Why: "README: 8x8 rescale matmul, 16-key blocks, ~35%"},
			ClassStream:    {Compute: 0.5, Rate: "f32", Bandwidth: bwStream, DRAM: 1, Why: "memory-bound: 80% of bandwidth"},
		}},
	{Name: "shader", Fused: true, Chunk: metalChunk, Why: "issue 14 items 1-3: half tiles in mul_mm/moe_*, fused gate+up with 64-token tiles, float-operand attention with exp2 and rare rescales", FallBack: "shader",
		Eff: map[Class]Efficiency{
			ClassMatMulF: floatMatMul,
			// mul_mm with 64x64 half tiles, double-buffered (shaders/
			// README.md, "mul_mm"). Per K step of 32 a simdgroup issues 64
			// 8x8x8 multiply-accumulates (1024 cycles of its 32-lane pipe)
			// against 32 fragment loads and ~130 staging ops (a q4_K dq16,
			// 32 half conversions, 16 x loads, the overflow test) and one
			// barrier: the multiplies are ~86% of its issue (the 64x32 tile:
			// 32 against 24 loads, ~110 ops and 2 barriers, ~79%). 20 KiB
			// of threadgroup memory leaves 3 threadgroups (12 simdgroups)
			// per core, enough to cover a step's loads (one simdgroup's
			// 1024 cycles of multiplies per step) with the other two. Times
			// ~80% reached by tuned simdgroup-matrix GEMMs (Turner; MLX
			// steel) and ~93% for grid tails (q: 4.3, o: 2.1 waves of 120
			// slots at 512-token chunks) and the under-filled k/v launches:
			// 0.80 x 0.86 x 0.93 = ~64% (55-70%). The Metal backend's
			// 2048-row chunks make the q and o grids 17 and 8.5 waves,
			// which should lose less to tails; 93% is kept (conservative).
			// Not measured.
			ClassMatMul: shaderMatMul,
			// moe_gu_*/moe_down_* (shaders/moe.metal, README "MoE"): the
			// mul_mm design on gathered rows: a 64x64 product tile (gate:
			// 32 gate + 32 up rows, down: 64 rows) x 64 tokens, half tiles
			// double-buffered (21 KiB with the row lists and overflow
			// flags: 3 threadgroups, 12 simdgroups a core), one barrier per
			// K step. Per K step of 32 a simdgroup with a full 32 tokens
			// issues 64 8x8x8 multiply-accumulates (1024 cycles) against
			// 32 fragment loads and ~130 staging ops (a q4_K dq16, half
			// conversions, 16 x loads, the overflow test): 86%, as mul_mm.
			// An expert's n tokens of a chunk fill ceil(n/64) tiles, the
			// last one partly: a simdgroup skips the fragments past the
			// list (8-token grain) but every simdgroup still stages its
			// share of the 64-row weight tile. The Metal backend asks for
			// 2048-row chunks (metalChunk), which route ~128 entries to
			// each of 128 experts (top-8): summed over the tiles of a chunk
			// (routing counts drawn uniformly and with log-normal expert
			// popularity, sigma 0.5-1; ~320 tiles, 80% of their token
			// slots filled) useful multiplies are 82% of the issue cycles
			// (without the skip 69%). At 1024 rows (~64 an expert, and a
			// 1k prompt is one chunk of that) it is 77-78%, the tiles
			// 64-68% full, a Poisson-like count spilling past 64 about
			// half the time; at 512 rows (~32) 69-71%, which gave this
			// class 54% before. Times ~80% for a simdgroup-matrix GEMM's
			// ceiling and ~98% for grid tails (gate+up: 24 row tiles x
			// ~320 token tiles per chunk, 64 waves of 120 slots on a
			// 40-core M4 Max; down: 32 x ~320) and the epilogues (SiLU once
			// per 64-step K loop): 0.82 x 0.80 x 0.98 = ~64% (59-68%; a 1k
			// prompt's one 1024-row chunk ~60%, taken as 64% here). Not
			// measured.
			ClassMoE:    shaderMoE,
			ClassMatVec: {Compute: 0.25, Rate: "f32", Bandwidth: 0.6, DRAM: 1, Why: "mat-vec: weight streaming at ~60% of bandwidth"},
			// flash_attn_mma_d128 (shaders/attention.metal, README
			// "flash_attn_mma"): float operands (half ones miss TolAttn),
			// so the f32 rate (equal to the f16 one on M1-M4). Per 32-key
			// block a simdgroup (8 queries) issues 128 8x8x8 multiply-
			// accumulates (64 QKᵀ, 64 PV: 2048 cycles of its 32-lane pipe)
			// against 128
			// fragment loads (K and V; Q, S, P and O stay in registers),
			// ~115 softmax ops per lane (8 scores: mask, max, exp2, sum;
			// 2 shuffles; the O rescale, when a row's max moves by > 2^8,
			// a handful of times per row in all) and ~145 staging ops (its
			// share of the K and V blocks: 64 scalar loads, 16 stores):
			// the multiplies are ~84% of its issue. K and V share one
			// 16.5 KiB buffer, so a block has 4 threadgroup barriers
			// (twice mul_mm's density per multiply): with ~3 threadgroups
			// resident per core (16.5 KiB of 64; ~110 registers a lane)
			// the staging latency is hidden by the others' multiplies,
			// but a lower ceiling than a GEMM's ~80% is assumed: 75-80%.
			// Tails (the causal grid's heaviest groups last, the masked
			// half of each diagonal block) ~95% at 14k+, less at 1k:
			// 0.84 x (0.75-0.80) x 0.95 = 60-64%; 60% taken. The same
			// model gives the previous kernel (S and P through
			// threadgroup memory, 22 KiB, 2 threadgroups a core) ~55%:
			// the in-register softmax is a modest gain. Not measured.
			ClassAttention: {Compute: 0.60, Rate: "f32", Bandwidth: bwStream, DRAM: attnDRAM, Why: "per 32-key block 128 MMA (2048 cycles) vs 128 fragment loads, ~260 softmax/staging ops (84% issue) x 75-80% ceiling (4 barriers/block, 3 TGs/core) x 95% tails: ~60% (60-64%)"},
			ClassStream:    {Compute: 0.5, Rate: "f32", Bandwidth: bwStream, DRAM: 1, Why: "memory-bound: 80% of bandwidth"},
		}},
	{Name: "tensor", Fused: true, Chunk: metalChunk, NeedsTensor: true, FallBack: "shader", Why: "M5 neural accelerators (matmul2d): q4_K and q6_K matmuls and MoE on int8 x q8_K activations, attention on int8 limbs",
		Eff: map[Class]Efficiency{
			// The shader kernels this set keeps (the f32 router, other
			// formats' MoE) run as in the shader set.
			ClassMatMul:  shaderMatMul,
			ClassMatMulF: floatMatMul,
			ClassMoE:     shaderMoE,
			// The accelerators peak at ~1024 FP16 FLOP/core-cycle
			// (Zakharko, A19) on 32x32+ fragments; the weight tile is
			// still dequantized by the shader ALUs into threadgroup memory
			// (~1/8 of the tensor time at 64-token tiles if not overlapped)
			// and ggml/MLX tiles are 64x64-64x128: 55%. (mul_mm_t_*: q8_0,
			// K-quants but q4_K, f16, MLX formats; none in the 4-bit
			// thinker.)
			ClassMatMulT: {Compute: 0.55, Rate: "tensor", Bandwidth: bwStream, DRAM: 1, Why: "matmul2d ~1024 FLOP/core-cycle; shader dequant and tile edges: 55%"},
			// moe_gu_t_*/moe_down_t_* (half operands), per 64-wide K step
			// of a threadgroup: 0.52 MFLOP of matmul2d against ~24k ALU
			// ops of dequantization and half staging and 2 barriers (~80%),
			// 64-token tiles 80% full at 2048-row chunks, 80% matrix-unit
			// ceiling: 51%. (Formats other than q4_K.)
			ClassMoET: {Compute: 0.51, Rate: "tensor", Bandwidth: bwStream, DRAM: 1, Why: "half matmul2d: ~80% issue x 80% tile fill x 80% matrix-unit ceiling: 51%"},
			// mul_mm_t8_q4_K (tensor_q8.metal), per 32-wide sub-block of a
			// 64x64 tile: one int8 matmul2d of 131k MACs (142 core-cycles
			// at the int8 rate, ~1840 ops/core-cycle on an M5 Max) against
			// ~13.6k ALU ops (106 cycles on 128 lanes: the sc x I integer
			// epilogue, the super-block's float step and the nibble
			// staging, an eighth each of theirs; up to ~170 cycles if the
			// element index math is not hoisted) and 0.25 barriers. Two
			// threadgroups a core (19.2 KiB) overlap one's epilogue with
			// the other's products in part: between 46% (in series) and
			// 84-100% (overlapped) of the issue, ~70% taken; x 80%
			// matrix-unit ceiling x 93% grid tails: 52%.
			ClassMatMul8: {Compute: 0.52, Rate: "int8", Bandwidth: bwStream, DRAM: 1, Why: "per 32-k sub-block 131k int8 MACs (142 cycles) vs ~13.6k ALU ops (106-170 cycles), 2 TGs/core: ~70% x 80% ceiling x 93% tails: 52%"},
			// moe_gu_t8_q4_K/moe_down_t8_q4_K (tensor_moe.metal), per 32-k
			// sub-block of a 64x64 tile: 131k int8 MACs (142 cycles)
			// against ~22k ALU ops (172 cycles: the gather, the integer
			// epilogue and a float step with the min term that is heavier
			// than mul_mm_t8's) and 0.5 barriers, two threadgroups a core:
			// between 45% (in series) and 83% (overlapped), ~62%; x 80%
			// tile fill (2048-row chunks) x 80% matrix-unit ceiling x 98%
			// tails: 39%.
			ClassMoE8: {Compute: 0.39, Rate: "int8", Bandwidth: bwStream, DRAM: 1, Why: "per 32-k sub-block 131k int8 MACs (142 cycles) vs ~22k ALU ops (172 cycles), 2 TGs/core: ~62% x 80% tile fill x 80% ceiling x 98% tails: 39%"},
			// mul_mm_t8_q6_K (q4_k_m's attn_v in 24 layers), per 32 k of a
			// 64x64 tile: two int8 matmul2d of k = 16 (q6_K's scales are per
			// 16 values; 131k MACs, 142 cycles if a 16-deep int8 product
			// runs at the full rate, which no published measurement covers)
			// against ~16.5k ALU ops on q4_K's count (129 cycles; up to ~250
			// unhoisted): the sc x I epilogue twice as often, the 6-bit
			// unpack from 16-bit loads, no min term. 18.2 KiB, two
			// threadgroups a core: ~65% x 80% ceiling x 93% tails: 48%.
			// At half the rate for k = 16, ~30%.
			ClassMatMul8Q6: {Compute: 0.48, Rate: "int8", Bandwidth: bwStream, DRAM: 1, Why: "per 32 k two 16-k int8 matmul2d (131k MACs, 142 cycles) vs ~16.5k ALU ops (129-250 cycles), 2 TGs/core: ~65% x 80% ceiling x 93% tails: 48% (k = 16 at the full int8 rate assumed)"},
			// moe_gu_t8_q6_K/moe_down_t8_q6_K (q4_k_m's ffn_down_exps in 24
			// layers, beside q4_K gate-up), per 32 k of a 64x64 tile: 131k
			// int8 MACs in 16-deep products (142 cycles) against ~28k ALU
			// ops (219 cycles: the integer epilogue doubled, the unpack, no
			// min term), 0.5 barriers, 20.7 KiB, two threadgroups a core:
			// between 39% (in series) and 65% (overlapped), ~55%; x 80%
			// tile fill x 80% ceiling x 98% tails: 34%.
			ClassMoE8Q6: {Compute: 0.34, Rate: "int8", Bandwidth: bwStream, DRAM: 1, Why: "per 32 k 131k int8 MACs in 16-deep products (142 cycles) vs ~28k ALU ops (219 cycles), 2 TGs/core: ~55% x 80% tile fill x 80% ceiling x 98% tails: 34% (k = 16 at the full int8 rate assumed)"},
			ClassMatVec: {Compute: 0.25, Rate: "f32", Bandwidth: 0.6, DRAM: 1, Why: "mat-vec: weight streaming at ~60% of bandwidth"},
			// flash_attn_t_d128 (tensor_attn.metal): QKᵀ and PV on int8
			// limbs held to TolAttn. Each q, k, p and v vector is a 24-bit
			// code in three int8 limbs; products down to weight 2^16 take
			// six int8 products per matmul (two limbs, 3 or 4 products,
			// measured NMSE up to 5e-7 with outlier channels, over TolAttn;
			// half operands ~1e-7): Ops 6. Per 64x64 block 12.6M int8 ops
			// (6.8k core-cycles) against ~228k ALU ops (1.8k cycles: score
			// and PV combines, softmax, the P limb split) and 3 barriers;
			// 17.7 KiB of threadgroup memory leaves 3 threadgroups a core,
			// which hide most of the ALU work (~90%); x 80% matrix-unit
			// ceiling x 95% tails: 68%.
			ClassAttention: {Compute: 0.68, Rate: "int8", Ops: 6, Bandwidth: bwStream, DRAM: attnDRAM, Why: "int8 limbs, 6 int8 products per matmul (TolAttn): per 64x64 block 12.6M int8 ops (6.8k cycles) vs 228k ALU ops (1.8k), 3 TGs/core ~90% x 80% ceiling x 95% tails: 68%"},
			ClassStream:    {Compute: 0.5, Rate: "f32", Bandwidth: bwStream, DRAM: 1, Why: "memory-bound: 80% of bandwidth"},
		}},
}

// The shader set's matmul and MoE efficiencies (its entries give the
// reasons), which the tensor set keeps for the kernels it does not move.
var (
	// f32 and bf16 weights (the router, the tiny model) keep matmul.metal's
	// float tiles in every set: staged once per K step (stage, barrier,
	// multiply, barrier), as all formats were before issue 14.
	floatMatMul  = Efficiency{Compute: 0.40, Rate: "f32", Bandwidth: bwStream, DRAM: 1, Why: "float tiles (f32, bf16 weights), single-buffered as before issue 14: ~40% of the f32 rate"}
	shaderMatMul = Efficiency{Compute: 0.64, Rate: "f16", Bandwidth: bwStream, DRAM: 1, Why: "half 64x64 tiles, double-buffered: 86% MMA issue x 80% GEMM ceiling x 93% tails, ~64% (55-70%)"}
	shaderMoE    = Efficiency{Compute: 0.64, Rate: "f16", Bandwidth: bwStream, DRAM: 1, Why: "moe_gu/moe_down on mul_mm's 64x64 double-buffered half tiles; ~128 tokens per expert at 2048-row chunks, tiles 80% full, empty fragments skipped: 82% MMA issue x 80% GEMM ceiling x 98% tails, ~64% (59-68%; ~60% at a 1k prompt's ~64 per expert)"}
)

// SetByName returns the kernel set called name.
func SetByName(name string) (KernelSet, bool) {
	for _, s := range Sets {
		if s.Name == name {
			return s, true
		}
	}
	return KernelSet{}, false
}

// launchOverhead is the fixed cost of a dispatch (metal/cost.go's
// launchSeconds: setup and the drain of a barrier).
const launchOverhead = costLaunch

// rate is the FLOP/s of rate on c.
func rate(c chips.Chip, r string) float64 {
	switch r {
	case "f16":
		return c.F16() * 1e12
	case "tensor":
		return c.TensorTFLOPs * 1e12
	case "int8":
		return c.TensorInt8TOPs * 1e12
	}
	return c.TFLOPs * 1e12
}

// Seconds is a launch's estimated time on c with the set's efficiency.
func (s KernelSet) Seconds(c chips.Chip, l Launch) float64 {
	e := s.Eff[l.Class]
	mem := l.Bytes * e.DRAM / (c.GBs * 1e9 * e.Bandwidth)
	comp := 0.0
	if l.FLOPs > 0 {
		ops := l.FLOPs
		if e.Ops > 0 {
			ops *= e.Ops
		}
		comp = ops / (rate(c, e.Rate) * e.Compute)
	}
	return launchOverhead + max(mem, comp)
}

// Resolve returns the set that runs on c: a tensor set falls back on
// chips without neural accelerators.
func (s KernelSet) Resolve(c chips.Chip) KernelSet {
	if s.NeedsTensor && c.TensorTFLOPs <= 0 {
		if f, ok := SetByName(s.FallBack); ok {
			return f
		}
	}
	return s
}

// MLXPublished is the MLX port's published latency (4-bit, M5 Max 128 GB,
// median of 3 runs; clef-omni spec §3.1): whole requests, not only the
// backbone.
var MLXPublished = map[string]map[int]float64{"M5 Max": {1024: 0.19, 14336: 4.5}}

// EstimateTokens are the prompt lengths the estimate is printed for.
var EstimateTokens = []int{1024, 14336, 65536}

// KernelEstimate is one kernel's share of a pass.
type KernelEstimate struct {
	Kernel   string
	Class    Class
	Launches int
	Bytes    float64
	FLOPs    float64
	Seconds  float64
}

// PassEstimate is a whole pass on one chip with one kernel set.
type PassEstimate struct {
	Chip     chips.Chip
	Set      KernelSet // as resolved for the chip
	Tokens   int
	Launches int
	Bytes    float64
	FLOPs    float64
	Seconds  float64
	Kernels  []KernelEstimate // by time, longest first
	// PrefillFLOPs and PrefillSeconds are the prefill matmuls (mul_mm,
	// mul_mm_id) and attention alone; PrefillPeak is their rate over the
	// chip's FP16 shader peak.
	PrefillFLOPs, PrefillSeconds, PrefillPeak float64
	MLX                                       float64 // 0 when none is published
}

// Estimate prices a pass of L tokens of s on chip c with set, in the
// set's chunks when it names them.
func Estimate(s ModelShape, L int, c chips.Chip, set KernelSet) (PassEstimate, error) {
	set = set.Resolve(c)
	if set.Chunk > 0 {
		s.Chunk = set.Chunk
	}
	launches, err := buildPass(s, L, set.Fused, set.NeedsTensor)
	if err != nil {
		return PassEstimate{}, err
	}
	e := PassEstimate{Chip: c, Set: set, Tokens: L, Launches: len(launches), MLX: MLXPublished[c.Name][L]}
	by := map[string]*KernelEstimate{}
	for _, l := range launches {
		if _, ok := set.Eff[l.Class]; !ok {
			return PassEstimate{}, fmt.Errorf("bench: estimate: set %s has no efficiency for %s's class %s", set.Name, l.Kernel, l.Class)
		}
		t := set.Seconds(c, l)
		k := by[l.Kernel]
		if k == nil {
			k = &KernelEstimate{Kernel: l.Kernel, Class: l.Class}
			by[l.Kernel] = k
		}
		k.Launches++
		k.Bytes += l.Bytes
		k.FLOPs += l.FLOPs
		k.Seconds += t
		e.Bytes += l.Bytes
		e.FLOPs += l.FLOPs
		e.Seconds += t
		if isCompute(l.Class) {
			e.PrefillFLOPs += l.FLOPs
			e.PrefillSeconds += t
		}
	}
	for _, k := range by {
		e.Kernels = append(e.Kernels, *k)
	}
	sort.Slice(e.Kernels, func(i, j int) bool {
		if e.Kernels[i].Seconds != e.Kernels[j].Seconds {
			return e.Kernels[i].Seconds > e.Kernels[j].Seconds
		}
		return e.Kernels[i].Kernel < e.Kernels[j].Kernel
	})
	if e.PrefillSeconds > 0 {
		e.PrefillPeak = e.PrefillFLOPs / e.PrefillSeconds / (c.F16() * 1e12)
	}
	return e, nil
}

// BreakEven is the one compute efficiency of the matmul, MoE and
// attention classes (other classes as in set) at which the pass of L
// tokens on c takes target seconds; above 1 when no efficiency reaches it.
func BreakEven(s ModelShape, L int, c chips.Chip, set KernelSet, target float64) (float64, error) {
	set = set.Resolve(c)
	at := func(x float64) (float64, error) {
		t := set
		t.Eff = map[Class]Efficiency{}
		for k, v := range set.Eff {
			if isCompute(k) {
				v.Compute = x
			}
			t.Eff[k] = v
		}
		e, err := Estimate(s, L, c, t)
		return e.Seconds, err
	}
	if sec, err := at(1); err != nil || sec > target {
		return 2, err
	}
	lo, hi := 0.0, 1.0
	for range 50 {
		mid := (lo + hi) / 2
		sec, err := at(mid)
		if err != nil {
			return 0, err
		}
		if sec > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// EstimateChips returns the chips --estimate CHIP names: a key such as
// "m5-max", or "all" (the Max chips M1-M5).
func EstimateChips(arg string) ([]chips.Chip, error) {
	if strings.EqualFold(strings.TrimSpace(arg), "all") {
		var out []chips.Chip
		for _, k := range []string{"m1-max", "m2-max", "m3-max", "m4-max", "m5-max"} {
			c, _ := chips.ByKey(k)
			out = append(out, c)
		}
		return out, nil
	}
	c, ok := chips.ByKey(arg)
	if !ok {
		keys := make([]string, len(chips.Table))
		for i, c := range chips.Table {
			keys[i] = c.Key()
		}
		return nil, fmt.Errorf("unknown chip %q (one of %s, or all)", arg, strings.Join(keys, ", "))
	}
	return []chips.Chip{c}, nil
}

// WriteEstimate prints, for each chip and kernel set, the per-kernel and
// whole-pass estimates at EstimateTokens, then a summary table.
func WriteEstimate(w io.Writer, cs []chips.Chip, sets []KernelSet) error {
	fmt.Fprintln(w, "ESTIMATES, not measurements: bytes and FLOPs from the Metal backend's cost model over the launches a")
	fmt.Fprintln(w, "prefill makes (Qwen3-Omni thinker: 48 layers, hidden 2048, 32/4 heads x 128, 128 experts top-8 of 768,")
	fmt.Fprintln(w, "clef quantize q4_k_m weights: q4_K, q6_K attn_v and ffn_down_exps in 24 layers, f32 router; in the row")
	fmt.Fprintln(w, "chunks each set's backend asks for); time per launch = 5 us + max(DRAM bytes /")
	fmt.Fprintln(w, "(bandwidth x eff), FLOPs / (rate x eff)) with the efficiencies below. Backbone only (no tokenizer, head")
	fmt.Fprintln(w, "or host time).")
	var sum []PassEstimate
	for _, c := range cs {
		fmt.Fprintf(w, "\n== %s: %.0f GB/s, f32 %.1f, f16 %.1f, tensor %s TFLOP/s, int8 %s TOPS%s\n", c.Name, c.GBs, c.TFLOPs, c.F16(), tflops(c.TensorTFLOPs), tflops(c.TensorInt8TOPs), derived(c))
		for _, s := range sets {
			r := s.Resolve(c)
			if r.Name != s.Name {
				fmt.Fprintf(w, "\n-- set %s: no neural accelerators on the %s; the backend falls back to %q (below)\n", s.Name, c.Name, r.Name)
				continue
			}
			chunk := Thinker.Chunk
			if s.Chunk > 0 {
				chunk = s.Chunk
			}
			fmt.Fprintf(w, "\n-- set %s (%d-row chunks): %s\n", s.Name, chunk, s.Why)
			// The classes the pass launches, in a fixed order.
			used := map[Class]bool{}
			for _, L := range EstimateTokens {
				e, err := Estimate(Thinker, L, c, s)
				if err != nil {
					return err
				}
				for _, k := range e.Kernels {
					used[k.Class] = true
				}
			}
			for _, cl := range []Class{ClassMatMul, ClassMatMulF, ClassMatMulT, ClassMatMul8, ClassMatMul8Q6, ClassMoE, ClassMoET, ClassMoE8, ClassMoE8Q6, ClassAttention, ClassMatVec, ClassStream} {
				if !used[cl] {
					continue
				}
				e := s.Eff[cl]
				ops := ""
				if e.Ops > 1 {
					ops = fmt.Sprintf(", %g ops a FLOP", e.Ops)
				}
				fmt.Fprintf(w, "   %-9s %3.0f%% of %-6s %3.0f%% of bandwidth, %3.0f%% of bytes to DRAM%s: %s\n", cl, 100*e.Compute, e.Rate, 100*e.Bandwidth, 100*e.DRAM, ops, e.Why)
			}
			for _, L := range EstimateTokens {
				e, err := Estimate(Thinker, L, c, s)
				if err != nil {
					return err
				}
				sum = append(sum, e)
				fmt.Fprintf(w, "\n   %s, %s, %d tokens: %d launches, %s, %s, %s", c.Name, s.Name, L, e.Launches, gb(e.Bytes), tf(e.FLOPs), secs(e.Seconds))
				if e.MLX > 0 {
					x, err := BreakEven(Thinker, L, c, s, e.MLX)
					if err != nil {
						return err
					}
					even := fmt.Sprintf("equal at %.0f%% for matmul, MoE and attention", 100*x)
					if x > 1 {
						even = "not reached even at 100%"
					}
					fmt.Fprintf(w, " (MLX published: %s; %s)", secs(e.MLX), even)
				}
				fmt.Fprintf(w, "; matmuls+attention at %.0f%% of the f16 peak\n", 100*e.PrefillPeak)
				fmt.Fprintf(w, "   %-26s %8s %12s %12s %10s %6s\n", "kernel", "launches", "bytes", "FLOPs", "time", "share")
				for _, k := range e.Kernels {
					fmt.Fprintf(w, "   %-26s %8d %12s %12s %10s %5.1f%%\n", k.Kernel, k.Launches, gb(k.Bytes), tf(k.FLOPs), secs(k.Seconds), 100*k.Seconds/e.Seconds)
				}
			}
		}
	}
	fmt.Fprintln(w, "\n== summary (estimated seconds per prefill; MLX: published, M5 Max only)")
	fmt.Fprintf(w, "%-8s %-8s %8s %10s %10s %10s %8s\n", "chip", "set", "tokens", "FLOPs", "bytes", "estimate", "MLX")
	for _, e := range sum {
		mlx := "-"
		if e.MLX > 0 {
			mlx = secs(e.MLX)
		}
		fmt.Fprintf(w, "%-8s %-8s %8d %10s %10s %10s %8s\n", e.Chip.Name, e.Set.Name, e.Tokens, tf(e.FLOPs), gb(e.Bytes), secs(e.Seconds), mlx)
	}
	return nil
}

func derived(c chips.Chip) string {
	if c.Derived {
		return " (derived from clocks, ±10%)"
	}
	return " (published)"
}

func tflops(v float64) string {
	if v <= 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f", v)
}

func gb(b float64) string { return fmt.Sprintf("%.3g GB", b/1e9) }

func tf(f float64) string {
	if f == 0 {
		return "0"
	}
	if f < 1e12 {
		return fmt.Sprintf("%.3g G", f/1e9)
	}
	return fmt.Sprintf("%.3g T", f/1e12)
}

func secs(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.0f us", math.Round(s*1e6))
}
