// kargs.h: the argument structs shared by the shaders (shaders/*.metal) and
// the host (metal/kargs.go mirrors every struct field by field; a test compares
// sizes and offsets). Each entry point takes one of these at buffer(0), set with
// setBytes. Counts are int (32-bit), byte sizes and strides ulong (64-bit).
// Keep every struct a multiple of 8 bytes with no implicit padding.
#ifndef CLEF_KARGS_H
#define CLEF_KARGS_H

#if defined(__METAL_VERSION__) || defined(MSL_SHIM)
#define KARGS_INT int
#define KARGS_ULONG ulong
#else
#include <stdint.h>
#define KARGS_INT int32_t
#define KARGS_ULONG uint64_t
#endif

// Elementwise ops over n elements (add, mul, silu_mul, gelu, scale, add_bias).
typedef struct {
  KARGS_INT n;      // elements
  float alpha;      // scale (scale_f32)
  KARGS_INT cols;   // add_bias_f32: elements per row (the bias length)
  KARGS_INT _pad;
} kargs_eltwise;

// RMSNorm / LayerNorm over rows of cols elements: y = norm(x) * w (+ b).
typedef struct {
  KARGS_INT rows;
  KARGS_INT cols;
  KARGS_INT x_stride; // elements between rows of x
  KARGS_INT y_stride; // elements between rows of y
  float eps;
  KARGS_INT has_bias; // layer_norm_f32: add b (else b is not read)
} kargs_norm;

// Rotary embedding (NeoX pairing: dim i rotates with i + head_dim/2) over
// x[token][head][head_dim] into y (y may be x). Frequency i takes its
// position from stream[i] (0 temporal, 1 height, 2 width) of pos[token][3]
// and its inverse frequency from inv_freq[i]: the host builds both tables,
// so plain, chunked and interleaved M-RoPE are the same function.
typedef struct {
  KARGS_INT tokens;
  KARGS_INT heads;
  KARGS_INT head_dim;
  KARGS_INT x_stride; // elements between tokens of x
  KARGS_INT y_stride; // elements between tokens of y
  KARGS_INT _pad;
} kargs_rope;

// Row scatter-add: y = x, then y[rows[i]] += src[i] (rows distinct).
typedef struct {
  KARGS_INT rows;   // rows of x and y
  KARGS_INT cols;
  KARGS_INT n_src;  // rows of src
  KARGS_INT _pad;
} kargs_add_rows;

// Row gather: y[i][:] = dequant(w[ids[i]][:]).
typedef struct {
  KARGS_INT n_ids;
  KARGS_INT cols;
  KARGS_ULONG row_bytes;   // bytes per row of w
  KARGS_ULONG s_row_bytes; // MLX affine: bytes per row of scales/biases
  KARGS_INT group_size;    // MLX affine: elements per scale group
  KARGS_INT scale_bf16;    // MLX affine: scales/biases are bf16 (else f16)
  KARGS_INT n_rows;        // rows of w (ids are checked against it)
  KARGS_INT _pad;
} kargs_get_rows;

// Weighted row gather (GatherBlend): y[i][:] = sum over j < k of
// weights[i*k+j] * w[ids[i*k+j]][:], the products rounded to float and
// summed in j order; w is f32, f16 or bf16.
typedef struct {
  KARGS_INT n_out;       // rows of y
  KARGS_INT cols;
  KARGS_INT k;           // terms per row of y
  KARGS_INT n_rows;      // rows of w (ids are checked against it)
  KARGS_ULONG row_bytes; // bytes per row of w
} kargs_gather_blend;

// Im2Col: x [n*h*w][c] (channels-last) unfolded for a kh x kw convolution
// with strides sh, sw and zero padding ph, pw into y [n*oh*ow][c*kh*kw],
// column (channel, ky, kx).
typedef struct {
  KARGS_INT n;  // images
  KARGS_INT h;  // rows of a picture
  KARGS_INT w;  // columns of a picture
  KARGS_INT c;  // channels
  KARGS_INT kh;
  KARGS_INT kw;
  KARGS_INT sh;
  KARGS_INT sw;
  KARGS_INT ph;
  KARGS_INT pw;
  KARGS_INT oh; // (h + 2 ph - kh) / sh + 1
  KARGS_INT ow; // (w + 2 pw - kw) / sw + 1
} kargs_im2col;

// y[n][m] = sum_k x[n][k] * W[m][k]: W is [M][K] in a storage format, x and y
// are f32. The _id variants run one matrix per expert over the token rows the
// expert was routed (see kargs_moe and moe_map).
typedef struct {
  KARGS_INT M;               // rows of W (output features)
  KARGS_INT N;               // rows of x (tokens)
  KARGS_INT K;               // columns of W and x
  KARGS_INT x_stride;        // elements between rows of x
  KARGS_INT y_stride;        // elements between rows of y
  KARGS_INT group_size;      // MLX affine
  KARGS_ULONG row_bytes;     // bytes per row of W
  KARGS_ULONG s_row_bytes;   // MLX affine: bytes per row of scales/biases
  KARGS_ULONG expert_bytes;  // _id: bytes per expert of W
  KARGS_ULONG s_expert_bytes; // _id: bytes per expert of scales/biases
  KARGS_INT scale_bf16;      // MLX affine: scales/biases are bf16 (else f16)
  KARGS_INT n_expert;        // _id: experts
  KARGS_INT topk;            // _id: slots per token
  KARGS_INT x_per_slot;      // _id: 1 if x has one row per (token, slot), 0 if one per token
  KARGS_INT tiles;           // _id: 1: grid x indexes the tile table of moe_tiles, 0: grid x is a token tile of expert z
  KARGS_INT _pad;
} kargs_matmul;

// MoE routing: logits [tokens][n_expert] -> ids, weights [tokens][topk];
// per-expert lists of (token*topk + slot) in token order; weighted combine.
typedef struct {
  KARGS_INT tokens;
  KARGS_INT n_expert;
  KARGS_INT topk;
  KARGS_INT norm_topk; // renormalise the top-k weights to sum to 1
  KARGS_INT cols;      // combine: elements per row
  KARGS_INT add_residual; // combine: y += residual
} kargs_moe;

// Attention: q [L][n_head][D], k/v [Lk][n_kv][D], o [L][n_head][D], all f32.
// Query i sits at position (Lk - L + i); causal masks keys after it. With
// ranged set, query i sees exactly keys [ranges[2i], ranges[2i+1]) (the host
// resolves segments, windows and causality into the table) and causal is
// not read.
typedef struct {
  KARGS_INT L;
  KARGS_INT Lk;
  KARGS_INT n_head;
  KARGS_INT n_kv;
  KARGS_INT head_dim;
  KARGS_INT causal;
  KARGS_INT q_stride; // elements between tokens of q
  KARGS_INT k_stride; // elements between tokens of k
  KARGS_INT v_stride;
  KARGS_INT o_stride;
  float scale;
  KARGS_INT ranged; // 1: per-query key ranges at buffer(5)
} kargs_attn;

// The MoE tile table and its indirect grids (moe_tiles, moe_grid): the
// layer's 64-token tiles over n_expert experts and the row tiles of the two
// gathered launches that read them (moe_gu_*: ceil(ffn/32), moe_down_*:
// ceil(hidden/64)).
typedef struct {
  KARGS_INT n_expert;
  KARGS_INT rows_gu;   // row tiles of moe_gu_* (grid x)
  KARGS_INT rows_down; // row tiles of moe_down_* (grid x)
  KARGS_INT _pad;
} kargs_moe_tiles;

// The activation quantizer of the int8 tensor path (quant_q8k_rows): rows of
// cols floats (cols a multiple of 256) into quant's q8_K blocks, one row of
// cols/256 blocks per input row.
typedef struct {
  KARGS_INT rows;
  KARGS_INT cols;
  KARGS_INT x_stride; // floats between input rows
  KARGS_INT y_stride; // bytes between output rows
} kargs_q8k;

// The int8 limbs of attention's tensor path (attn_limbs_qk, attn_limbs_v):
// rows of heads vectors of 128 floats, x_stride floats between rows.
typedef struct {
  KARGS_INT rows;     // rows of x (padding rows past them get codes 0)
  KARGS_INT heads;    // vectors per row
  KARGS_INT x_stride; // floats between rows of x
  KARGS_INT k_order;  // attn_limbs_qk: 1 stores a vector's limbs low first (K), 0 high first (Q)
} kargs_attn_limbs;

#undef KARGS_INT
#undef KARGS_ULONG

#endif // CLEF_KARGS_H
