// attention.metal: flash attention with an online softmax, f32 in and out.
// One threadgroup of 128 threads (4 simdgroups) takes 8 queries of one head;
// each simdgroup owns 2 queries, lane = 16*query + key. K and V blocks of 16
// positions are staged in threadgroup memory and shared by the 8 queries.
// Grouped-query attention maps head h to kv head h / (n_head / n_kv). With
// causal masking the key loop stops after the last query's position, so
// fully masked blocks are never loaded. With args.ranged each query sees the
// keys [ranges[2i], ranges[2i+1]) (segments of cu_seqlens, sliding windows:
// the host resolves the masks) and the key loop covers only the union of the
// block's ranges. head_dim <= 128 (the thinker 128, the vision encoder 72,
// the audio encoder 64). Grid (ceil(L/8), n_head, 1).
#include <metal_stdlib>
#include "kargs.h"
using namespace metal;

#define FA_Q 8
#define FA_KV 16
#define FA_DMAX 128

// attn_keys returns the keys [lo, hi) query qi (at key position qpos) sees.
static inline int2 attn_keys(constant kargs_attn &args, device const int *ranges, int qi, int qpos) {
  if (args.ranged) {
    return int2(ranges[2 * qi], ranges[2 * qi + 1]);
  }
  return int2(0, args.causal ? min(args.Lk, qpos + 1) : args.Lk);
}

// attn_block_keys returns the union [lo, hi) of the key ranges of queries
// q0..q0+nq-1 (those below L): the same value in every thread.
static inline int2 attn_block_keys(constant kargs_attn &args, device const int *ranges, int q0, int nq) {
  const int q1 = min(q0 + nq, args.L);
  if (!args.ranged) {
    // Causal: past the block's last query nothing is seen.
    return int2(0, args.causal ? min(args.Lk, args.Lk - args.L + q1) : args.Lk);
  }
  int lo = args.Lk, hi = 0;
  for (int qi = q0; qi < q1; qi++) {
    lo = min(lo, ranges[2 * qi]);
    hi = max(hi, ranges[2 * qi + 1]);
  }
  return int2(lo, hi);
}

kernel void flash_attn_f32(constant kargs_attn &args [[buffer(0)]],
                           device const float *q [[buffer(1)]],
                           device const float *k [[buffer(2)]],
                           device const float *v [[buffer(3)]],
                           device float *o [[buffer(4)]],
                           device const int *ranges [[buffer(5)]],
                           uint3 tgpig [[threadgroup_position_in_grid]],
                           ushort tiitg [[thread_index_in_threadgroup]],
                           ushort tiisg [[thread_index_in_simdgroup]],
                           ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float sq[FA_Q * FA_DMAX];
  threadgroup float sk[FA_KV * FA_DMAX];
  threadgroup float sv[FA_KV * FA_DMAX];
  threadgroup float ss[FA_Q * FA_KV];

  const int D = args.head_dim;
  const int h = tgpig.y;
  const int kvh = h / (args.n_head / args.n_kv);
  const int q0 = tgpig.x * FA_Q;
  const int qq = 2 * sgitg + tiisg / 16; // this lane's query within the block
  const int j = tiisg % 16;              // this lane's key within a KV block
  const int qi = q0 + qq;
  const bool qvalid = qi < args.L;
  const int offset = args.Lk - args.L; // query i sits at key position offset + i
  const int qpos = offset + qi;
  const int2 keys = qvalid ? attn_keys(args, ranges, qi, qpos) : int2(0, 0);

  for (int idx = tiitg; idx < FA_Q * D; idx += 128) {
    const int r = idx / D, d = idx % D;
    sq[r * FA_DMAX + d] = q0 + r < args.L ? q[(ulong)(q0 + r) * args.q_stride + h * D + d] : 0.0f;
  }

  const int2 span = attn_block_keys(args, ranges, q0, FA_Q);
  float m = -INFINITY, l = 0.0f;
  float acc[FA_DMAX / 16];
  for (int i = 0; i < FA_DMAX / 16; i++) {
    acc[i] = 0.0f;
  }
  for (int kb = span.x; kb < span.y; kb += FA_KV) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int idx = tiitg; idx < FA_KV * D; idx += 128) {
      const int r = idx / D, d = idx % D;
      const int kp = kb + r;
      sk[r * FA_DMAX + d] = kp < args.Lk ? k[(ulong)kp * args.k_stride + kvh * D + d] : 0.0f;
      sv[r * FA_DMAX + d] = kp < args.Lk ? v[(ulong)kp * args.v_stride + kvh * D + d] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int kp = kb + j;
    float s = -INFINITY;
    if (kp >= keys.x && kp < keys.y) {
      float qk = 0.0f;
      for (int d = 0; d < D; d++) {
        qk += sq[qq * FA_DMAX + d] * sk[j * FA_DMAX + d];
      }
      s = qk * args.scale;
    }
    ss[qq * FA_KV + j] = s;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    float bmax = -INFINITY;
    for (int jj = 0; jj < FA_KV; jj++) {
      bmax = max(bmax, ss[qq * FA_KV + jj]);
    }
    const float mnew = max(m, bmax);
    if (mnew != -INFINITY) {
      const float alpha = exp(m - mnew);
      l *= alpha;
      for (int i = 0; i < FA_DMAX / 16; i++) {
        acc[i] *= alpha;
      }
      for (int jj = 0; jj < FA_KV; jj++) {
        const float p = exp(ss[qq * FA_KV + jj] - mnew);
        l += p;
        for (int i = 0; i < FA_DMAX / 16; i++) {
          const int d = j + 16 * i;
          if (d < D) {
            acc[i] += p * sv[jj * FA_DMAX + d];
          }
        }
      }
      m = mnew;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (qvalid) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int i = 0; i < FA_DMAX / 16; i++) {
      const int d = j + 16 * i;
      if (d < D) {
        o[(ulong)qi * args.o_stride + h * D + d] = acc[i] * inv;
      }
    }
  }
}

// ---- flash attention on simdgroup matrices -------------------------------
// flash_attn_mma_d{32,64,72,128} and flash_attn_mma_half_d{32,64,72,128}:
// the same op for head sizes that are multiples of 8 (the thinker 128, the
// vision encoder 72, the audio encoder 64, the head 32) with QKᵀ and PV as
// 8x8 simdgroup-matrix products and float accumulators, on float operands
// (float in, float out, as exact as the scalar kernel) or on half operands
// (_half_: Q, K, V and the probabilities rounded to half, NMSE ~1e-7
// against exact attention: off in the backend). A threadgroup of 128
// threads takes 32 queries of one head, 8 per simdgroup. Q, pre-scaled by
// scale·log2(e) so that the softmax is exp2 in the log2 domain, is staged
// once and then held in simdgroup matrices (registers) for the whole key
// loop. Keys come in blocks of 32: the K block is staged in threadgroup
// memory, S = Q Kᵀ (8 queries x 32 keys per simdgroup, 4 fragments) stays
// in registers, then the V block is staged in the same memory (K and V
// share one 32-row buffer, rows padded by 16 bytes so that the transposed
// K loads of neighbouring rows fall in different banks; 16.5 KiB for
// d = 128 in float) and O += P V with P taken from S in place.
//
// Softmax in registers: thread_elements() gives each lane two neighbouring
// elements of a row of every 8x8 fragment (lane l: row (l/4 & 4) +
// (l/2 % 4), columns c, c+1 with c = (l/4 & 2)*2 + (l%2)*2, as MLX's
// steel kernels lay them out), so a lane holds 8 of its row's 32 scores
// per block and a row lives in lanes l, l^1, l^8, l^9: the block max is two
// shuffles, the row sum is kept per lane and reduced once at the end. The
// reference max m is updated lazily: a row keeps it while a block's max
// stays within FM_SLACK (log2 units) above it, so its probabilities are at
// most 2^FM_SLACK and neither l nor O is rescaled; only when some row of
// the simdgroup moves its reference does the simdgroup scale its O
// fragments, each lane its own elements by its row's alpha (no 8x8
// product). The first block a row sees sets m without a rescale (O is
// still zero); after a few blocks the max rarely jumps by 2^FM_SLACK. The
// result is exact under any choice of m: O and l carry the same factor.
// Masked keys get p = 0 directly, so fast::exp2 never sees an infinity.
// Grid (ceil(L/32), n_head, 1).
#define FM_Q 32
#define FM_BK 32       // keys per block
#define FM_SLACK 8.0f  // log2 headroom before a row's reference max moves

// fm_stage4 stores 4 floats of a row times mul (zeros when !live) in
// threadgroup memory at dst (aligned to 4 elements), as half or as float.
static inline void fm_stage4(threadgroup half *dst, device const float *src, bool live, float mul) {
  half4 val = half4(0.0f);
  if (live) {
    val = half4(float4(src[0], src[1], src[2], src[3]) * mul);
  }
  *(threadgroup half4 *)dst = val;
}
static inline void fm_stage4(threadgroup float *dst, device const float *src, bool live, float mul) {
  float4 val = float4(0.0f);
  if (live) {
    val = float4(src[0], src[1], src[2], src[3]) * mul;
  }
  *(threadgroup float4 *)dst = val;
}

// fm_stage stages rows [0, FM_Q) of src (a block of keys or queries of one
// head, row stride stride, rows from first on, rows at or past end zero)
// times mul in skv.
template <typename T, int D>
static inline void fm_stage(threadgroup T *skv, device const float *src, ulong stride, int first, int end, float mul,
                            ushort tiitg) {
  constexpr int LD = D + 16 / int(sizeof(T));
  for (int idx = 4 * tiitg; idx < FM_Q * D; idx += 4 * 128) {
    const int r = idx / D, d = idx % D;
    fm_stage4(skv + r * LD + d, src + (ulong)(first + r) * stride + d, first + r < end, mul);
  }
}

// T is the operand type (half or float), D the head size.
template <typename T, int D>
static inline void flash_attn_mma_impl(constant kargs_attn &args, device const float *q, device const float *k,
                                       device const float *v, device float *o, device const int *ranges,
                                       threadgroup T *skv, uint3 tgpig, ushort tiitg, ushort tiisg, ushort sgitg) {
  constexpr int ND = D / 8;     // 8-wide column blocks of a head
  constexpr int NC = FM_BK / 8; // 8-key column blocks of a key block
  constexpr int LD = D + 16 / int(sizeof(T));
  const int h = tgpig.y;
  const int kvh = h / (args.n_head / args.n_kv);
  const int q0 = tgpig.x * FM_Q;
  const int offset = args.Lk - args.L;

  // Q·scale·log2(e) as T, through threadgroup memory into matrices.
  fm_stage<T, D>(skv, q + h * D, args.q_stride, q0, args.L, args.scale * M_LOG2E_F, tiitg);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_matrix<T, 8, 8> mq[ND];
  simdgroup_float8x8 mo[ND];
  for (int j = 0; j < ND; j++) {
    simdgroup_load(mq[j], skv + 8 * sgitg * LD + 8 * j, LD);
    mo[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  // This lane's row of every fragment and its first column (see above).
  const int fr = ((tiisg / 4) & 4) + (tiisg / 2) % 4;
  const int fc = ((tiisg / 4) & 2) * 2 + (tiisg % 2) * 2;
  const int qi = q0 + 8 * sgitg + fr;
  const int2 keys = qi < args.L ? attn_keys(args, ranges, qi, offset + qi) : int2(0, 0);
  float m = -INFINITY, l = 0.0f; // the row's reference max; this lane's part of its sum
  const int2 span = attn_block_keys(args, ranges, q0, FM_Q); // no block outside the queries' keys is loaded
  for (int kb = span.x; kb < span.y; kb += FM_BK) {
    threadgroup_barrier(mem_flags::mem_threadgroup); // Q's or the last V block's reads are done
    fm_stage<T, D>(skv, k + kvh * D, args.k_stride, kb, args.Lk, 1.0f, tiitg);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // S = Q Kᵀ (log2 units): 8 queries x 32 keys in NC fragments.
    simdgroup_float8x8 ms[NC];
    for (int c = 0; c < NC; c++) {
      ms[c] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    for (int j = 0; j < ND; j++) {
      for (int c = 0; c < NC; c++) {
        simdgroup_matrix<T, 8, 8> mk;
        simdgroup_load(mk, skv + 8 * c * LD + 8 * j, LD, ulong2(0, 0), true);
        simdgroup_multiply_accumulate(ms[c], mq[j], mk, ms[c]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup); // every simdgroup is done with K
    fm_stage<T, D>(skv, v + kvh * D, args.v_stride, kb, args.Lk, 1.0f, tiitg);

    // Online softmax on this lane's 8 scores, the max reduced over the row's
    // 4 lanes.
    float sc[2 * NC];
    float bmax = -INFINITY;
    for (int c = 0; c < NC; c++) {
      const float2 s = ms[c].thread_elements();
      for (int t = 0; t < 2; t++) {
        const int kp = kb + 8 * c + fc + t;
        sc[2 * c + t] = kp >= keys.x && kp < keys.y ? s[t] : -INFINITY;
        bmax = max(bmax, sc[2 * c + t]);
      }
    }
    bmax = max(bmax, simd_shuffle_xor(bmax, 1));
    bmax = max(bmax, simd_shuffle_xor(bmax, 8));
    const bool first = m == -INFINITY;
    const bool move = !first && bmax > m + FM_SLACK; // implies bmax finite
    const float alpha = move ? fast::exp2(m - bmax) : 1.0f;
    if (first || move) {
      m = bmax; // stays -inf while the row has seen no key
    }
    simdgroup_matrix<T, 8, 8> mp[NC];
    float psum = 0.0f;
    for (int c = 0; c < NC; c++) {
      for (int t = 0; t < 2; t++) {
        // sc finite implies m finite; p <= 2^FM_SLACK.
        const T p = sc[2 * c + t] == -INFINITY ? T(0.0f) : T(fast::exp2(sc[2 * c + t] - m));
        mp[c].thread_elements()[t] = p;
        psum += float(p); // the sum of the very weights PV uses
      }
    }
    l = l * alpha + psum;
    if (simd_any(move)) {
      for (int j = 0; j < ND; j++) {
        mo[j].thread_elements() *= alpha; // this lane's two elements, both in its row
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup); // V is staged
    // O += P V.
    for (int j = 0; j < ND; j++) {
      for (int c = 0; c < NC; c++) {
        simdgroup_matrix<T, 8, 8> mv;
        simdgroup_load(mv, skv + 8 * c * LD + 8 * j, LD);
        simdgroup_multiply_accumulate(mo[j], mp[c], mv, mo[j]);
      }
    }
  }
  // Each lane writes its own elements of O, its row / l.
  l += simd_shuffle_xor(l, 1);
  l += simd_shuffle_xor(l, 8);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  device float *dst = o + (ulong)qi * args.o_stride + h * D + fc;
  for (int j = 0; j < ND; j++) {
    const float2 e = mo[j].thread_elements();
    if (qi < args.L) {
      dst[8 * j] = e[0] * inv;
      dst[8 * j + 1] = e[1] * inv;
    }
  }
}

#define FM_PARAMS                                                                                            \
  constant kargs_attn &args [[buffer(0)]], device const float *q [[buffer(1)]],                             \
      device const float *k [[buffer(2)]], device const float *v [[buffer(3)]], device float *o [[buffer(4)]], \
      device const int *ranges [[buffer(5)]], uint3 tgpig [[threadgroup_position_in_grid]],                 \
      ushort tiitg [[thread_index_in_threadgroup]], ushort tiisg [[thread_index_in_simdgroup]],             \
      ushort sgitg [[simdgroup_index_in_threadgroup]]
// The threadgroup memory of operand type T and head size D: 32 padded rows
// (Q at the start, then each key block's K and V in turn), declared as
// float4 for the alignment of the 4-element stores.
#define FM_BODY(T, D)                                                                                 \
  threadgroup float4 skv[FM_Q * (D + 16 / sizeof(T)) * sizeof(T) / 16];                               \
  flash_attn_mma_impl<T, D>(args, q, k, v, o, ranges, (threadgroup T *)skv, tgpig, tiitg, tiisg, sgitg)

kernel void flash_attn_mma_half_d32(FM_PARAMS) { FM_BODY(half, 32); }
kernel void flash_attn_mma_half_d64(FM_PARAMS) { FM_BODY(half, 64); }
kernel void flash_attn_mma_half_d72(FM_PARAMS) { FM_BODY(half, 72); }
kernel void flash_attn_mma_half_d128(FM_PARAMS) { FM_BODY(half, 128); }
kernel void flash_attn_mma_d32(FM_PARAMS) { FM_BODY(float, 32); }
kernel void flash_attn_mma_d64(FM_PARAMS) { FM_BODY(float, 64); }
kernel void flash_attn_mma_d72(FM_PARAMS) { FM_BODY(float, 72); }
kernel void flash_attn_mma_d128(FM_PARAMS) { FM_BODY(float, 128); }
