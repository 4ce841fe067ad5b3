// tensor_moe.metal: the MoE's gathered matmuls on the M5 path (Metal 4
// tensor operations, MSL 4: part of shaders.TensorLibrary with tensor.metal).
//
//   moe_gu_t_<fmt>:   h[entry][m] = SiLU(x Wgᵀ) * (x Wuᵀ), as moe_gu_<fmt>
//                     (moe.metal): 32 rows of gate and the same 32 rows of
//                     up over one 64-token gathered tile per threadgroup.
//   moe_down_t_<fmt>: y[entry][m] = h Wdᵀ, as moe_down_<fmt> (bf16 bits, f32
//                     for f16): 64 rows over one 64-token gathered tile.
//
// The kernels take the bindings, arguments, grids and tile table of their
// shader twins (moe_tiles' table and indirect grids serve both paths
// unchanged: 64-token tiles, 32 gate/up rows, 64 down rows), and compute
// the same values: weights dequantized in float and rounded once to half,
// activations rounded to half, products summed in f32, h stored in half, y
// in bf16 (f32 for f16 experts; moe.metal says why). The formats are those
// whose moe kernels stage half tiles (every format but f32 and bf16, which
// keep the shader kernels and float tiles).
//
// One threadgroup of 128 threads (4 simdgroups) per (row tile, token tile),
// K step 64 (half the barriers of the shader kernels' 32): each step every
// thread dequantizes two 16-weight chunks and stages two 16-activation
// chunks of the gathered rows into threadgroup memory as half, then the 4
// simdgroups run matmul2d on the staged tiles (gate and up: two operations
// of 64 tokens x 32 rows; down: one of 64 x 64) into f32 cooperative
// tensors. The epilogue runs in registers: gate and up come from the same
// operation, so their cooperative tensors share one layout and element i of
// each is the same (row, token); each thread writes SiLU(g)·u (or y) of its
// own elements straight to the token's entry row: the gathered rows need no
// staging of the result. The x rows of the gather are not strided, so they
// go through threadgroup memory as in the shader kernels (a tensor operand
// cannot gather).
//
// q4_K and q6_K experts take the int8 kernels at the end of the file on the
// tensor path (moe_gu_t8_<fmt>, moe_down_t8_<fmt>: q8_K activations, int8
// matmul2d, with quant_q8k_rows_h quantizing h from half); moe_gu_t_q4_K,
// moe_down_t_q4_K and the q6_K twins remain for an open whose int8
// pipelines failed.
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
#include "kargs.h"
#include "q8k.h"
#include "quants.h"
#include "t8w.h"
using namespace metal;

#define TMOE_BN 64    // tokens per tile (moe_tiles' MOE_BN)
#define TMOE_BK 64    // K step
#define TMOE_GU_BM 32 // gate (and up) rows per moe_gu_t threadgroup
#define TMOE_DN_BM 64 // rows per moe_down_t threadgroup
#define TMOE_LD (TMOE_BK + 8) // row stride of the staged tiles in halves (16 bytes of padding)

// tmoe_tile_rows resolves the threadgroup's expert and fills rows[i] (x row)
// and outs[i] (output row, the entry) of its 64 tokens, -1 past the list,
// and the tile's live tokens in ntok. It returns false (for the whole
// threadgroup) when the tile lies past the expert's list.
static inline bool tmoe_tile_rows(constant kargs_matmul &args, device const int *counts, device const int *lists,
                                  device const int *tiles, uint3 tgpig, threadgroup int *rows, threadgroup int *outs,
                                  ushort tiitg, thread int &e, thread int &ntok) {
  e = args.tiles ? tiles[2 * tgpig.y] : int(tgpig.z);
  const int n0 = args.tiles ? tiles[2 * tgpig.y + 1] : int(tgpig.y) * TMOE_BN;
  const int count = counts[e];
  if (n0 >= count) {
    return false;
  }
  ntok = min(TMOE_BN, count - n0);
  if (tiitg < TMOE_BN) {
    const int i = n0 + tiitg;
    if (i < count) {
      const int entry = lists[(ulong)e * args.N + i];
      rows[tiitg] = args.x_per_slot ? entry : entry / args.topk;
      outs[tiitg] = entry;
    } else {
      rows[tiitg] = -1;
      outs[tiitg] = -1;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return true;
}

// tmoe_stage_w dequantizes the 16 weights of row wr from column kc (zeros
// past the row or past K) into dst as half.
template <typename F>
static inline void tmoe_stage_w(constant kargs_matmul &args, device const uchar *wr, device const uchar *sr,
                                device const uchar *br, bool live, int kc, threadgroup half *dst) {
  float v[16];
  if (live && kc + 16 <= args.K) {
    F::dq16(wr, sr, br, kc / 16, args.group_size, args.scale_bf16, v);
  } else {
    // The tail of a row whose length is not a multiple of 16 (f16 only),
    // the part of a step past K, or a row past M.
    for (int j = 0; j < 16; j++) {
      v[j] = live && kc + j < args.K ? F::dq1(wr, sr, br, kc + j, args.group_size, args.scale_bf16) : 0.0f;
    }
  }
  for (int j = 0; j < 16; j++) {
    dst[j] = half(v[j]);
  }
}

// tmoe_stage_x copies 16 activations of row xr from column k (zeros past K,
// or for a token past the list) into dst as half: four 4-wide loads when
// vec.
template <typename X, typename X4>
static inline void tmoe_stage_x(device const X *xr, bool live, bool vec, int k, int K, threadgroup half *dst) {
  if (live && vec && k + 16 <= K) {
    device const X4 *p = (device const X4 *)(xr + k);
#ifdef MSL_EMU
    msl::check_aligned(p, sizeof(X4), "tmoe_stage_x");
#endif
    for (int j = 0; j < 4; j++) {
      const X4 q = p[j];
      dst[4 * j + 0] = half(q.x);
      dst[4 * j + 1] = half(q.y);
      dst[4 * j + 2] = half(q.z);
      dst[4 * j + 3] = half(q.w);
    }
    return;
  }
  for (int j = 0; j < 16; j++) {
    dst[j] = live && k + j < K ? half(xr[k + j]) : half(0.0f);
  }
}

// The operation of both kernels' products: destination (64 tokens x BM rows)
// = x tile (64 x k) * W tileᵀ, the right operand the weight tile as staged,
// [row][k], so transposed; accumulated over the K steps.
template <int BM>
using tmoe_matmul = mpp::tensor_ops::matmul2d<
    mpp::tensor_ops::matmul2d_descriptor(TMOE_BN, BM, static_cast<int>(dynamic_extent), false, true, false,
                                         mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate),
    execution_simdgroups<4>>;

template <typename F>
static inline void moe_gu_t_impl(constant kargs_matmul &args, device const uchar *gw, device const uchar *gs,
                                 device const uchar *gb, device const uchar *uw, device const uchar *us,
                                 device const uchar *ub, device const float *x, device half *h, device const int *counts,
                                 device const int *lists, device const int *tiles, threadgroup half *sw,
                                 threadgroup half *sx, threadgroup int *rows, threadgroup int *outs, uint3 tgpig,
                                 ushort tiitg) {
  int e, ntok;
  if (!tmoe_tile_rows(args, counts, lists, tiles, tgpig, rows, outs, tiitg, e, ntok)) {
    return; // uniform: the whole tile is past this expert's list
  }
  const int m0 = tgpig.x * TMOE_GU_BM;
  const int nrows = min(TMOE_GU_BM, args.M - m0);
  // This thread's weight chunks: gate (threads 0-63) or up (64-127), row
  // wrow, 16 columns at 16*wc and 16*wc + 32 of the K step.
  const int up = tiitg / 64, wl = (tiitg % 64) / 2, wc = tiitg % 2;
  const int wrow = m0 + wl;
  const bool wlive = wrow < args.M;
  const ulong eo = (ulong)e * args.expert_bytes, so = (ulong)e * args.s_expert_bytes;
  device const uchar *wr = (up ? uw : gw) + eo + (ulong)(wlive ? wrow : 0) * args.row_bytes;
  device const uchar *sr = (up ? us : gs) + so + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  device const uchar *br = (up ? ub : gb) + so + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  threadgroup half *wdst = sw + (up * TMOE_GU_BM + wl) * TMOE_LD + 16 * wc;
  // This thread's activations: token xt, 16 columns at xc and xc + 32.
  const int xt = tiitg / 2, xc = 16 * (tiitg % 2);
  const int xrow = rows[xt];
  device const float *xr = x + (ulong)(xrow < 0 ? 0 : xrow) * args.x_stride;
  const bool vec = (args.x_stride & 3) == 0;
  threadgroup half *xdst = sx + xt * TMOE_LD + xc;

  tmoe_matmul<TMOE_GU_BM> mm;
  auto tx0 = tensor(sx, dextents<int32_t, 2>(TMOE_BK, ntok), array<int, 2>({1, TMOE_LD}));
  auto tw0 = tensor(sw, dextents<int32_t, 2>(TMOE_BK, nrows), array<int, 2>({1, TMOE_LD}));
  auto cg = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), float>();
  auto cu = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), float>();
  for (ushort i = 0; i < cg.get_capacity(); i++) {
    if (cg.is_valid_element(i)) {
      cg[i] = 0.0f;
      cu[i] = 0.0f;
    }
  }
  for (int k0 = 0; k0 < args.K; k0 += TMOE_BK) {
    for (int c = 0; c < 2; c++) {
      tmoe_stage_w<F>(args, wr, sr, br, wlive, k0 + 16 * wc + 32 * c, wdst + 32 * c);
      tmoe_stage_x<float, float4>(xr, xrow >= 0, vec, k0 + xc + 32 * c, args.K, xdst + 32 * c);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int kext = min(TMOE_BK, args.K - k0);
    auto tx = tensor(sx, dextents<int32_t, 2>(kext, ntok), array<int, 2>({1, TMOE_LD}));
    auto tg = tensor(sw, dextents<int32_t, 2>(kext, nrows), array<int, 2>({1, TMOE_LD}));
    auto tu = tensor(sw + TMOE_GU_BM * TMOE_LD, dextents<int32_t, 2>(kext, nrows), array<int, 2>({1, TMOE_LD}));
    mm.run(tx, tg, cg);
    mm.run(tx, tu, cu);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  // Epilogue in registers: element i of cg and cu is the same (row, token).
  for (ushort i = 0; i < cg.get_capacity(); i++) {
    if (!cg.is_valid_element(i)) {
      continue;
    }
    const array<int, 2> ix = cg.get_multidimensional_index(i); // (row in the tile, token)
    if (ix[1] < ntok && ix[0] < nrows) {
      const float g = cg[i];
      h[(ulong)outs[ix[1]] * args.y_stride + m0 + ix[0]] = half(g / (1.0f + exp(-g)) * cu[i]);
    }
  }
}

// tmoe_sty stores an output value as the kernel's Y: float, or bf16 bits
// (nearest even; a NaN stays a quiet NaN), as quant.Float32ToBF16.
static inline void tmoe_sty(device float *p, float v) { *p = v; }
static inline void tmoe_sty(device half *p, float v) { *p = half(v); }
static inline void tmoe_sty(device ushort *p, float v) {
  const uint u = as_type<uint>(v);
  *p = (u & 0x7fffffffu) > 0x7f800000u ? ushort((u >> 16) | 0x40u) : ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <typename F, typename Y>
static inline void moe_down_t_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                                   device const uchar *wb, device const half *x, device Y *y,
                                   device const int *counts, device const int *lists, device const int *tiles,
                                   threadgroup half *sw, threadgroup half *sx, threadgroup int *rows,
                                   threadgroup int *outs, uint3 tgpig, ushort tiitg) {
  int e, ntok;
  if (!tmoe_tile_rows(args, counts, lists, tiles, tgpig, rows, outs, tiitg, e, ntok)) {
    return; // uniform: the whole tile is past this expert's list
  }
  const int m0 = tgpig.x * TMOE_DN_BM;
  const int nrows = min(TMOE_DN_BM, args.M - m0);
  const int wl = tiitg / 2, wc = tiitg % 2;
  const int wrow = m0 + wl;
  const bool wlive = wrow < args.M;
  const ulong so = (ulong)e * args.s_expert_bytes;
  device const uchar *wr = w + (ulong)e * args.expert_bytes + (ulong)(wlive ? wrow : 0) * args.row_bytes;
  device const uchar *sr = ws + so + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  device const uchar *br = wb + so + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  threadgroup half *wdst = sw + wl * TMOE_LD + 16 * wc;
  const int xt = tiitg / 2, xc = 16 * (tiitg % 2);
  const int xrow = rows[xt];
  device const half *xr = x + (ulong)(xrow < 0 ? 0 : xrow) * args.x_stride;
  const bool vec = (args.x_stride & 3) == 0;
  threadgroup half *xdst = sx + xt * TMOE_LD + xc;

  tmoe_matmul<TMOE_DN_BM> mm;
  auto tx0 = tensor(sx, dextents<int32_t, 2>(TMOE_BK, ntok), array<int, 2>({1, TMOE_LD}));
  auto tw0 = tensor(sw, dextents<int32_t, 2>(TMOE_BK, nrows), array<int, 2>({1, TMOE_LD}));
  auto acc = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), float>();
  for (ushort i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      acc[i] = 0.0f;
    }
  }
  for (int k0 = 0; k0 < args.K; k0 += TMOE_BK) {
    for (int c = 0; c < 2; c++) {
      tmoe_stage_w<F>(args, wr, sr, br, wlive, k0 + 16 * wc + 32 * c, wdst + 32 * c);
      tmoe_stage_x<half, half4>(xr, xrow >= 0, vec, k0 + xc + 32 * c, args.K, xdst + 32 * c);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int kext = min(TMOE_BK, args.K - k0);
    auto tx = tensor(sx, dextents<int32_t, 2>(kext, ntok), array<int, 2>({1, TMOE_LD}));
    auto tw = tensor(sw, dextents<int32_t, 2>(kext, nrows), array<int, 2>({1, TMOE_LD}));
    mm.run(tx, tw, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (ushort i = 0; i < acc.get_capacity(); i++) {
    if (!acc.is_valid_element(i)) {
      continue;
    }
    const array<int, 2> ix = acc.get_multidimensional_index(i); // (row in the tile, token)
    if (ix[1] < ntok && ix[0] < nrows) {
      tmoe_sty(y + (ulong)outs[ix[1]] * args.y_stride + m0 + ix[0], acc[i]);
    }
  }
}

// Bindings as moe_gu_* / moe_down_* (moe.metal): h in half, y in Y (bf16
// bits, float for f16).
#define TMOE_GU_PARAMS                                                                                  \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *gw [[buffer(1)]],                     \
      device const uchar *gs [[buffer(2)]], device const uchar *gb [[buffer(3)]],                       \
      device const float *x [[buffer(4)]], device half *h [[buffer(5)]], device const int *counts [[buffer(6)]], \
      device const int *lists [[buffer(7)]], device const int *tiles [[buffer(8)]],                     \
      device const uchar *uw [[buffer(9)]], device const uchar *us [[buffer(10)]],                      \
      device const uchar *ub [[buffer(11)]], uint3 tgpig [[threadgroup_position_in_grid]],               \
      ushort tiitg [[thread_index_in_threadgroup]]
#define TMOE_DOWN_PARAMS(Y)                                                                             \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                      \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const half *x [[buffer(4)]], device Y *y [[buffer(5)]], device const int *counts [[buffer(6)]], \
      device const int *lists [[buffer(7)]], device const int *tiles [[buffer(8)]],                     \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]]
// Threadgroup arrays may only be declared in entry-point functions.
#define TMOE_GU_CALL(F)                                                                                 \
  threadgroup half sw[2 * TMOE_GU_BM * TMOE_LD];                                                        \
  threadgroup half sx[TMOE_BN * TMOE_LD];                                                               \
  threadgroup int rows[TMOE_BN];                                                                        \
  threadgroup int outs[TMOE_BN];                                                                        \
  moe_gu_t_impl<F>(args, gw, gs, gb, uw, us, ub, x, h, counts, lists, tiles, sw, sx, rows, outs, tgpig, tiitg)
#define TMOE_DOWN_CALL(F, Y)                                                                            \
  threadgroup half sw[TMOE_DN_BM * TMOE_LD];                                                            \
  threadgroup half sx[TMOE_BN * TMOE_LD];                                                               \
  threadgroup int rows[TMOE_BN];                                                                        \
  threadgroup int outs[TMOE_BN];                                                                        \
  moe_down_t_impl<F, Y>(args, w, ws, wb, x, y, counts, lists, tiles, sw, sx, rows, outs, tgpig, tiitg)

kernel void moe_gu_t_f16(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_f16); }
kernel void moe_gu_t_q8_0(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q8_0); }
kernel void moe_gu_t_q5_1(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q5_1); }
kernel void moe_gu_t_q5_0(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q5_0); }
kernel void moe_gu_t_q4_1(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q4_1); }
kernel void moe_gu_t_q4_0(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q4_0); }
kernel void moe_gu_t_q6_K(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q6_K); }
kernel void moe_gu_t_q5_K(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q5_K); }
kernel void moe_gu_t_q4_K(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q4_K); }
kernel void moe_gu_t_q3_K(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q3_K); }
kernel void moe_gu_t_q2_K(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_q2_K); }
kernel void moe_gu_t_mlx4(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_mlx4); }
kernel void moe_gu_t_mlx8(TMOE_GU_PARAMS) { TMOE_GU_CALL(fmt_mlx8); }

kernel void moe_down_t_f16(TMOE_DOWN_PARAMS(float)) { TMOE_DOWN_CALL(fmt_f16, float); }
kernel void moe_down_t_q8_0(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q8_0, ushort); }
kernel void moe_down_t_q5_1(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q5_1, ushort); }
kernel void moe_down_t_q5_0(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q5_0, ushort); }
kernel void moe_down_t_q4_1(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q4_1, ushort); }
kernel void moe_down_t_q4_0(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q4_0, ushort); }
kernel void moe_down_t_q6_K(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q6_K, ushort); }
kernel void moe_down_t_q5_K(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q5_K, ushort); }
kernel void moe_down_t_q4_K(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q4_K, ushort); }
kernel void moe_down_t_q3_K(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q3_K, ushort); }
kernel void moe_down_t_q2_K(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_q2_K, ushort); }
kernel void moe_down_t_mlx4(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_mlx4, ushort); }
kernel void moe_down_t_mlx8(TMOE_DOWN_PARAMS(ushort)) { TMOE_DOWN_CALL(fmt_mlx8, ushort); }

// ---- The int8 path: q4_K and q6_K experts on int8 x int8 -> int32 matmul2d
//
//   moe_gu_t8_<fmt>:   h[entry][m] = SiLU(x Wgᵀ) * (x Wuᵀ) in half (as the
//                      half kernels store h), x the token's q8_K row
//                      (quant_q8k_rows over the chunk's normed rows, one
//                      launch per layer);
//   moe_down_t8_<fmt>: y[entry][m] = h Wdᵀ in bf16 bits (summed in f32, read
//                      by moe_combine_bf16), h the entry's q8_K row
//                      (tensor_q8.metal's quant_q8k_rows_h over every routed
//                      entry's h).
// fmt is q4_K or q6_K (t8w.h). What passes from gate-up to down does not
// depend on either kernel's format: h is half rows of M (the FFN width)
// whatever the gate/up experts are, quantized by quant_q8k_rows_h to q8_K
// rows, and the down kernels read only q8_K rows; so a layer may pair
// moe_gu_t8_q4_K with moe_down_t8_q6_K (llama.cpp's Q4_K_M stores
// ffn_down_exps as q6_K in half the layers).
//
// Bindings, grids and tile table as moe_gu_t_* / moe_down_t_* (32 gate and
// 32 up rows, or 64 down rows, over one 64-token tile per threadgroup of 128
// threads), except that x (buffer 4) is q8_K rows of x_stride BYTES each,
// h (moe_gu_t8's buffer 5) is half and y (moe_down_t8's) bf16; buffers 2, 3
// (10, 11) are not read. K must be a multiple of 256 (the host chooses the
// kernels only then; any other K returns at once).
//
// Both sides are integers: the weight codes q of a sub-block (q4_K: 32
// values, codes 0..15; q6_K: 16 values, codes − 32 in [-32, 31]) and the
// activation codes a (int8) of q8_K. A K step of 128 (half a super-block:
// 4 sub-blocks of q4_K, 8 of q6_K) stages 64 weight rows' codes and the
// tile's 64 tokens' codes as int8 into threadgroup memory (weights: t8w.h's
// codes64, one 64-value chunk per thread; activations: straight 32-bit
// copies of the gathered rows, which a tensor operand cannot gather), with,
// at the first step of each super-block, the super-block's scales (per row:
// d, the NSUB scales, and for q4_K dmin and m[8]) and per token d_x (and
// for q4_K the 32-wide sums of a: bsums, per 16 in q8_K, added in pairs).
// Then per sub-block j one int8 matmul2d (mode multiply, k = 32 or 16)
// gives I_j[row][token] = Σ q·a in an int32 cooperative tensor, and the
// integer epilogue adds sc_j·I_j into an int32 accumulator of the same
// operation. Once per super-block a float step adds
//   d_x·d·float(Σ_j sc_j·I_j) − d_x·dmin·float(Σ_j m_j·bsum_j)
// (the expression of quant's K-quant · q8_K dot product, in its order; q6_K
// has no second term, t8w.h's t8_fstep says why dropping it changes no
// bit) to the f32 accumulator.
//
// int32 bounds (one super-block; the accumulator is reset after each):
// |a| <= 128 (quant_q8k_rows writes codes in [-127, 127]).
//   q4_K: q <= 15 and sc <= 63 (6 bits), so |I_j| <= 32·15·128 = 61440 and
//   |Σ_{j<8} sc_j·I_j| <= 8·63·61440 = 30965760 < 2^31 − 1 (69x headroom);
//   the min term |Σ_j m_j·bsum_j| <= 8·63·(32·128) = 2064384.
//   q6_K: |q − 32| <= 32 and |sc| <= 128 (int8), so |I_j| <= 16·32·128 =
//   65536 and |Σ_{j<16} sc_j·I_j| <= 16·128·65536 = 2^27 = 134217728 <
//   2^31 − 1 (16x headroom).
// Sums past 2^24 round in float(a) as quant's float32(si) rounds them.
//
// Cooperative tensors combine elementwise only when they come from the same
// matmul2d object (one layout): I, the integer accumulator and the f32
// accumulator are all int32 destinations of the one operation (the f32
// accumulator holds float bits, as_type), so element i of each is the same
// (row, token), found with get_multidimensional_index; gate and up are two
// runs of that same operation. The last token tile of an expert stages
// zeros (codes, d_x, bsums) for its dead tokens and the last row tile zeros
// for its dead rows, so every element is finite; only live (row, token)
// elements are written, straight to the entry's row.
//
// Threadgroup memory (TM8_CALL): codes 2 x 64 x 144 = 18,432 B, rows and
// outs 512 B, d (and dmin) 512 B, d_x 256 B; q4_K: scales and minimums 2 x
// 512 B, sums 1 KiB: 21,760 B; q6_K: scales 1 KiB: 20,742 B (4 B of unused
// minimums and 2 of sums). Two barriers per K step of 128 (one per 4
// sub-blocks of q4_K, per 8 of q6_K), one more at the start (the tile's
// rows).
#define TM8_KS 128           // K step: half a super-block
#define TM8_LD (TM8_KS + 16) // row stride of the staged int8 tiles in bytes
#define TM8_ROWS 64          // weight rows staged per step (gate + up, or down)

// The operation of both kernels: I (64 tokens x BM rows) = x codes (64 x
// SUB) * weight codes (BM x SUB)ᵀ, one sub-block, overwriting I.
template <int BM, int SUB>
using tm8_matmul = mpp::tensor_ops::matmul2d<
    mpp::tensor_ops::matmul2d_descriptor(TMOE_BN, BM, SUB, false, true, false,
                                         mpp::tensor_ops::matmul2d_descriptor::mode::multiply),
    execution_simdgroups<4>>;

// tm8_stage_x copies the 64 codes of the q8_K row xr from column k (a
// multiple of 64) to dst (zeros for a dead token).
static inline void tm8_stage_x(device const uchar *xr, int k, bool live, threadgroup int8_t *dst) {
  device const uchar *q = xr + Q8K_BYTES * (k / 256) + 4 + k % 256;
  threadgroup uint *d = (threadgroup uint *)dst;
  for (int j = 0; j < 16; j++) {
    d[j] = live ? ld_u32(q + 4 * j) : 0u;
  }
}

// tm8_wrow returns the weight row of staged row r (0..63): gate row m0 + r
// (r < 32) or up row m0 + r - 32 for GU, row m0 + r for down; live is false
// past the matrix (the pointer is then row 0's, not read).
template <bool GU>
static inline device const uchar *tm8_wrow(constant kargs_matmul &args, device const uchar *w0, device const uchar *w1,
                                          ulong eo, int m0, int nrows, int r, thread bool &live) {
  const int rr = GU ? r % TMOE_GU_BM : r;
  live = rr < nrows;
  return (GU && r >= TMOE_GU_BM ? w1 : w0) + eo + (ulong)(live ? m0 + rr : 0) * args.row_bytes;
}

// moe_t8_impl is both kernels for weight format F (t8w.h): GU (gate w0 and
// up w1, 32 rows each, h = SiLU(g)·u) or down (w0, 64 rows), writing Y
// (half h, bf16 bits y).
template <typename F, bool GU, typename Y>
static inline void moe_t8_impl(constant kargs_matmul &args, device const uchar *w0, device const uchar *w1,
                               device const uchar *xq, device Y *y, device const int *counts, device const int *lists,
                               device const int *tiles, threadgroup int8_t *sw, threadgroup int8_t *sx, threadgroup float *wd,
                               threadgroup uint *wsc, threadgroup uint *wm, threadgroup float *xd, threadgroup short *xbs,
                               threadgroup int *rows, threadgroup int *outs, uint3 tgpig, ushort tiitg) {
  if (args.K % 256 != 0) {
    return; // uniform: not a q8_K row length (the host never launches it so)
  }
  int e, ntok;
  if (!tmoe_tile_rows(args, counts, lists, tiles, tgpig, rows, outs, tiitg, e, ntok)) {
    return; // uniform: the whole tile is past this expert's list
  }
  constexpr int BM = GU ? TMOE_GU_BM : TMOE_DN_BM;
  constexpr int SPS = TM8_KS / F::SUB; // sub-blocks per step
  const int m0 = tgpig.x * BM;
  const int nrows = min(BM, args.M - m0);
  const ulong eo = (ulong)e * args.expert_bytes;
  // This thread's staging: weight row and token r = tiitg / 2, 64 columns
  // at 64 * p of the step.
  const int r = tiitg / 2, p = tiitg % 2;
  bool wlive;
  device const uchar *wr = tm8_wrow<GU>(args, w0, w1, eo, m0, nrows, r, wlive);
  const int xrow = rows[r];
  const bool xlive = xrow >= 0;
  device const uchar *xr = xq + (ulong)(xlive ? xrow : 0) * args.x_stride;
  threadgroup int8_t *wdst = sw + r * TM8_LD + 64 * p;
  threadgroup int8_t *xdst = sx + r * TM8_LD + 64 * p;
  // The scales this thread stages at each super-block: row tiitg (threads
  // 0-63) or token tiitg - 64 (64-127).
  const bool meta_row = tiitg < TM8_ROWS;
  const int mi = meta_row ? tiitg : tiitg - TM8_ROWS;
  bool mlive;
  device const uchar *mw = tm8_wrow<GU>(args, w0, w1, eo, m0, nrows, meta_row ? mi : 0, mlive);
  const int mrow = meta_row ? 0 : rows[mi];
  mlive = meta_row ? mlive : mrow >= 0;
  device const uchar *mx = xq + (ulong)(mrow < 0 ? 0 : mrow) * args.x_stride;
  threadgroup const int8_t *scb = (threadgroup const int8_t *)wsc;
  threadgroup const uchar *mb = (threadgroup const uchar *)wm;

  tm8_matmul<BM, F::SUB> mm;
  auto tx0 = tensor(sx, dextents<int32_t, 2>(F::SUB, TMOE_BN), array<int, 2>({1, TM8_LD}));
  auto tw0 = tensor(sw, dextents<int32_t, 2>(F::SUB, BM), array<int, 2>({1, TM8_LD}));
  // I0, a0, f0: gate (or down); I1, a1, f1: up (GU only). f* hold float bits.
  auto I0 = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>();
  auto a0 = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>();
  auto f0 = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>();
  auto I1 = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>();
  auto a1 = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>();
  auto f1 = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>();
  for (ushort i = 0; i < a0.get_capacity(); i++) {
    if (a0.is_valid_element(i)) {
      a0[i] = f0[i] = 0; // 0 is the bits of 0.0f
      if (GU) {
        a1[i] = f1[i] = 0;
      }
    }
  }
  for (int k0 = 0; k0 < args.K; k0 += TM8_KS) {
    const int blk = k0 / 256, half2 = (k0 % 256) / TM8_KS; // half2: first (0) or second (1) half
    const int sb0 = half2 * SPS;                           // the step's first sub-block
    if (half2 == 0) {
      if (meta_row) {
        F::meta(mw + F::BLOCK * blk, mlive, wd + 2 * mi, wsc + mi * (F::NSUB / 4), wm + (F::MINS ? 2 * mi : 0));
      } else {
        t8_stage_xmeta<F>(mx + Q8K_BYTES * blk, mlive, mi, xd, xbs);
      }
    }
    F::codes64(wr + F::BLOCK * blk, 2 * half2 + p, wlive, wdst);
    tm8_stage_x(xr, k0 + 64 * p, xlive, xdst);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int s = 0; s < SPS; s++) {
      auto tx = tensor(sx + F::SUB * s, dextents<int32_t, 2>(F::SUB, TMOE_BN), array<int, 2>({1, TM8_LD}));
      auto tw = tensor(sw + F::SUB * s, dextents<int32_t, 2>(F::SUB, BM), array<int, 2>({1, TM8_LD}));
      mm.run(tx, tw, I0);
      if (GU) {
        auto tu = tensor(sw + TMOE_GU_BM * TM8_LD + F::SUB * s, dextents<int32_t, 2>(F::SUB, BM), array<int, 2>({1, TM8_LD}));
        mm.run(tx, tu, I1);
      }
      // Integer epilogue: a += sc_j(row) * I_j.
      for (ushort i = 0; i < I0.get_capacity(); i++) {
        if (!I0.is_valid_element(i)) {
          continue;
        }
        const int row = I0.get_multidimensional_index(i)[0];
        a0[i] += int(scb[F::NSUB * row + sb0 + s]) * I0[i];
        if (GU) {
          a1[i] += int(scb[F::NSUB * (TMOE_GU_BM + row) + sb0 + s]) * I1[i];
        }
      }
    }
    if (half2 == 1) {
      // The super-block's float step, then a fresh integer accumulator.
      for (ushort i = 0; i < a0.get_capacity(); i++) {
        if (!a0.is_valid_element(i)) {
          continue;
        }
        const array<int, 2> ix = a0.get_multidimensional_index(i); // (row in the tile, token)
        const float dxv = xd[ix[1]];
        threadgroup const short *bs = xbs + (F::MINS ? 8 * ix[1] : 0);
        t8_fstep<F>(a0, f0, i, dxv, wd + 2 * ix[0], mb + (F::MINS ? 8 * ix[0] : 0), bs);
        if (GU) {
          const int ur = TMOE_GU_BM + ix[0];
          t8_fstep<F>(a1, f1, i, dxv, wd + 2 * ur, mb + (F::MINS ? 8 * ur : 0), bs);
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (ushort i = 0; i < f0.get_capacity(); i++) {
    if (!f0.is_valid_element(i)) {
      continue;
    }
    const array<int, 2> ix = f0.get_multidimensional_index(i); // (row in the tile, token)
    if (ix[1] < ntok && ix[0] < nrows) {
      device Y *dst = y + (ulong)outs[ix[1]] * args.y_stride + m0 + ix[0];
      const float g = as_type<float>(f0[i]);
      tmoe_sty(dst, GU ? g / (1.0f + exp(-g)) * as_type<float>(f1[i]) : g);
    }
  }
}

// Bindings as moe_gu_t_* / moe_down_t_*, x as q8_K bytes, h in half, y in
// bf16 bits.
#define TM8_GU_PARAMS                                                                                   \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *gw [[buffer(1)]],                      \
      device const uchar *gs [[buffer(2)]], device const uchar *gb [[buffer(3)]],                       \
      device const uchar *x [[buffer(4)]], device half *h [[buffer(5)]], device const int *counts [[buffer(6)]], \
      device const int *lists [[buffer(7)]], device const int *tiles [[buffer(8)]],                     \
      device const uchar *uw [[buffer(9)]], device const uchar *us [[buffer(10)]],                      \
      device const uchar *ub [[buffer(11)]], uint3 tgpig [[threadgroup_position_in_grid]],              \
      ushort tiitg [[thread_index_in_threadgroup]]
#define TM8_DOWN_PARAMS                                                                                 \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                       \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const uchar *x [[buffer(4)]], device ushort *y [[buffer(5)]], device const int *counts [[buffer(6)]], \
      device const int *lists [[buffer(7)]], device const int *tiles [[buffer(8)]],                     \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]]
// Threadgroup arrays may only be declared in entry-point functions.
#define TM8_CALL(F, GU, Y, W0, W1, OUT)                                                                   \
  threadgroup int8_t sw[TM8_ROWS * TM8_LD];                                                             \
  threadgroup int8_t sx[TMOE_BN * TM8_LD];                                                              \
  threadgroup float wd[2 * TM8_ROWS];                                                                   \
  threadgroup uint wsc[TM8_ROWS * F::NSUB / 4];                                                         \
  threadgroup uint wm[F::MINS ? 2 * TM8_ROWS : 1];                                                      \
  threadgroup float xd[TMOE_BN];                                                                        \
  threadgroup short4 xbs[F::MINS ? 2 * TMOE_BN : 1];                                                    \
  threadgroup int rows[TMOE_BN];                                                                        \
  threadgroup int outs[TMOE_BN];                                                                        \
  moe_t8_impl<F, GU, Y>(args, W0, W1, x, OUT, counts, lists, tiles, sw, sx, wd, wsc, wm, xd, (threadgroup short *)xbs, rows, outs, \
                        tgpig, tiitg)

kernel void moe_gu_t8_q4_K(TM8_GU_PARAMS) { TM8_CALL(t8w_q4_K, true, half, gw, uw, h); }
kernel void moe_down_t8_q4_K(TM8_DOWN_PARAMS) { TM8_CALL(t8w_q4_K, false, ushort, w, w, y); }
kernel void moe_gu_t8_q6_K(TM8_GU_PARAMS) { TM8_CALL(t8w_q6_K, true, half, gw, uw, h); }
kernel void moe_down_t8_q6_K(TM8_DOWN_PARAMS) { TM8_CALL(t8w_q6_K, false, ushort, w, w, y); }
