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
// flash_attn_mma_d{32,64,128}: the same op for head sizes that are multiples
// of 8, with QKᵀ and PV as 8x8 simdgroup-matrix products. A threadgroup of
// 128 threads takes 32 queries of one head, 8 per simdgroup; K and V blocks of
// 16 positions are staged (float) in threadgroup memory. Each simdgroup keeps
// its Q (scaled) and O as D/8 matrices of 8x8; the rows' running max and sum
// live in the 4 lanes of each row (lane = 4*row + quarter of the block), and
// O's rows are rescaled by multiplying with diag(alpha). Grid (ceil(L/32),
// n_head, 1).
#define FM_Q 32
#define FM_KV 16
#define FM_DMAX 128

template <int D>
static inline void flash_attn_mma_impl(constant kargs_attn &args, device const float *q, device const float *k,
                                       device const float *v, device float *o, device const int *ranges,
                                       threadgroup float *skv,
                                       threadgroup float *ss_all, threadgroup float *sd_all, uint3 tgpig,
                                       ushort tiitg, ushort tiisg, ushort sgitg) {
  const int ND = D / 8;
  const int h = tgpig.y;
  const int kvh = h / (args.n_head / args.n_kv);
  const int q0 = tgpig.x * FM_Q;
  const int offset = args.Lk - args.L;
  threadgroup float *ss = ss_all + sgitg * 8 * FM_KV; // this simdgroup's [8][16] scores
  threadgroup float *sd = sd_all + sgitg * 64;        // and its diag(alpha)

  // Q, pre-multiplied by the scale, staged through threadgroup memory.
  for (int idx = tiitg; idx < FM_Q * D; idx += 128) {
    const int r = idx / D, d = idx % D;
    skv[r * FM_DMAX + d] = q0 + r < args.L ? q[(ulong)(q0 + r) * args.q_stride + h * D + d] * args.scale : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 mq[ND];
  simdgroup_float8x8 mo[ND];
  for (int j = 0; j < ND; j++) {
    simdgroup_load(mq[j], skv + 8 * sgitg * FM_DMAX + 8 * j, FM_DMAX);
    mo[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  const int r = tiisg / 4;          // this lane's query row within the simdgroup
  const int kq = 4 * (tiisg % 4);   // and its 4 keys within a block
  const int qi = q0 + 8 * sgitg + r;
  const int qpos = offset + qi;
  const int2 keys = qi < args.L ? attn_keys(args, ranges, qi, qpos) : int2(0, 0);
  float m = -INFINITY, l = 0.0f;
  const int2 span = attn_block_keys(args, ranges, q0, FM_Q); // no block outside the queries' keys is loaded
  threadgroup float *sk = skv;
  threadgroup float *sv = skv + FM_KV * FM_DMAX;
  for (int kb = span.x; kb < span.y; kb += FM_KV) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int idx = tiitg; idx < FM_KV * D; idx += 128) {
      const int key = idx / D, d = idx % D;
      const int kp = kb + key;
      sk[key * FM_DMAX + d] = kp < args.Lk ? k[(ulong)kp * args.k_stride + kvh * D + d] : 0.0f;
      sv[key * FM_DMAX + d] = kp < args.Lk ? v[(ulong)kp * args.v_stride + kvh * D + d] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // S = Q Kᵀ: [8 queries][16 keys] as two 8x8 matrices.
    for (int c = 0; c < 2; c++) {
      simdgroup_float8x8 ms = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (int j = 0; j < ND; j++) {
        simdgroup_float8x8 mk;
        simdgroup_load(mk, sk + 8 * c * FM_DMAX + 8 * j, FM_DMAX, ulong2(0, 0), true);
        simdgroup_multiply_accumulate(ms, mq[j], mk, ms);
      }
      simdgroup_store(ms, ss + 8 * c, FM_KV);
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    // Online softmax over this lane's 4 keys, reduced over the row's 4 lanes.
    float sc[4];
    float bmax = -INFINITY;
    for (int t = 0; t < 4; t++) {
      const int kp = kb + kq + t;
      const bool live = kp >= keys.x && kp < keys.y;
      sc[t] = live ? ss[r * FM_KV + kq + t] : -INFINITY;
      bmax = max(bmax, sc[t]);
    }
    bmax = max(bmax, simd_shuffle_xor(bmax, 1));
    bmax = max(bmax, simd_shuffle_xor(bmax, 2));
    const float mnew = max(m, bmax);
    const float alpha = mnew == -INFINITY ? 1.0f : exp(m - mnew);
    float psum = 0.0f;
    for (int t = 0; t < 4; t++) {
      const float p = mnew == -INFINITY ? 0.0f : exp(sc[t] - mnew);
      ss[r * FM_KV + kq + t] = p;
      psum += p;
    }
    psum += simd_shuffle_xor(psum, 1);
    psum += simd_shuffle_xor(psum, 2);
    l = l * alpha + psum;
    m = mnew;
    // diag(alpha): this lane writes elements 2*lane and 2*lane+1, both in its row.
    for (int e = 2 * tiisg; e < 2 * tiisg + 2; e++) {
      sd[e] = e % 8 == r ? alpha : 0.0f;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    // O = diag(alpha) O + P V.
    simdgroup_float8x8 md;
    simdgroup_load(md, sd, 8);
    simdgroup_float8x8 mp[2];
    for (int c = 0; c < 2; c++) {
      simdgroup_load(mp[c], ss + 8 * c, FM_KV);
    }
    for (int j = 0; j < ND; j++) {
      simdgroup_multiply(mo[j], md, mo[j]);
      for (int c = 0; c < 2; c++) {
        simdgroup_float8x8 mv;
        simdgroup_load(mv, sv + 8 * c * FM_DMAX + 8 * j, FM_DMAX);
        simdgroup_multiply_accumulate(mo[j], mp[c], mv, mo[j]);
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int j = 0; j < ND; j++) {
    simdgroup_store(mo[j], skv + 8 * sgitg * FM_DMAX + 8 * j, FM_DMAX);
  }
  simdgroup_barrier(mem_flags::mem_threadgroup);
  if (qi < args.L) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = tiisg % 4; d < D; d += 4) {
      o[(ulong)qi * args.o_stride + h * D + d] = skv[(8 * sgitg + r) * FM_DMAX + d] * inv;
    }
  }
}

#define FM_PARAMS                                                                                            \
  constant kargs_attn &args [[buffer(0)]], device const float *q [[buffer(1)]],                             \
      device const float *k [[buffer(2)]], device const float *v [[buffer(3)]], device float *o [[buffer(4)]], \
      device const int *ranges [[buffer(5)]], uint3 tgpig [[threadgroup_position_in_grid]],                 \
      ushort tiitg [[thread_index_in_threadgroup]], ushort tiisg [[thread_index_in_simdgroup]],             \
      ushort sgitg [[simdgroup_index_in_threadgroup]]
#define FM_TG                                                                                           \
  threadgroup float skv[2 * FM_KV * FM_DMAX];                                                           \
  threadgroup float ss[4 * 8 * FM_KV];                                                                  \
  threadgroup float sd[4 * 64]

kernel void flash_attn_mma_d32(FM_PARAMS) {
  FM_TG;
  flash_attn_mma_impl<32>(args, q, k, v, o, ranges, skv, ss, sd, tgpig, tiitg, tiisg, sgitg);
}
kernel void flash_attn_mma_d64(FM_PARAMS) {
  FM_TG;
  flash_attn_mma_impl<64>(args, q, k, v, o, ranges, skv, ss, sd, tgpig, tiitg, tiisg, sgitg);
}
kernel void flash_attn_mma_d128(FM_PARAMS) {
  FM_TG;
  flash_attn_mma_impl<128>(args, q, k, v, o, ranges, skv, ss, sd, tgpig, tiitg, tiisg, sgitg);
}
