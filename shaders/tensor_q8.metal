// tensor_q8.metal: the int8 tensor path of the M5 (MSL 4: part of
// shaders.TensorLibrary with tensor.metal). The neural accelerators multiply
// int8 x int8 -> int32 at about twice their half rate, and the CPU reference
// already multiplies K-quant weights against activations quantized to q8_K
// (quant.QuantizeActivations), so q4_K and q6_K weights take the same
// integers here.
//
//   quant_q8k_rows: rows of f32 activations into quant's q8_K blocks,
//                   byte for byte (quant.quantizeQ8_K, ggml's
//                   quantize_row_q8_K): per 256 values d = 1/is with
//                   is = -127/smax (smax the first value of largest
//                   magnitude), codes min(127, rint(is*x)) (round half to
//                   even), a block of zeros when every value is 0, and the
//                   codes' sums per 16. A block is 292 bytes: float d,
//                   int8 qs[256], int16 bsums[16]. One simdgroup per block
//                   (8 values a lane), 4 blocks per threadgroup of 128
//                   threads; grid (ceil(rows*cols/256 / 4), 1, 1).
//                   Binding: 0 args (kargs_q8k: rows, cols a multiple of
//                   256, x_stride in floats, y_stride in bytes, a multiple
//                   of 4), 1 x (float), 2 y (bytes, 4-byte aligned).
//                   Inputs are finite with every block's largest magnitude
//                   0 or above 127/FLT_MAX (~3.7e-37), as for quant (beyond,
//                   is overflows and quant's own results are undefined).
//                   The division and rint are IEEE exact under the safe
//                   math mode both libraries are compiled with.
//
//   quant_q8k_rows_h: the same over rows of half (x_stride in halves): the
//                   int8 MoE's h (tensor_moe.metal). A half is exact in
//                   float, so the bytes are quant's of the widened values.
//
//   mul_mm_t8_q4_K, mul_mm_t8_q6_K: y[n][m] = sum_k x[n][k] * W[m][k] for
//                   q4_K or q6_K W ([M][K], K a multiple of 256) and x
//                   given as q8_K rows (from quant_q8k_rows), f32 y: the
//                   value of quant.VecDot(q4_K or q6_K) per output, the
//                   same integers summed in the same float order
//                   (bit-identical where the compiler does not contract the
//                   float step into fma: the emulator).
//                   Binding: 0 args (kargs_matmul: M, N, K, x_stride = bytes
//                   between q8_K rows, y_stride = floats between rows of y,
//                   row_bytes of W), 1 W, 2 x (q8_K rows), 3 y.
//                   Grid (ceil(N/64), ceil(M/64), 1), 128 threads.
//
// mul_mm_t8_<fmt> (fmt: t8w.h's formats): one 64-row x 64-token output tile
// per threadgroup of 128 threads (4 simdgroups, execution_simdgroups<4>).
// The weights' sub-blocks share one integer scale: 32 values (q4_K, codes
// 0..15, 8 a super-block, with 6-bit minimums) or 16 (q6_K, codes staged as
// code − 32 in [-32, 31], int8 scales, 16 a super-block, no minimums). Per
// super-block (256 k):
//   1. staging: each thread stages half of one weight row's codes (values
//      128 sh .. 128 sh + 127 as int8 in threadgroup memory, row r at byte
//      256 r, k in order: t8w.h's codes64 twice), and threads 0-63 the
//      block header of weight row tiitg (d, dmin, the scales and minimums
//      as bytes), threads 64-127 that of token tiitg - 64 (d and, for
//      q4_K, the 8 sums per 32 codes: q8_K's bsums are per 16, pairs added);
//   2. barrier; for each sub-block: one int8 matmul2d (mode multiply: 64
//      tokens x 64 rows x 32 or 16) of the token codes, read by the
//      operation straight from device memory (stride x_stride), with the
//      staged weight codes, into the int32 cooperative tensor I, then
//      acc[i] += sc[row][sb] * I[i] (integers);
//   3. acc_f[i] += (dx[t] * d[r]) * float(acc[i]) - (dx[t] * dmin[r]) *
//      float(sum_sb mins[r][sb] * bsum32[t][sb]) (quant.VecDot's float step,
//      in its order; for q6_K the second term is ±0 and dropped, which
//      changes no bit: t8w.h's t8_fstep), acc[i] = 0; barrier.
// The three cooperative tensors (I, acc, acc_f) come from the same matmul2d
// with the same operand and element types (acc_f holds float bits in int32),
// so element i of each is the same (row, token): the only elementwise
// combination of cooperative tensors here; rows and tokens come from
// get_multidimensional_index, and y is written element by element, clipped to
// M and N. Rows past M and tokens past N stage zero codes, scales, mins, d
// and sums (their codes are never read: the operands' extents stop at M
// and N).
// Threadgroup memory (T8_MM_CALL): 16 KiB of codes, d and dmin 512 B, the
// tokens' d 256 B; q4_K: scales and minimums 2 x 512 B, sums (short) 1 KiB:
// 19,200 bytes; q6_K: scales 1 KiB (and 6 unused bytes): 18,182 bytes.
// Two barriers per super-block (one per 8 sub-blocks of q4_K, per 16 of
// q6_K).
//
// int32 bound of acc (one super-block; |a| <= 128: quant_q8k_rows never
// writes -128, the bound allows it):
//   q4_K: |I| <= 32 * 15 * 128 = 61,440, scales <= 63, so |sc * I| <=
//   3,870,720 and the 8 sub-blocks give |acc| <= 30,965,760 < 2^31 - 1 (69x
//   headroom). The min term's integer is at most 8 * 63 * (32 * 128) =
//   2,064,384 < 2^24: exact in float.
//   q6_K: |code − 32| <= 32, so |I| <= 16 * 32 * 128 = 65,536; |sc| <= 128
//   (int8), so |sc * I| <= 8,388,608 and the 16 sub-blocks give |acc| <=
//   134,217,728 = 2^27 < 2^31 - 1 (16x headroom).
// acc beyond 2^24 rounds in float(acc) exactly as quant.VecDot's float32(si)
// does.
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
#include "kargs.h"
#include "quants.h"
#include "q8k.h"
#include "t8w.h"
using namespace metal;


// st_u32 and st_i16 store a little-endian word at p, 4- or 2-byte aligned.
static inline void st_u32(device uchar *p, uint v) {
#ifdef MSL_EMU
  msl::check_aligned(p, 4, "st_u32");
#endif
  *((device uint *)p) = v;
}
static inline void st_i16(device uchar *p, int v) {
#ifdef MSL_EMU
  msl::check_aligned(p, 2, "st_i16");
#endif
  *((device short *)p) = short(v);
}

// q8k_rows quantizes the rows of x (float or half; a half is exact in
// float, so half rows give quant's bytes of the widened values) as
// quant_q8k_rows documents: one simdgroup per block of 256.
template <typename T>
static inline void q8k_rows(constant kargs_q8k &args, device const T *x, device uchar *y, uint3 tgpig, ushort sgitg,
                            ushort tiisg) {
  const int nb = args.cols / 256;
  const long idx = long(tgpig.x) * 4 + sgitg; // this simdgroup's block over all rows
  if (nb <= 0 || idx >= long(args.rows) * nb) {
    return; // the whole simdgroup
  }
  const int row = int(idx / nb), blk = int(idx % nb);
  device const T *xb = x + (ulong)row * args.x_stride + 256 * blk + 8 * tiisg;
  device uchar *yb = y + (ulong)row * args.y_stride + Q8K_BYTES * blk;

  // The first value of largest magnitude: each lane's first in its 8, then
  // the lowest lane holding the block's largest.
  float v[8];
  float amax = 0.0f, smax = 0.0f;
  for (int j = 0; j < 8; j++) {
    v[j] = float(xb[j]);
    const float a = fabs(v[j]);
    if (a > amax) {
      amax = a;
      smax = v[j];
    }
  }
  const float bmax = simd_max(amax);
  const uint first = simd_min(amax == bmax ? uint(tiisg) : 32u);
  smax = simd_shuffle(smax, ushort(first));
  if (bmax == 0.0f) {
    // Every value 0: a block of zeros (d = +0).
    st_u32(yb + 4 + 8 * tiisg, 0u);
    st_u32(yb + 8 + 8 * tiisg, 0u);
    if (tiisg % 2 == 0) {
      st_i16(yb + 260 + tiisg, 0);
    }
    if (tiisg == 0) {
      st_u32(yb, 0u);
    }
    return; // the whole simdgroup (bmax is the simdgroup's)
  }
  const float is = -127.0f / smax;
  uint word[2] = {0u, 0u};
  int sum = 0;
  for (int j = 0; j < 8; j++) {
    const int q = min(127, int(rint(is * v[j])));
    word[j / 4] |= (uint(q) & 255u) << (8 * (j % 4));
    sum += q;
  }
  st_u32(yb + 4 + 8 * tiisg, word[0]);
  st_u32(yb + 8 + 8 * tiisg, word[1]);
  // Lanes 2g and 2g+1 hold the 16 codes of bsums[g].
  const int pair = sum + simd_shuffle_xor(sum, ushort(1));
  if (tiisg % 2 == 0) {
    st_i16(yb + 260 + tiisg, pair);
  }
  if (tiisg == 0) {
    st_u32(yb, as_type<uint>(1.0f / is));
  }
}

kernel void quant_q8k_rows(constant kargs_q8k &args [[buffer(0)]], device const float *x [[buffer(1)]],
                           device uchar *y [[buffer(2)]], uint3 tgpig [[threadgroup_position_in_grid]],
                           ushort sgitg [[simdgroup_index_in_threadgroup]],
                           ushort tiisg [[thread_index_in_simdgroup]]) {
  q8k_rows(args, x, y, tgpig, sgitg, tiisg);
}

// quant_q8k_rows_h is quant_q8k_rows over rows of half (x_stride halves
// apart; the int8 MoE's h). Values must be finite: an h that overflowed
// half is inf, and its block is undefined, as quant's.
kernel void quant_q8k_rows_h(constant kargs_q8k &args [[buffer(0)]], device const half *x [[buffer(1)]],
                             device uchar *y [[buffer(2)]], uint3 tgpig [[threadgroup_position_in_grid]],
                             ushort sgitg [[simdgroup_index_in_threadgroup]],
                             ushort tiisg [[thread_index_in_simdgroup]]) {
  q8k_rows(args, x, y, tgpig, sgitg, tiisg);
}

#define T8_BM 64 // weight rows per threadgroup
#define T8_BN 64 // tokens per threadgroup

// mul_mm_t8_impl is mul_mm_t8_<F> (the file's header): the threadgroup
// arrays are the entry's (T8_MM_CALL).
template <typename F>
static inline void mul_mm_t8_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *xq, device float *y,
                                  threadgroup int8_t *sw, threadgroup float *wd, threadgroup uint *wsc, threadgroup uint *wm,
                                  threadgroup float *xd, threadgroup short *xbs, uint3 tgpig, ushort tiitg) {
  const int m0 = int(tgpig.y) * T8_BM, n0 = int(tgpig.x) * T8_BN;
  const int rows = min(T8_BM, args.M - m0), toks = min(T8_BN, args.N - n0);
  const int nsb = args.K / 256;
  // The operation takes non-const element types; it only reads x.
  device int8_t *xt = (device int8_t *)xq + (ulong)n0 * args.x_stride;
  threadgroup const int8_t *scb = (threadgroup const int8_t *)wsc;
  threadgroup const uchar *mb = (threadgroup const uchar *)wm;

  // destination (64 tokens x 64 rows) = x codes (64 x SUB) * W codesᵀ: the
  // right operand is the staged tile as stored, [row][k], so transposed.
  constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(T8_BN, T8_BM, F::SUB, false, true, false,
                                                             mpp::tensor_ops::matmul2d_descriptor::mode::multiply);
  mpp::tensor_ops::matmul2d<desc, execution_simdgroups<4>> mm;
  auto tx0 = tensor(xt + 4, dextents<int32_t, 2>(F::SUB, toks), array<int, 2>({1, args.x_stride}));
  auto tw0 = tensor(sw, dextents<int32_t, 2>(F::SUB, rows), array<int, 2>({1, 256}));
  auto ci = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>(); // one sub-block
  auto ca = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>(); // the super-block
  auto cf = mm.template get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>(); // the sum: float bits
  for (ushort i = 0; i < ca.get_capacity(); i++) {
    if (ca.is_valid_element(i)) {
      ca[i] = 0;
      cf[i] = 0; // +0.0f
    }
  }

  // Staging roles: codes of weight row sr, chunks 2 sh and 2 sh + 1; the
  // block header of weight row mi (threads 0-63) or token mi (64-127).
  const int sr = tiitg / 2, sh = tiitg % 2;
  const bool wlive = m0 + sr < args.M;
  device const uchar *wr = w + (ulong)(m0 + (wlive ? sr : 0)) * args.row_bytes;
  const bool meta_row = tiitg < T8_BM;
  const int mi = meta_row ? tiitg : tiitg - T8_BM;
  const bool mlive = meta_row ? m0 + mi < args.M : n0 + mi < args.N;
  device const uchar *mrow = meta_row ? w + (ulong)(m0 + (mlive ? mi : 0)) * args.row_bytes
                                      : xq + (ulong)(n0 + (mlive ? mi : 0)) * args.x_stride;
  for (int b = 0; b < nsb; b++) {
    for (int c = 2 * sh; c < 2 * sh + 2; c++) {
      F::codes64(wr + F::BLOCK * b, c, wlive, sw + sr * 256 + 64 * c);
    }
    if (meta_row) {
      F::meta(mrow + F::BLOCK * b, mlive, wd + 2 * mi, wsc + mi * (F::NSUB / 4), wm + (F::MINS ? 2 * mi : 0));
    } else {
      // 4-byte aligned: x_stride and 292 are multiples of 4.
      t8_stage_xmeta<F>(mrow + Q8K_BYTES * b, mlive, mi, xd, xbs);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    device int8_t *xs = xt + Q8K_BYTES * b + 4;
    for (int sb = 0; sb < F::NSUB; sb++) {
      auto tx = tensor(xs + F::SUB * sb, dextents<int32_t, 2>(F::SUB, toks), array<int, 2>({1, args.x_stride}));
      auto tw = tensor(sw + F::SUB * sb, dextents<int32_t, 2>(F::SUB, rows), array<int, 2>({1, 256}));
      mm.run(tx, tw, ci);
      for (ushort i = 0; i < ci.get_capacity(); i++) {
        if (ci.is_valid_element(i)) {
          const int r = ci.get_multidimensional_index(i)[0];
          ca[i] += int(scb[F::NSUB * r + sb]) * ci[i];
        }
      }
    }
    for (ushort i = 0; i < ca.get_capacity(); i++) {
      if (ca.is_valid_element(i)) {
        const auto ix = ca.get_multidimensional_index(i);
        const int r = ix[0], t = ix[1];
        t8_fstep<F>(ca, cf, i, xd[t], wd + 2 * r, mb + (F::MINS ? 8 * r : 0), xbs + (F::MINS ? 8 * t : 0));
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (ushort i = 0; i < cf.get_capacity(); i++) {
    if (cf.is_valid_element(i)) {
      const auto ix = cf.get_multidimensional_index(i);
      const int r = ix[0], t = ix[1];
      if (r < rows && t < toks) {
        y[(ulong)(n0 + t) * args.y_stride + m0 + r] = as_type<float>(cf[i]);
      }
    }
  }
}

#define T8_MM_PARAMS                                                                                    \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                      \
      device const uchar *xq [[buffer(2)]], device float *y [[buffer(3)]],                              \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]]
// Threadgroup arrays may only be declared in entry-point functions.
#define T8_MM_CALL(F)                                                                                   \
  threadgroup uint sq[T8_BM * 256 / 4];                /* codes, row r at byte 256 r */                  \
  threadgroup float wd[2 * T8_BM];                     /* d, dmin per row */                             \
  threadgroup uint wsc[T8_BM * F::NSUB / 4];           /* scales per row (bytes) */                      \
  threadgroup uint wm[F::MINS ? 2 * T8_BM : 1];        /* 8 minimums per row (bytes) */                  \
  threadgroup float xd[T8_BN];                         /* d per token */                                 \
  threadgroup short4 xbs[F::MINS ? 2 * T8_BN : 1];     /* 8 code sums per 32 per token */                \
  mul_mm_t8_impl<F>(args, w, xq, y, (threadgroup int8_t *)sq, wd, wsc, wm, xd, (threadgroup short *)xbs, tgpig, tiitg)

kernel void mul_mm_t8_q4_K(T8_MM_PARAMS) { T8_MM_CALL(t8w_q4_K); }
kernel void mul_mm_t8_q6_K(T8_MM_PARAMS) { T8_MM_CALL(t8w_q6_K); }
