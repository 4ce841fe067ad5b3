// tensor_attn.metal: flash attention on the M5 path (Metal 4 tensor
// operations, MSL 4: part of shaders.TensorLibrary with tensor.metal).
//
//   attn_limbs_qk:     splits rows of Q or K (heads of 128 floats) into int8
//                      limbs and a scale per (row, head);
//   attn_limbs_v:      splits V into int8 limbs per 64-key block and kv
//                      head, a scale per (block, kv head, channel);
//   flash_attn_t_d128: the op of flash_attn_mma_d128 (attention.metal):
//                      grouped-query attention under the causal mask or the
//                      per-query key ranges of args.ranged, head size 128,
//                      f32 out, with QKᵀ and PV as int8 x int8 -> int32
//                      matmul2d on the limbs. The other head sizes (the
//                      encoders' 72 and 64, 32) keep the shader kernels.
//
// Limbs. A vector x (a Q row of one head, a K row of one kv head, the
// probabilities of one query row over a 64-key block, one channel of V over
// a 64-key block) becomes codes X = rint(x·r), r = TA_CODE/max|x|, clamped
// to [-TA_CODE, TA_CODE], with the scale s = max|x|/TA_CODE (x ≈ s·X), and
// each code three int8 limbs X = 65536h + 256m + l (a = floor((X+128)/256),
// l = X - 256a, h = floor((a+128)/256), m = a - 256h; TA_CODE = 8355711
// keeps h in [-128, 127]). A vector with a non-finite element gets codes 0
// and the scale NaN (its products are NaN, as the float products were), an
// all-zero one codes 0 and the scale 0. A product of two such vectors is
//
//   x·y = sx·sy·(2^32 (h·h') + 2^24 (h·m' + m·h') + 2^16 (h·l' + m·m' + l·h'))
//
// (the terms of weight 2^8 and 1 dropped): three matmul2d runs of one
// operation (one descriptor with a dynamic k, the same operand types, so
// their int32 destinations share one layout) with k = 1, 2 and 3 limb
// widths: left [h | m | l] against right [l' | m' | h'] read from the k-th
// last limb on (the right's limbs stored low first). int8 products sum
// exactly in int32 (at most 384·2^14 < 2^23 here) and the weighted sum is
// formed in float (exact terms, one rounding each).
//
// Precision. Rounding x to 24-bit codes errs by at most max|x|·2^-24 per
// element (plus the float rounding of x·r); the dropped terms are below
// 2^8·(2·n·2^14) in code units, at most n·2^-23 of max|x|·max|y| over n
// elements and far less with signs at random: the level of the float sums
// of the float kernel. Why three limbs, 6 int8 products per matmul: with two
// (16-bit codes, products h·h' and h·l' + l·h', 3 per matmul) a float64
// model of this kernel gives an NMSE against exact attention of ~7e-9 to
// 2e-8 on normal q and k of std 1 to 2 and 5e-7 with a few channels of q
// and k 10x their rms; with the l·l' product too (4 per matmul) still 9e-8
// there (16-bit codes relative to the outlier are too coarse), against the
// conformance tolerance of 1e-8. Nor can PV alone drop to two limbs on one
// side (5 products: 16-bit P or V codes against 24-bit ones): a few V rows
// 10-30x the rms (attention sinks) in the block of a row's dominant key
// put that block's V codes (scaled to the sink) or the sink's rounded p
// (times its large V) off by ~7e-8 in NMSE, and 16-bit P codes alone give
// 2e-9 to 4e-9 on plain inputs (emulated and modelled alike). With three
// limbs the kernel's NMSE is ~4e-13 on those inputs and at most ~2.5e-11
// under the stress cases of shaders/tensor_attn_test.go, which logs it per
// case.
//
// One threadgroup of 128 threads (4 simdgroups) takes 64 queries of one
// head and walks the 64-key blocks (aligned to multiples of 64) that hold
// the keys its queries see (the union of their ranges; with the causal mask
// nothing past the last query):
//   1. S = Q Kᵀ: three runs (k = 128, 256, 384) of one matmul2d (64 queries
//      x 64 keys) reading the limbs straight from device memory (no
//      staging); each thread combines its own elements of the three int32
//      destinations into float scores (times the rows' and keys' scales and
//      scale·log2(e)) and stores them to threadgroup memory;
//   2. the online softmax on the ALUs: two threads per query row, 32 keys
//      each, masked keys p = 0, exp2, the row max and sum reduced over the
//      pair with one shuffle. A row keeps its reference max while a block's
//      max stays within TA_SLACK (log2 units) above it (p <= 2^TA_SLACK), so
//      O is rescaled only when some row's reference moves: then each thread
//      multiplies its own O elements by their row's factor. The row's
//      probabilities in this block become limbs with the scale sp (their max
//      over the pair / TA_CODE), written over the row's own scores (after a
//      simdgroup barrier: the pair shares a simdgroup) as [Pl | Pm | Ph],
//      192 bytes of the row's 256;
//   3. O += P V: three runs (k = 64, 128, 192) of one matmul2d (64 queries x
//      128) of the P limbs in threadgroup memory and the block's V limbs
//      [Vh; Vm; Vl] (rows of 128) from device memory. O stays in float, in
//      registers: each thread's elements of an int32 destination of that
//      operation (holding float bits), so O[i] lines up with the products'
//      element i; O += sp[row]·sv[col]·(2^32 A + 2^24 B + 2^16 C).
// At the end each thread divides its own O elements by their row's sum
// (rows without keys give 0) and stores those of the tile's queries. Three
// threadgroup barriers per key block (after S, after P, after PV) and one
// simdgroup barrier, two more per threadgroup (the rows' scales, the sums).
// Grid (ceil(L/64), n_head, 1).
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
#include "kargs.h"
using namespace metal;

#define TA_Q 64                        // queries per threadgroup
#define TA_K 64                        // keys per block
#define TA_SLACK 8.0f                  // log2 headroom before a row's reference max moves
#define TA_D 128                       // head size
#define TA_LIMBS 3                     // int8 limbs per value
#define TA_LW (TA_LIMBS * TA_D)        // bytes of the limbs of one Q or K vector
#define TA_VB (TA_LIMBS * TA_K * TA_D) // bytes of the V limbs of one block and kv head
#define TA_SROW (4 * TA_K)             // bytes of a row of S (the P limbs take the first 3·TA_K)
#define TA_CODE 8355711                // largest |code|: h = floor((floor((X+128)/256)+128)/256) <= 127
#define TA_CODE_F 8355711.0f

// tattn_code returns the code of x at the reciprocal scale r (0 for a NaN
// product: the vector's scale is NaN then).
static inline int tattn_code(float x, float r) {
  const float t = x * r;
  return t == t ? int(clamp(rint(t), -TA_CODE_F, TA_CODE_F)) : 0;
}

// tattn_split returns the limbs (h, m, l) of code X: X = 65536h + 256m + l.
static inline int3 tattn_split(int X) {
  const int a = (X + 128) >> 8;
  const int h = (a + 128) >> 8;
  return int3(h, a - 256 * h, X - 256 * a);
}

// tattn_pack packs the low bytes of four limbs, first in the lowest byte.
static inline uint tattn_pack(int a, int b, int c, int d) {
  return (uint(a) & 0xffu) | ((uint(b) & 0xffu) << 8) | ((uint(c) & 0xffu) << 16) | ((uint(d) & 0xffu) << 24);
}

// attn_limbs_qk: the limbs of rows of x ([rows][heads][128] floats, x_stride
// floats between rows): one simdgroup per (row, head), four channels a lane;
// limbs[(row·heads + head)·384 ...] = [h | m | l] (args.k_order 0, Q) or
// [l | m | h] (1, K), scales[row·heads + head] = s. The grid covers the
// padded rows (a multiple of 64; grid.x = padded rows·heads/4): rows past
// args.rows get codes 0 and the scale 0.
kernel void attn_limbs_qk(constant kargs_attn_limbs &args [[buffer(0)]], device const float *x [[buffer(1)]],
                          device uint *limbs [[buffer(2)]], device float *scales [[buffer(3)]],
                          uint3 tgpig [[threadgroup_position_in_grid]], ushort tiisg [[thread_index_in_simdgroup]],
                          ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  const int g = tgpig.x * 4 + sgitg; // the vector: row g / heads, head g % heads
  const int row = g / args.heads, head = g % args.heads;
  float xv[4];
  bool ok = true;
  float m = 0.0f;
  for (int j = 0; j < 4; j++) {
    xv[j] = row < args.rows ? x[(ulong)row * args.x_stride + head * TA_D + 4 * tiisg + j] : 0.0f;
    ok = ok && isfinite(xv[j]);
    m = max(m, fabs(xv[j]));
  }
  ok = simd_all(ok);
  m = simd_max(m);
  const float r = ok && m > 0.0f ? TA_CODE_F / m : 0.0f;
  int3 t[4];
  for (int j = 0; j < 4; j++) {
    t[j] = tattn_split(ok ? tattn_code(xv[j], r) : 0);
  }
  device uint *dst = limbs + (ulong)g * (TA_LW / 4) + tiisg;
  const uint wh = tattn_pack(t[0].x, t[1].x, t[2].x, t[3].x);
  const uint wm = tattn_pack(t[0].y, t[1].y, t[2].y, t[3].y);
  const uint wl = tattn_pack(t[0].z, t[1].z, t[2].z, t[3].z);
  dst[0] = args.k_order ? wl : wh;
  dst[TA_D / 4] = wm;
  dst[2 * TA_D / 4] = args.k_order ? wh : wl;
  if (tiisg == 0) {
    scales[g] = ok ? m / TA_CODE_F : NAN;
  }
}

// attn_limbs_v: the limbs of V ([rows][heads][128] floats) per 64-key block
// and kv head: one threadgroup per (block, head) (grid (blocks, heads, 1)),
// one thread per channel; limbs[((block·heads + head)·192 + j)·128 + c] for
// row j of [Vh (64 keys); Vm; Vl], scales[(block·heads + head)·128 + c].
// Keys past args.rows get codes 0 (and do not count in the scale).
kernel void attn_limbs_v(constant kargs_attn_limbs &args [[buffer(0)]], device const float *v [[buffer(1)]],
                         device int8_t *limbs [[buffer(2)]], device float *scales [[buffer(3)]],
                         uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]]) {
  const int b = tgpig.x, head = tgpig.y, c = tiitg;
  const int k0 = b * TA_K;
  const int nk = clamp(args.rows - k0, 0, TA_K);
  device const float *src = v + (ulong)k0 * args.x_stride + head * TA_D + c;
  bool ok = true;
  float m = 0.0f;
  for (int j = 0; j < nk; j++) {
    const float e = src[(ulong)j * args.x_stride];
    ok = ok && isfinite(e);
    m = max(m, fabs(e));
  }
  const float r = ok && m > 0.0f ? TA_CODE_F / m : 0.0f;
  device int8_t *dst = limbs + ((ulong)b * args.heads + head) * TA_VB + c;
  for (int j = 0; j < TA_K; j++) {
    const int3 t = tattn_split(ok && j < nk ? tattn_code(src[(ulong)j * args.x_stride], r) : 0);
    dst[j * TA_D] = int8_t(t.x);
    dst[(TA_K + j) * TA_D] = int8_t(t.y);
    dst[(2 * TA_K + j) * TA_D] = int8_t(t.z);
  }
  scales[((ulong)b * args.heads + head) * TA_D + c] = ok ? m / TA_CODE_F : NAN;
}

// tattn_keys returns the keys [lo, hi) query qi (at key position qpos)
// sees (attention.metal's rule).
static inline int2 tattn_keys(constant kargs_attn &args, device const int *ranges, int qi, int qpos) {
  if (args.ranged) {
    return int2(ranges[2 * qi], ranges[2 * qi + 1]);
  }
  return int2(0, args.causal ? min(args.Lk, qpos + 1) : args.Lk);
}

// tattn_block_keys returns the union [lo, hi) of the key ranges of queries
// q0..q0+nq-1 (those below L): the same value in every thread.
static inline int2 tattn_block_keys(constant kargs_attn &args, device const int *ranges, int q0, int nq) {
  const int q1 = min(q0 + nq, args.L);
  if (!args.ranged) {
    return int2(0, args.causal ? min(args.Lk, args.Lk - args.L + q1) : args.Lk);
  }
  int lo = args.Lk, hi = 0;
  for (int qi = q0; qi < q1; qi++) {
    lo = min(lo, ranges[2 * qi]);
    hi = max(hi, ranges[2 * qi + 1]);
  }
  return int2(lo, hi);
}

// tattn_sum3 is 2^16 A + 2^8 B + C in float (the three products' weights
// over 2^16; every term exact).
static inline float tattn_sum3(int a, int b, int c) { return fma(float(a), 65536.0f, fma(float(b), 256.0f, float(c))); }

static inline void flash_attn_t_impl(constant kargs_attn &args, device const int8_t *ql, device const int8_t *kl,
                                     device const int8_t *vl, device float *o, device const int *ranges,
                                     device const float *sq, device const float *sk, device const float *sv,
                                     threadgroup float *ss, threadgroup float *sqs, threadgroup float *salpha,
                                     threadgroup float *sps, threadgroup float *svs, threadgroup int *smove,
                                     uint3 tgpig, ushort tiitg, ushort tiisg, ushort sgitg) {
  constexpr int D = TA_D;
  constexpr int KH = TA_K / 2; // keys per thread in the softmax
  const int h = tgpig.y;
  const int kvh = h / (args.n_head / args.n_kv);
  const int q0 = tgpig.x * TA_Q;
  const int nq = min(TA_Q, args.L - q0);
  const int offset = args.Lk - args.L; // query i sits at key position offset + i
  const int qls = args.n_head * TA_LW, kls = args.n_kv * TA_LW; // bytes between rows of limbs

  // The operations take non-const element types; they only read the limbs.
  // Q limbs [h | m | l] of the tile's 64 rows (rows past L are zero).
  device int8_t *qrow = (device int8_t *)ql + ((ulong)q0 * args.n_head + h) * TA_LW;
  auto tq1 = tensor(qrow, dextents<int32_t, 2>(D, TA_Q), array<int, 2>({1, qls}));
  auto tq2 = tensor(qrow, dextents<int32_t, 2>(2 * D, TA_Q), array<int, 2>({1, qls}));
  auto tq3 = tensor(qrow, dextents<int32_t, 2>(3 * D, TA_Q), array<int, 2>({1, qls}));
  // S (64 queries x 64 keys) = Q Kᵀ: K limbs as stored, [key][l | m | h],
  // so transposed.
  constexpr auto dqk = mpp::tensor_ops::matmul2d_descriptor(TA_Q, TA_K, static_cast<int>(dynamic_extent), false, true,
                                                            false, mpp::tensor_ops::matmul2d_descriptor::mode::multiply);
  mpp::tensor_ops::matmul2d<dqk, execution_simdgroups<4>> mqk;
  // P V (64 queries x D) = P limbs (64 x k) V limbs (k x D), V as stored.
  constexpr auto dpv = mpp::tensor_ops::matmul2d_descriptor(TA_Q, D, static_cast<int>(dynamic_extent), false, false,
                                                            false, mpp::tensor_ops::matmul2d_descriptor::mode::multiply);
  mpp::tensor_ops::matmul2d<dpv, execution_simdgroups<4>> mpv;
  // The P limbs [Pl | Pm | Ph] of row r lie over the row's scores.
  threadgroup int8_t *pt = (threadgroup int8_t *)ss;
  auto tp1 = tensor(pt + 2 * TA_K, dextents<int32_t, 2>(TA_K, TA_Q), array<int, 2>({1, TA_SROW}));
  auto tp2 = tensor(pt + TA_K, dextents<int32_t, 2>(2 * TA_K, TA_Q), array<int, 2>({1, TA_SROW}));
  auto tp3 = tensor(pt, dextents<int32_t, 2>(3 * TA_K, TA_Q), array<int, 2>({1, TA_SROW}));
  auto tv0 = tensor((device int8_t *)vl, dextents<int32_t, 2>(D, TA_K), array<int, 2>({1, D}));
  // O: float bits in an int32 destination of the PV operation (its layout).
  auto co = mpv.get_destination_cooperative_tensor<decltype(tp1), decltype(tv0), int32_t>();
  for (ushort i = 0; i < co.get_capacity(); i++) {
    if (co.is_valid_element(i)) {
      co[i] = as_type<int>(0.0f);
    }
  }
  if (tiitg < TA_Q) {
    // The rows' scales with scale·log2(e) and the products' 2^16.
    sqs[tiitg] = sq[((ulong)q0 + tiitg) * args.n_head + h] * (args.scale * M_LOG2E_F * 65536.0f);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const int r = tiitg / 2;         // this thread's query row in the softmax
  const int kq = KH * (tiitg % 2); // and its first key within a block
  const int qi = q0 + r;
  const int2 keys = qi < args.L ? tattn_keys(args, ranges, qi, offset + qi) : int2(0, 0);
  float m = -INFINITY, l = 0.0f;
  const int2 span = tattn_block_keys(args, ranges, q0, TA_Q); // no block outside the queries' keys is read
  for (int kb = span.x / TA_K * TA_K; kb < span.y; kb += TA_K) {
    device int8_t *krow = (device int8_t *)kl + ((ulong)kb * args.n_kv + kvh) * TA_LW;
    auto tk1 = tensor(krow + 2 * D, dextents<int32_t, 2>(D, TA_K), array<int, 2>({1, kls}));
    auto tk2 = tensor(krow + D, dextents<int32_t, 2>(2 * D, TA_K), array<int, 2>({1, kls}));
    auto tk3 = tensor(krow, dextents<int32_t, 2>(3 * D, TA_K), array<int, 2>({1, kls}));
    auto sa = mqk.get_destination_cooperative_tensor<decltype(tq1), decltype(tk1), int32_t>();
    auto sb = mqk.get_destination_cooperative_tensor<decltype(tq1), decltype(tk1), int32_t>();
    auto sc3 = mqk.get_destination_cooperative_tensor<decltype(tq1), decltype(tk1), int32_t>();
    mqk.run(tq1, tk1, sa);  // Qh·Kh
    mqk.run(tq2, tk2, sb);  // Qh·Km + Qm·Kh
    mqk.run(tq3, tk3, sc3); // Qh·Kl + Qm·Km + Ql·Kh
    for (ushort i = 0; i < sa.get_capacity(); i++) {
      if (sa.is_valid_element(i)) {
        const auto ix = sa.get_multidimensional_index(i); // (key, query row)
        ss[ix[1] * TA_K + ix[0]] =
            tattn_sum3(sa[i], sb[i], sc3[i]) * sqs[ix[1]] * sk[((ulong)kb + ix[0]) * args.n_kv + kvh];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The online softmax of row r over this thread's KH keys, reduced over
    // the row's two threads (neighbouring lanes).
    float sc[KH];
    float bmax = -INFINITY;
    for (int t = 0; t < KH; t++) {
      const int kp = kb + kq + t;
      const bool live = kp >= keys.x && kp < keys.y;
      sc[t] = live ? ss[r * TA_K + kq + t] : -INFINITY;
      bmax = max(bmax, sc[t]);
    }
    bmax = max(bmax, simd_shuffle_xor(bmax, 1));
    const bool first = m == -INFINITY;
    const bool move = !first && bmax > m + TA_SLACK; // implies bmax finite
    const float alpha = move ? fast::exp2(m - bmax) : 1.0f;
    if (first || move) {
      m = bmax; // stays -inf while the row has seen no key
    }
    float psum = 0.0f, pmax = 0.0f;
    for (int t = 0; t < KH; t++) {
      // sc[t] finite implies m finite; p <= 2^TA_SLACK.
      sc[t] = sc[t] == -INFINITY ? 0.0f : fast::exp2(sc[t] - m);
      psum += sc[t];
      pmax = max(pmax, sc[t]);
    }
    psum += simd_shuffle_xor(psum, 1);
    pmax = max(pmax, simd_shuffle_xor(pmax, 1));
    l = l * alpha + psum;
    // The row's limbs go over its scores, which the pair has read.
    simdgroup_barrier(mem_flags::mem_threadgroup);
    const float pr = pmax > 0.0f && isfinite(pmax) ? TA_CODE_F / pmax : 0.0f;
    threadgroup uint *prow = (threadgroup uint *)(pt + r * TA_SROW + kq);
    for (int t = 0; t < KH; t += 4) {
      int3 c[4];
      for (int j = 0; j < 4; j++) {
        c[j] = tattn_split(tattn_code(sc[t + j], pr));
      }
      prow[t / 4] = tattn_pack(c[0].z, c[1].z, c[2].z, c[3].z);
      prow[(TA_K + t) / 4] = tattn_pack(c[0].y, c[1].y, c[2].y, c[3].y);
      prow[(2 * TA_K + t) / 4] = tattn_pack(c[0].x, c[1].x, c[2].x, c[3].x);
    }
    if (tiitg % 2 == 0) {
      salpha[r] = alpha;
      sps[r] = pr > 0.0f ? pmax / TA_CODE_F * 65536.0f : 0.0f; // sp with the products' 2^16
    }
    svs[tiitg] = sv[((ulong)(kb / TA_K) * args.n_kv + kvh) * D + tiitg];
    const bool any = simd_any(move);
    if (tiisg == 0) {
      smove[sgitg] = any ? 1 : 0;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if ((smove[0] | smove[1] | smove[2] | smove[3]) != 0) {
      // Some row moved its reference: scale this thread's elements of O.
      for (ushort i = 0; i < co.get_capacity(); i++) {
        if (co.is_valid_element(i)) {
          co[i] = as_type<int>(as_type<float>(co[i]) * salpha[co.get_multidimensional_index(i)[1]]);
        }
      }
    }
    device int8_t *vblk = (device int8_t *)vl + ((ulong)(kb / TA_K) * args.n_kv + kvh) * TA_VB;
    auto tv1 = tensor(vblk, dextents<int32_t, 2>(D, TA_K), array<int, 2>({1, D}));
    auto tv2 = tensor(vblk, dextents<int32_t, 2>(D, 2 * TA_K), array<int, 2>({1, D}));
    auto tv3 = tensor(vblk, dextents<int32_t, 2>(D, 3 * TA_K), array<int, 2>({1, D}));
    auto pa = mpv.get_destination_cooperative_tensor<decltype(tp1), decltype(tv0), int32_t>();
    auto pb = mpv.get_destination_cooperative_tensor<decltype(tp1), decltype(tv0), int32_t>();
    auto pc = mpv.get_destination_cooperative_tensor<decltype(tp1), decltype(tv0), int32_t>();
    mpv.run(tp1, tv1, pa); // Ph·Vh
    mpv.run(tp2, tv2, pb); // Pm·Vh + Ph·Vm
    mpv.run(tp3, tv3, pc); // Pl·Vh + Pm·Vm + Ph·Vl
    for (ushort i = 0; i < co.get_capacity(); i++) {
      if (co.is_valid_element(i)) {
        const auto ix = co.get_multidimensional_index(i); // (channel, query row)
        const float f = sps[ix[1]] * svs[ix[0]];
        co[i] = as_type<int>(fma(tattn_sum3(pa[i], pb[i], pc[i]), f, as_type<float>(co[i])));
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup); // ss, salpha, sps, svs and smove are rewritten by the next block
  }
  if (tiitg % 2 == 0) {
    salpha[r] = l; // the row sums, after the last block's barrier
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (ushort i = 0; i < co.get_capacity(); i++) {
    if (co.is_valid_element(i)) {
      const auto ix = co.get_multidimensional_index(i);
      if (ix[1] < nq) {
        const float lv = salpha[ix[1]];
        o[((ulong)q0 + ix[1]) * args.o_stride + h * D + ix[0]] = lv == 0.0f ? 0.0f : as_type<float>(co[i]) / lv;
      }
    }
  }
}

// Bindings: 0 args, 1 the Q limbs of the launch's queries (attn_limbs_qk,
// rows padded to 64), 2 the K limbs (all keys, padded to 64), 3 the V limbs
// (attn_limbs_v), 4 o, 5 the key ranges (read only when args.ranged), 6, 7, 8
// the scales of Q, K and V. args.q_stride and k_stride, v_stride are not
// read (the limbs are packed).
kernel void flash_attn_t_d128(constant kargs_attn &args [[buffer(0)]], device const int8_t *ql [[buffer(1)]],
                              device const int8_t *kl [[buffer(2)]], device const int8_t *vl [[buffer(3)]],
                              device float *o [[buffer(4)]], device const int *ranges [[buffer(5)]],
                              device const float *sq [[buffer(6)]], device const float *sk [[buffer(7)]],
                              device const float *sv [[buffer(8)]], uint3 tgpig [[threadgroup_position_in_grid]],
                              ushort tiitg [[thread_index_in_threadgroup]],
                              ushort tiisg [[thread_index_in_simdgroup]],
                              ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float ss[TA_Q * TA_K];
  threadgroup float sqs[TA_Q];
  threadgroup float salpha[TA_Q];
  threadgroup float sps[TA_Q];
  threadgroup float svs[TA_D];
  threadgroup int smove[4];
  flash_attn_t_impl(args, ql, kl, vl, o, ranges, sq, sk, sv, ss, sqs, salpha, sps, svs, smove, tgpig, tiitg, tiisg,
                    sgitg);
}
