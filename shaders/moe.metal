// moe.metal: the MoE routing that stays on the GPU.
//   moe_topk_f32:    router softmax over n_expert logits, top-k (ties to the
//                    lower expert id), optional renormalisation; one thread per
//                    token, grid ceil(tokens/64) x 64.
//   moe_map:         per-expert lists of entries token*topk + slot in token
//                    order (what mul_mm_id_* gathers) and their counts; one
//                    thread per expert, grid ceil(n_expert/32) x 32. lists is
//                    [n_expert][tokens].
//   moe_grid:        per-expert indirect dispatch grids for mul_mm_id_*.
//   moe_combine_f32: y[t] = (residual[t] +) sum_s weight[t][s] * ys[t*topk+s],
//                    one thread per element, grid ceil(tokens*cols/256) x 256.
#include <metal_stdlib>
#include "kargs.h"
using namespace metal;

#define MOE_MAX_TOPK 16

kernel void moe_topk_f32(constant kargs_moe &args [[buffer(0)]],
                         device const float *logits [[buffer(1)]],
                         device int *ids [[buffer(2)]],
                         device float *weights [[buffer(3)]],
                         uint t [[thread_position_in_grid]]) {
  if ((int)t >= args.tokens) {
    return;
  }
  device const float *l = logits + (ulong)t * args.n_expert;
  float mx = -INFINITY;
  for (int e = 0; e < args.n_expert; e++) {
    mx = max(mx, l[e]);
  }
  float sum = 0.0f;
  for (int e = 0; e < args.n_expert; e++) {
    sum += exp(l[e] - mx);
  }
  int chosen[MOE_MAX_TOPK];
  float p[MOE_MAX_TOPK];
  float psum = 0.0f;
  const int k = min(args.topk, MOE_MAX_TOPK);
  for (int s = 0; s < k; s++) {
    int best = -1;
    float bv = -INFINITY;
    for (int e = 0; e < args.n_expert; e++) {
      bool taken = false;
      for (int j = 0; j < s; j++) {
        taken = taken || chosen[j] == e;
      }
      if (!taken && (best < 0 || l[e] > bv)) {
        best = e;
        bv = l[e];
      }
    }
    chosen[s] = best;
    p[s] = exp(bv - mx) / sum;
    psum += p[s];
  }
  for (int s = 0; s < k; s++) {
    ids[(ulong)t * args.topk + s] = chosen[s];
    weights[(ulong)t * args.topk + s] = args.norm_topk ? p[s] / psum : p[s];
  }
}

kernel void moe_map(constant kargs_moe &args [[buffer(0)]],
                    device const int *ids [[buffer(1)]],
                    device int *counts [[buffer(2)]],
                    device int *lists [[buffer(3)]],
                    uint e [[thread_position_in_grid]]) {
  if ((int)e >= args.n_expert) {
    return;
  }
  device int *list = lists + (ulong)e * args.tokens;
  int n = 0;
  const int entries = args.tokens * args.topk;
  for (int i = 0; i < entries; i++) {
    if (ids[i] == (int)e) {
      list[n++] = i;
    }
  }
  counts[e] = n;
}

kernel void moe_combine_f32(constant kargs_moe &args [[buffer(0)]],
                            device const float *ys [[buffer(1)]],
                            device const float *weights [[buffer(2)]],
                            device const float *residual [[buffer(3)]],
                            device float *y [[buffer(4)]],
                            uint i [[thread_position_in_grid]]) {
  const int t = i / args.cols, c = i % args.cols;
  if (t >= args.tokens) {
    return;
  }
  float acc = args.add_residual ? residual[i] : 0.0f;
  for (int s = 0; s < args.topk; s++) {
    const int entry = t * args.topk + s;
    acc += weights[entry] * ys[(ulong)entry * args.cols + c];
  }
  y[i] = acc;
}

// moe_grid writes, for every expert, the threadgroup grid of its gathered
// matmul (ceil(count/32) token tiles x args.cols row tiles x 1) for
// dispatchThreadgroupsWithIndirectBuffer, so that each expert's launch covers
// exactly the tokens routed to it without a CPU round trip. One thread per
// expert, grid ceil(n_expert/32) x 32; grid is [n_expert][3] uint.
kernel void moe_grid(constant kargs_moe &args [[buffer(0)]],
                     device const int *counts [[buffer(1)]],
                     device uint *grid [[buffer(2)]],
                     uint e [[thread_position_in_grid]]) {
  if ((int)e >= args.n_expert) {
    return;
  }
  grid[3 * e + 0] = uint((counts[e] + 31) / 32);
  grid[3 * e + 1] = uint(args.cols);
  grid[3 * e + 2] = 1u;
}
