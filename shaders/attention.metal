// attention.metal: flash attention with an online softmax, f32 in and out.
// One threadgroup of 128 threads (4 simdgroups) takes 8 queries of one head;
// each simdgroup owns 2 queries, lane = 16*query + key. K and V blocks of 16
// positions are staged in threadgroup memory and shared by the 8 queries.
// Grouped-query attention maps head h to kv head h / (n_head / n_kv). With
// causal masking the key loop stops after the last query's position, so
// fully masked blocks are never loaded. head_dim <= 128 (the thinker 128, the
// vision encoder 72, the audio encoder 64). Grid (ceil(L/8), n_head, 1).
#include <metal_stdlib>
#include "kargs.h"
using namespace metal;

#define FA_Q 8
#define FA_KV 16
#define FA_DMAX 128

kernel void flash_attn_f32(constant kargs_attn &args [[buffer(0)]],
                           device const float *q [[buffer(1)]],
                           device const float *k [[buffer(2)]],
                           device const float *v [[buffer(3)]],
                           device float *o [[buffer(4)]],
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

  for (int idx = tiitg; idx < FA_Q * D; idx += 128) {
    const int r = idx / D, d = idx % D;
    sq[r * FA_DMAX + d] = q0 + r < args.L ? q[(ulong)(q0 + r) * args.q_stride + h * D + d] : 0.0f;
  }

  int kend = args.Lk;
  if (args.causal) {
    kend = min(args.Lk, offset + min(q0 + FA_Q, args.L)); // past the block's last query
  }
  float m = -INFINITY, l = 0.0f;
  float acc[FA_DMAX / 16];
  for (int i = 0; i < FA_DMAX / 16; i++) {
    acc[i] = 0.0f;
  }
  for (int kb = 0; kb < kend; kb += FA_KV) {
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
    if (qvalid && kp < args.Lk && (!args.causal || kp <= qpos)) {
      float dot = 0.0f;
      for (int d = 0; d < D; d++) {
        dot += sq[qq * FA_DMAX + d] * sk[j * FA_DMAX + d];
      }
      s = dot * args.scale;
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
