// moe.metal: the MoE routing that stays on the GPU.
//   moe_topk_f32:    router softmax over n_expert logits, top-k (ties to the
//                    lower expert id), optional renormalisation; one thread per
//                    token, grid ceil(tokens/64) x 64.
//   moe_map:         per-expert lists of entries token*topk + slot in token
//                    order (what mul_mm_id_* gathers) and their counts; one
//                    threadgroup of MAP_TG threads per expert scans the
//                    routed entries MAP_TG at a time and places its hits with
//                    a threadgroup prefix sum. Grid n_expert x MAP_TG; lists
//                    is [n_expert][tokens].
//   moe_tiles:       the tile table of the one-launch gathered matmul
//                    (mul_mm_id_* with args.tiles = 1) and its indirect grid.
//   moe_grid:        per-expert indirect dispatch grids for mul_mm_id_*
//                    launched once per expert (args.tiles = 0).
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

// MAP_TG is the threadgroup size of moe_map and moe_tiles (the host
// launches exactly this many threads).
#define MAP_TG 256

// tg_scan returns the exclusive prefix sum of v over the MAP_TG threads of
// the threadgroup in index order, and their total in total. Every thread
// must call it (it has barriers); part holds MAP_TG/32 ints.
static inline int tg_scan(int v, threadgroup int *part, ushort tiisg, ushort sgitg, thread int &total) {
  const int pre = simd_prefix_exclusive_sum(v);
  const int sum = simd_sum(v);
  if (tiisg == 0) {
    part[sgitg] = sum;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int off = 0;
  total = 0;
  for (int g = 0; g < MAP_TG / 32; g++) {
    off += g < int(sgitg) ? part[g] : 0;
    total += part[g];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup); // part is reused by the next call
  return off + pre;
}

kernel void moe_map(constant kargs_moe &args [[buffer(0)]],
                    device const int *ids [[buffer(1)]],
                    device int *counts [[buffer(2)]],
                    device int *lists [[buffer(3)]],
                    uint3 tgpig [[threadgroup_position_in_grid]],
                    ushort tiitg [[thread_index_in_threadgroup]],
                    ushort tiisg [[thread_index_in_simdgroup]],
                    ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  threadgroup int part[MAP_TG / 32];
  const int e = tgpig.x;
  if (e >= args.n_expert) {
    return; // uniform over the threadgroup
  }
  device int *list = lists + (ulong)e * args.tokens;
  const int entries = args.tokens * args.topk;
  int n = 0;
  for (int base = 0; base < entries; base += MAP_TG) {
    const int i = base + tiitg;
    const int hit = i < entries && ids[i] == e ? 1 : 0;
    int total;
    const int at = n + tg_scan(hit, part, tiisg, sgitg, total);
    if (hit) {
      list[at] = i;
    }
    n += total;
  }
  if (tiitg == 0) {
    counts[e] = n;
  }
}

// moe_tiles lists, for every expert in order, its token tiles as pairs
// (expert, first list entry) = (e, 32*j) for j < ceil(counts[e]/32), and
// writes grid = (number of pairs, args.cols row tiles, 1) for
// dispatchThreadgroupsWithIndirectBuffer: one launch of mul_mm_id_* then
// runs exactly the non-empty tiles. tiles holds at most
// tokens*topk/32 + n_expert pairs. One threadgroup of MAP_TG threads.
kernel void moe_tiles(constant kargs_moe &args [[buffer(0)]],
                      device const int *counts [[buffer(1)]],
                      device int *tiles [[buffer(2)]],
                      device uint *grid [[buffer(3)]],
                      ushort tiitg [[thread_index_in_threadgroup]],
                      ushort tiisg [[thread_index_in_simdgroup]],
                      ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  threadgroup int part[MAP_TG / 32];
  int n = 0;
  for (int base = 0; base < args.n_expert; base += MAP_TG) {
    const int e = base + tiitg;
    const int t = e < args.n_expert ? (counts[e] + 31) / 32 : 0;
    int total;
    const int at = n + tg_scan(t, part, tiisg, sgitg, total);
    for (int j = 0; j < t; j++) {
      tiles[2 * (at + j)] = e;
      tiles[2 * (at + j) + 1] = 32 * j;
    }
    n += total;
  }
  if (tiitg == 0) {
    grid[0] = uint(n);
    grid[1] = uint(args.cols);
    grid[2] = 1u;
  }
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
