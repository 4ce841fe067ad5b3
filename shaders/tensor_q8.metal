// tensor_q8.metal: the int8 tensor path of the M5 (MSL 4: part of
// shaders.TensorLibrary with tensor.metal). The neural accelerators multiply
// int8 x int8 -> int32 at about twice their half rate, and the CPU reference
// already multiplies K-quant weights against activations quantized to q8_K
// (quant.QuantizeActivations), so q4_K weights take the same integers here.
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
//   mul_mm_t8_q4_K: y[n][m] = sum_k x[n][k] * W[m][k] for q4_K W ([M][K],
//                   K a multiple of 256) and x given as q8_K rows (from
//                   quant_q8k_rows), f32 y: the value of quant.VecDot(q4_K)
//                   per output, the same integers summed in the same float
//                   order (bit-identical where the compiler does not
//                   contract the float step into fma: the emulator).
//                   Binding: 0 args (kargs_matmul: M, N, K, x_stride = bytes
//                   between q8_K rows, y_stride = floats between rows of y,
//                   row_bytes of W), 1 W, 2 x (q8_K rows), 3 y.
//                   Grid (ceil(N/64), ceil(M/64), 1), 128 threads.
//
// mul_mm_t8_q4_K: one 64-row x 64-token output tile per threadgroup of 128
// threads (4 simdgroups, execution_simdgroups<4>). Per super-block (256 k):
//   1. staging: each thread stages half of one weight row's codes (64 of the
//      128 code bytes: 16 word loads, the nibbles 0..15 as int8 in
//      threadgroup memory, row r at byte 256 r, k in order), that row's 8
//      6-bit scales (thread 0 of the pair) or 8 mins (thread 1) and d or
//      dmin, and half of one token's block header: d (thread 0) and 4 of the
//      8 sums per 32 codes (q8_K's bsums are per 16: pairs added);
//   2. barrier; for each of the 8 sub-blocks of 32: one int8 matmul2d
//      (mode multiply: 64 tokens x 64 rows x 32) of the token codes, read
//      by the operation straight from device memory (stride x_stride), with
//      the staged weight codes, into the int32 cooperative tensor I, then
//      acc[i] += sc[row][sb] * I[i] (integers);
//   3. acc_f[i] += (dx[t] * d[r]) * float(acc[i]) - (dx[t] * dmin[r]) *
//      float(sum_sb mins[r][sb] * bsum32[t][sb]) (quant.VecDot's float step,
//      in its order), acc[i] = 0; barrier.
// The three cooperative tensors (I, acc, acc_f) come from the same matmul2d
// with the same operand and element types (acc_f holds float bits in int32),
// so element i of each is the same (row, token): the only elementwise
// combination of cooperative tensors here; rows and tokens come from
// get_multidimensional_index, and y is written element by element, clipped to
// M and N. Rows past M and tokens past N stage zero scales, mins, d and
// sums (their codes are never read: the operands' extents stop at M and N).
// Threadgroup memory: 16 KiB of codes, scales 512 B, mins and sums as int4
// 2 x 2 KiB, d, dmin and the tokens' d 3 x 256 B: 21,760 bytes. Two barriers
// per super-block (one per 4 sub-blocks).
//
// int32 bound of acc (one super-block): |I| <= 32 * 15 * 128 = 61,440 (weight
// nibbles 0..15, q8_K codes in [-128, 127]: quant_q8k_rows never writes
// -128), scales <= 63, so |sc * I| <= 3,870,720 and the 8 sub-blocks give
// |acc| <= 30,965,760 < 2^31 - 1 (69x headroom). The min term's integer is at
// most 8 * 63 * (32 * 128) = 2,064,384 < 2^24: exact in float. acc beyond
// 2^24 rounds in float(acc) exactly as quant.VecDot's float32(si) does.
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
#include "kargs.h"
#include "quants.h"
#include "q8k.h"
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

kernel void mul_mm_t8_q4_K(constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],
                           device const uchar *xq [[buffer(2)]], device float *y [[buffer(3)]],
                           uint3 tgpig [[threadgroup_position_in_grid]],
                           ushort tiitg [[thread_index_in_threadgroup]]) {
  threadgroup uint sq[T8_BM * 256 / 4]; // the super-block's weight codes (int8 0..15), row r at byte 256 r
  threadgroup uint ssc[T8_BM * 2];      // 8 scales per row (bytes)
  threadgroup int4 smn[T8_BM * 2];      // 8 mins per row
  threadgroup float sdw[T8_BM];         // d per row
  threadgroup float sdm[T8_BM];         // dmin per row
  threadgroup float sdx[T8_BN];         // d per token
  threadgroup int4 sbs[T8_BN * 2];      // 8 code sums per 32 per token

  const int m0 = int(tgpig.y) * T8_BM, n0 = int(tgpig.x) * T8_BN;
  const int rows = min(T8_BM, args.M - m0), toks = min(T8_BN, args.N - n0);
  const int nsb = args.K / 256;
  // The operation takes non-const element types; it only reads x.
  device int8_t *xt = (device int8_t *)xq + (ulong)n0 * args.x_stride;
  threadgroup int8_t *sw = (threadgroup int8_t *)sq;
  threadgroup const uchar *scb = (threadgroup const uchar *)ssc;

  // destination (64 tokens x 64 rows) = x codes (64 x 32) * W codesᵀ: the
  // right operand is the staged tile as stored, [row][k], so transposed.
  constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(T8_BN, T8_BM, 32, false, true, false,
                                                             mpp::tensor_ops::matmul2d_descriptor::mode::multiply);
  mpp::tensor_ops::matmul2d<desc, execution_simdgroups<4>> mm;
  auto tx0 = tensor(xt + 4, dextents<int32_t, 2>(32, toks), array<int, 2>({1, args.x_stride}));
  auto tw0 = tensor(sw, dextents<int32_t, 2>(32, rows), array<int, 2>({1, 256}));
  auto ci = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>(); // one sub-block
  auto ca = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>(); // the super-block
  auto cf = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), int32_t>(); // the sum: float bits
  for (ushort i = 0; i < ca.get_capacity(); i++) {
    if (ca.is_valid_element(i)) {
      ca[i] = 0;
      cf[i] = 0; // +0.0f
    }
  }

  // Staging roles: weight row and token sr, half sh.
  const int sr = tiitg / 2, sh = tiitg % 2;
  const bool wlive = m0 + sr < args.M, xlive = n0 + sr < args.N;
  device const uchar *wr = w + (ulong)(m0 + sr) * args.row_bytes;
  device const uchar *xr = xq + (ulong)(n0 + sr) * args.x_stride;
  for (int b = 0; b < nsb; b++) {
    if (wlive) {
      device const uchar *blk = wr + 144 * b; // 4-byte aligned (quants.h)
      // Code bytes 32c..32c+31 hold sub-block 2c (low nibbles) and 2c+1
      // (high); this thread takes c = 2 sh and 2 sh + 1.
      for (int c = 2 * sh; c < 2 * sh + 2; c++) {
        threadgroup uint *lo = sq + (sr * 256 + 64 * c) / 4;
        for (int i = 0; i < 8; i++) {
          const uint q = ld_u32(blk + 16 + 32 * c + 4 * i);
          lo[i] = q & 0x0f0f0f0fu;
          lo[8 + i] = (q >> 4) & 0x0f0f0f0fu;
        }
      }
      // The 12 scale bytes as three words: sub-block j < 4 has scale
      // s0[j] & 63 and min s1[j] & 63; j >= 4 (byte i = j - 4) scale
      // (s2[i] & 15) | (s0[i] >> 6) << 4 and min (s2[i] >> 4) | (s1[i] >> 6) << 4.
      const uint dd = ld_u32(blk), s0 = ld_u32(blk + 4), s1 = ld_u32(blk + 8), s2 = ld_u32(blk + 12);
      if (sh == 0) {
        ssc[2 * sr] = s0 & 0x3f3f3f3fu;
        ssc[2 * sr + 1] = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
        sdw[sr] = f16_lo(dd);
      } else {
        const uint lo = s1 & 0x3f3f3f3fu, hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
        smn[2 * sr] = int4(int(lo & 255u), int((lo >> 8) & 255u), int((lo >> 16) & 255u), int(lo >> 24));
        smn[2 * sr + 1] = int4(int(hi & 255u), int((hi >> 8) & 255u), int((hi >> 16) & 255u), int(hi >> 24));
        sdm[sr] = f16_hi(dd);
      }
    } else if (sh == 0) {
      ssc[2 * sr] = 0u;
      ssc[2 * sr + 1] = 0u;
      sdw[sr] = 0.0f;
    } else {
      smn[2 * sr] = int4(0);
      smn[2 * sr + 1] = int4(0);
      sdm[sr] = 0.0f;
    }
    if (xlive) {
      device const uchar *xb = xr + Q8K_BYTES * b; // 4-byte aligned: x_stride and 292 are multiples of 4
      if (sh == 0) {
        sdx[sr] = as_type<float>(ld_u32(xb));
      }
      // bsums[2p] and bsums[2p+1] are the low and high halves of word p;
      // this thread takes p = 4 sh .. 4 sh + 3.
      int s32[4];
      for (int p = 0; p < 4; p++) {
        const uint s = ld_u32(xb + 260 + 16 * sh + 4 * p);
        s32[p] = int(short(ushort(s & 0xffffu))) + int(short(ushort(s >> 16)));
      }
      sbs[2 * sr + sh] = int4(s32[0], s32[1], s32[2], s32[3]);
    } else {
      if (sh == 0) {
        sdx[sr] = 0.0f;
      }
      sbs[2 * sr + sh] = int4(0);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    device int8_t *xs = xt + Q8K_BYTES * b + 4;
    for (int sb = 0; sb < 8; sb++) {
      auto tx = tensor(xs + 32 * sb, dextents<int32_t, 2>(32, toks), array<int, 2>({1, args.x_stride}));
      auto tw = tensor(sw + 32 * sb, dextents<int32_t, 2>(32, rows), array<int, 2>({1, 256}));
      mm.run(tx, tw, ci);
      for (ushort i = 0; i < ci.get_capacity(); i++) {
        if (ci.is_valid_element(i)) {
          const int r = ci.get_multidimensional_index(i)[0];
          ca[i] += int(scb[8 * r + sb]) * ci[i];
        }
      }
    }
    for (ushort i = 0; i < ca.get_capacity(); i++) {
      if (ca.is_valid_element(i)) {
        const auto ix = ca.get_multidimensional_index(i);
        const int r = ix[0], t = ix[1];
        const int4 m0v = smn[2 * r], m1v = smn[2 * r + 1], b0v = sbs[2 * t], b1v = sbs[2 * t + 1];
        const int sm = m0v.x * b0v.x + m0v.y * b0v.y + m0v.z * b0v.z + m0v.w * b0v.w + m1v.x * b1v.x + m1v.y * b1v.y +
                       m1v.z * b1v.z + m1v.w * b1v.w;
        const float dx = sdx[t];
        const float p = (dx * sdw[r]) * float(ca[i]);
        const float q = (dx * sdm[r]) * float(sm);
        cf[i] = as_type<int>(as_type<float>(cf[i]) + (p - q));
        ca[i] = 0;
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
