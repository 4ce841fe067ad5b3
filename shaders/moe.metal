// moe.metal: the MoE block on the GPU, routing and experts.
//   moe_topk_f32:    router softmax over n_expert logits, top-k (ties to the
//                    lower expert id), optional renormalisation; one thread per
//                    token, grid ceil(tokens/64) x 64.
//   moe_map:         per-expert lists of entries token*topk + slot in token
//                    order (what moe_gu_* and moe_down_* gather) and their
//                    counts; one threadgroup of MAP_TG threads per expert
//                    scans the routed entries MAP_TG at a time and places its
//                    hits with a threadgroup prefix sum. Grid n_expert x
//                    MAP_TG; lists is [n_expert][tokens].
//   moe_tiles:       the (expert, first entry) table of the layer's 64-token
//                    tiles and the two indirect grids of the gathered matmuls
//                    that read it (built once per layer, read by gate, up and
//                    down).
//   moe_grid:        the same two grids per expert, for experts stored one by
//                    one (one launch per expert, args.tiles = 0).
//   moe_gu_<fmt>:    gate and up in one gathered matmul: each threadgroup
//                    reads both weight stacks' tiles and writes
//                    h = SiLU(x Wg^T) * (x Wu^T) once.
//   moe_down_<fmt>:  the gathered down projection of h, one row per entry
//                    (bf16 for the block formats, else float).
//   moe_combine_f32: y[t] = (residual[t] +) sum_s weight[t][s] * ys[t*topk+s],
//                    one thread per element, grid ceil(tokens*cols/256) x 256;
//   moe_combine_bf16: the same over bf16 rows ys (moe_down_* of the block
//                    formats), summed in float.
#include <metal_stdlib>
#include "kargs.h"
#include "quants.h"
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

// MOE_BN is the tokens of a gathered matmul's tile.
#define MOE_BN 64

// moe_tiles lists, for every expert in order, its 64-token tiles as pairs
// (expert, first list entry) = (e, 64*j) for j < ceil(counts[e]/64), and
// writes the indirect grids of the launches that read the table:
// grids[0..2] = (args.rows_gu, pairs, 1) for moe_gu_*, grids[3..5] =
// (args.rows_down, pairs, 1) for moe_down_*. Built once per layer. tiles
// holds at most tokens*topk/64 + n_expert pairs. One threadgroup of MAP_TG
// threads.
kernel void moe_tiles(constant kargs_moe_tiles &args [[buffer(0)]],
                      device const int *counts [[buffer(1)]],
                      device int *tiles [[buffer(2)]],
                      device uint *grids [[buffer(3)]],
                      ushort tiitg [[thread_index_in_threadgroup]],
                      ushort tiisg [[thread_index_in_simdgroup]],
                      ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  threadgroup int part[MAP_TG / 32];
  int n = 0;
  for (int base = 0; base < args.n_expert; base += MAP_TG) {
    const int e = base + tiitg;
    const int t = e < args.n_expert ? (counts[e] + MOE_BN - 1) / MOE_BN : 0;
    int total;
    const int at = n + tg_scan(t, part, tiisg, sgitg, total);
    for (int j = 0; j < t; j++) {
      tiles[2 * (at + j)] = e;
      tiles[2 * (at + j) + 1] = MOE_BN * j;
    }
    n += total;
  }
  if (tiitg == 0) {
    grids[0] = uint(args.rows_gu);
    grids[1] = uint(n);
    grids[2] = 1u;
    grids[3] = uint(args.rows_down);
    grids[4] = uint(n);
    grids[5] = 1u;
  }
}

// ---- the gathered matmuls ---------------------------------------------------
//
// One threadgroup of 128 threads (4 simdgroups) computes one 64-row x
// 64-token product tile of an expert's projection over the token rows listed
// for it by moe_map, K step 32, on mul_mm's design (matmul.metal): per K
// step thread i dequantizes the 16 weights of tile row i/2 and loads the 16
// activations of token i/2 at column 16 (i % 2), and simdgroup g multiplies
// tokens [32 (g % 2), +32) by tile rows [32 (g / 2), +32) with 4 x 4
// simdgroup_float8x8 accumulators (4 + 4 fragment loads, 16
// multiply-accumulates per 8 columns). The tile's tokens are the first
// min(64, count - first entry) of the 64; a simdgroup skips the loads and
// multiplies of its 8-token fragments past them (at 512-row chunks, top-8
// of 128 experts, a tile holds ~32 tokens: half the simdgroups then only
// stage).
//   moe_gu_<fmt>:   the 64 tile rows are 32 rows of gate (0-31) AND the same
//                   32 rows of up (32-63): simdgroups 0-1 compute gate,
//                   2-3 up, for the same tokens; the epilogue writes
//                   h[entry][m] = SiLU(g) * u (one row per routed entry), so
//                   the two products never leave the threadgroup. x is
//                   [tokens][K] float (x_per_slot = 0); h is T.
//   moe_down_<fmt>: 64 rows of the down projection, x = h [entries][K] of T,
//                   y [entries][M] of Y: each entry's output row, summed
//                   with its token's other k - 1 by moe_combine_*. Y is
//                   bf16 (ushort bits, rounded to nearest even once from
//                   the float sum) for the block formats and float for
//                   f32, bf16 and f16. Not half: an expert's output is not
//                   bounded by half's 65504 as h is in practice (the
//                   conformance suite's q4_K experts pass it: a half y
//                   turns them to inf); bf16 keeps float's range at a
//                   rounding of at most 2^-8 relative, which costs the MoE
//                   an NMSE of ~3e-6 against the block formats' tolerance
//                   of 5e-4 and would use up f16's 1e-6 (f16 keeps float
//                   rows).
// T is half for every format but f32 and bf16 (float: the bf16 release
// answers byte-identically to the reference): weights are dequantized in
// float and rounded once to half into threadgroup memory, x is rounded to
// half there (exactly what the down kernel would do to h, so storing h in
// half costs nothing more), products accumulate in float simdgroup
// matrices. f32 weights keep float tiles and a float h (a half tile would
// not be free there: it would cost the float storage its precision).
//
// Half tiles are double-buffered: while the simdgroups multiply step s from
// one buffer, the threads stage step s+1 into the other (the next step's x
// is loaded before the multiplies, so its latency overlaps them), one
// barrier per K step: 2 x (64 + 64) rows of 40 halves = 20 KiB. Float tiles
// (64 + 64 rows of 36 floats, 18 KiB) fit once: stage, barrier, multiply,
// barrier. Rows are padded by 16 bytes so the eight rows of an 8x8 fragment
// do not start on the same bank. The epilogue stages the 64 x 64 float
// product (16 KiB) in the same memory.
//
// Overflow guard (moe_gu with half tiles; the down kernel's x is h, already
// half): a K step in which some token's x is a finite |x| > 65504 (it would
// round to inf) is multiplied from x in float: the whole threadgroup takes
// the step in two halves of 16 columns, restaging x from memory as float in
// the x half tile's place ([64][16 + 4] floats), that token's values as
// they are and every other token's rounded to half (so that its products
// are those of the half path). The choice is per token, not per tile, so a
// token's h does not depend on which tokens share its tile: a launch split
// into row chunks (moe.go), whose tiles gather other tokens, gives the bits
// of the whole launch.
//
// Grid: x = row tile, y = token tile, z = expert (args.tiles = 0 only).
// With args.tiles = 1, y indexes the (expert, first entry) table of
// moe_tiles; with args.tiles = 0 (an expert stored on its own, bound at its
// offset), y is the y-th 64-entry tile of expert z's list and tiles past
// the list's end return at once. Threadgroups are dispatched in x order
// first: the ceil(M/BM) row tiles of one token tile run back to back on
// neighbouring cores and all gather the same 64 activation rows (read from
// memory once, then from the cache), and the next token tiles are the same
// expert's (its weight rows are still cached when they come round). Expert
// e's weights start e * expert_bytes after buffer 1 (scales and biases
// e * s_expert_bytes after theirs); lists is [n_expert][args.N].
// x rows are read with 4-wide vector loads when x_stride is a multiple of 4
// (the host binds x at a 16-byte aligned offset).

#define MOE_BK 32    // K step
#define MOE_TR 64    // tile rows: 32 gate + 32 up, or 64 down
#define MOE_GU_BM 32 // output rows of a moe_gu threadgroup
#define MOE_DN_BM 64 // output rows of a moe_down threadgroup
#define MOE_LD(T) (MOE_BK + 16 / int(sizeof(T)))
#define MOE_LDF2 (MOE_BK / 2 + 4) // a float x row of the overflow path
#define MOE_NBUF(T) (sizeof(T) == 2 ? 2 : 1)
#define MOE_BUF(T) ((MOE_TR + MOE_BN) * MOE_LD(T)) // elements of one buffer: W rows, then x rows
#define MOE_STAGE_BYTES (MOE_BN * MOE_TR * 4)      // the product tile, staged in float
#define MOE_TILE_BYTES(T) (MOE_NBUF(T) * MOE_BUF(T) * sizeof(T))
#define MOE_SHMEM_FLOATS(T) ((MOE_TILE_BYTES(T) > MOE_STAGE_BYTES ? MOE_TILE_BYTES(T) : MOE_STAGE_BYTES) / 4)

// moe_tile_rows resolves the threadgroup's expert and fills rows[i] (x row)
// and outs[i] (output row, the entry) of its 64 tokens, -1 past the list,
// and live with the tokens on the list (the first live of the tile). It
// returns false (for the whole threadgroup) when the tile lies past the
// expert's list.
static inline bool moe_tile_rows(constant kargs_matmul &args, device const int *counts, device const int *lists,
                                 device const int *tiles, uint3 tgpig, threadgroup int *rows, threadgroup int *outs,
                                 ushort tiitg, thread int &e, thread int &live) {
  e = args.tiles ? tiles[2 * tgpig.y] : int(tgpig.z);
  const int n0 = args.tiles ? tiles[2 * tgpig.y + 1] : int(tgpig.y) * MOE_BN;
  const int count = counts[e];
  if (n0 >= count) {
    return false;
  }
  live = min(MOE_BN, count - n0);
  if (tiitg < MOE_BN) {
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

// moe_st8 stores 8 values (a, b) at d, converted to the tile's type.
static inline void moe_st8(threadgroup half *d, float4 a, float4 b) {
  *((threadgroup half4 *)d) = half4(a);
  *((threadgroup half4 *)(d + 4)) = half4(b);
}
static inline void moe_st8(threadgroup float *d, float4 a, float4 b) {
  *((threadgroup float4 *)d) = a;
  *((threadgroup float4 *)(d + 4)) = b;
}

// moe_ld8 reads 8 activations of row xr from column k into (a, b): two
// 4-wide loads when vec (rows 16-byte aligned for float, 8 for half) and
// k + 8 <= K, else one by one with zeros past K; zeros for a token past
// the list (live false).
template <typename X, typename X4>
static inline void moe_ld8(device const X *xr, bool live, bool vec, int k, int K, thread float4 &a, thread float4 &b) {
  a = float4(0.0f);
  b = float4(0.0f);
  if (live && vec && k + 8 <= K) {
    device const X4 *p = (device const X4 *)(xr + k);
#ifdef MSL_EMU
    msl::check_aligned(p, sizeof(X4), "moe x 4-wide");
#endif
    a = float4(p[0]);
    b = float4(p[1]);
  } else if (live) {
    for (int j = 0; j < 4; j++) {
      a[j] = k + j < K ? float(xr[k + j]) : 0.0f;
      b[j] = k + 4 + j < K ? float(xr[k + 4 + j]) : 0.0f;
    }
  }
}

// moe_stage_w dequantizes the 16 weights of row wr from column kc (zeros
// past the row or past K) into dst as T.
template <typename F, typename T>
static inline void moe_stage_w(constant kargs_matmul &args, device const uchar *wr, device const uchar *sr,
                               device const uchar *br, bool live, int kc, threadgroup T *dst) {
  float v[16];
  if (live && kc + 16 <= args.K) {
    F::dq16(wr, sr, br, kc / 16, args.group_size, args.scale_bf16, v);
  } else {
    // The tail of a row whose length is not a multiple of 32 (float
    // formats only: block formats never have one), or a row past M.
    for (int j = 0; j < 16; j++) {
      v[j] = live && kc + j < args.K ? F::dq1(wr, sr, br, kc + j, args.group_size, args.scale_bf16) : 0.0f;
    }
  }
  moe_st8(dst, float4(v[0], v[1], v[2], v[3]), float4(v[4], v[5], v[6], v[7]));
  moe_st8(dst + 8, float4(v[8], v[9], v[10], v[11]), float4(v[12], v[13], v[14], v[15]));
}

// moe_stage_x stores this thread's 16 activations (x0..x3) at dst and, when
// guard (half tiles, float x), marks the step (k0) in *any and in *tok (its
// token's flag) when one of them is beyond half's range (every writer
// stores the same value).
template <typename T>
static inline void moe_stage_x(float4 x0, float4 x1, float4 x2, float4 x3, threadgroup T *dst, bool guard,
                               threadgroup int *any, threadgroup int *tok, int k0) {
  moe_st8(dst, x0, x1);
  moe_st8(dst + 8, x2, x3);
  if (guard) {
    const float4 a = max(max(fabs(x0), fabs(x1)), max(fabs(x2), fabs(x3)));
    if (max(max(a.x, a.y), max(a.z, a.w)) > 65504.0f) {
      *any = k0;
      *tok = k0;
    }
  }
}

// moe_mma multiplies nk 8-wide column steps of the staged tiles into acc:
// the first nf 8-token fragments of this simdgroup's 32 tokens (sx, row
// stride ldx; nf is uniform over the simdgroup, the fragments past it hold
// only tokens past the expert's list) by its 32 tile rows (sw, stride ldw,
// read transposed): nf + 4 loads and 4 nf multiply-accumulates per step
// (4 + 4 and 16 for a full tile), none when nf = 0.
template <typename TX, typename TW>
static inline void moe_mma(thread simdgroup_float8x8 (&acc)[4][4], threadgroup const TX *sx, int ldx,
                           threadgroup const TW *sw, int ldw, int nk, int nf) {
  if (nf <= 0) {
    return;
  }
  for (int kk = 0; kk < 8 * nk; kk += 8) {
    simdgroup_matrix<TX, 8, 8> mx[4];
    simdgroup_matrix<TW, 8, 8> mw[4];
    for (int i = 0; i < 4; i++) {
      if (i < nf) {
        simdgroup_load(mx[i], sx + 8 * i * ldx + kk, ldx);
      }
    }
    for (int j = 0; j < 4; j++) {
      simdgroup_load(mw[j], sw + 8 * j * ldw + kk, ldw, ulong2(0, 0), true);
    }
    for (int i = 0; i < 4; i++) {
      if (i < nf) {
        for (int j = 0; j < 4; j++) {
          simdgroup_multiply_accumulate(acc[i][j], mx[i], mw[j], acc[i][j]);
        }
      }
    }
  }
}

// moe_mm runs the K loop of one (row tile, token tile) into acc and leaves
// the product [64 tokens][64 tile rows] staged in float at shmem (row
// stride MOE_TR), rows and outs filled. It returns false (uniformly) when
// the tile lies past the expert's list. gu: tile rows 0-31 are gate rows
// m0.., 32-63 the same up rows (m0 = 32 x), else 64 rows of w (m0 = 64 x).
// ovf[b] is the K step (k0) whose x overflowed half in buffer b, once one
// has, and ovf[2 + 64 b + t] the same for token t.
template <typename F, typename T, typename X, typename X4, bool GU>
static inline bool moe_mm(constant kargs_matmul &args, device const uchar *gw, device const uchar *gs,
                          device const uchar *gb, device const uchar *uw, device const uchar *us,
                          device const uchar *ub, device const X *x, device const int *counts,
                          device const int *lists, device const int *tiles, threadgroup float *shmem,
                          threadgroup int *rows, threadgroup int *outs, threadgroup int *ovf, uint3 tgpig,
                          ushort tiitg, ushort sgitg, thread int &m0) {
  const bool half_tiles = sizeof(T) == 2;
  const bool guard = half_tiles && sizeof(X) == 4; // x rounded to half from float
  for (int i = tiitg; i < 2 + 2 * MOE_BN; i += 128) {
    ovf[i] = -1; // ordered before any use by moe_tile_rows' barrier
  }
  int e, live;
  if (!moe_tile_rows(args, counts, lists, tiles, tgpig, rows, outs, tiitg, e, live)) {
    return false; // uniform: the whole tile is past this expert's list
  }
  const int LD = MOE_LD(T), NB = MOE_NBUF(T), BUF = MOE_BUF(T);
  m0 = tgpig.x * (GU ? MOE_GU_BM : MOE_DN_BM);
  threadgroup T *tiles_ = (threadgroup T *)shmem; // buffer b: W [64][LD] at b * BUF, x [64][LD] after it
  const int lr = tiitg / 2, lc = 16 * (tiitg % 2); // this thread's tile row / token, and 16 columns
  const bool up = GU && lr >= MOE_GU_BM;
  const int wrow = m0 + (GU ? lr % MOE_GU_BM : lr);
  const bool wlive = wrow < args.M;
  const ulong eo = (ulong)e * args.expert_bytes, so = (ulong)e * args.s_expert_bytes;
  device const uchar *wr = (up ? uw : gw) + eo + (ulong)(wlive ? wrow : 0) * args.row_bytes;
  device const uchar *sr = (up ? us : gs) + so + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  device const uchar *br = (up ? ub : gb) + so + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  const int xrow = rows[lr];
  const bool xlive = xrow >= 0;
  device const X *xr = x + (ulong)(xlive ? xrow : 0) * args.x_stride;
  const bool vec = (args.x_stride & 3) == 0; // uniform over the threadgroup
  const int wo = lr * LD + lc, xo = MOE_TR * LD + lr * LD + lc; // this thread's places in a buffer

  const int to = 32 * (sgitg % 2); // this simdgroup's tokens [to, to+32)
  const int ro = 32 * (sgitg / 2); // and tile rows [ro, ro+32): gate or up for moe_gu
  // This simdgroup's 8-token fragments that hold a token of the list: a
  // partly filled tile (~32 of 64 tokens at 512-row chunks, top-8 of 128)
  // skips the multiplies of its empty fragments.
  const int nf = min(max((live - to + 7) / 8, 0), 4);
  simdgroup_float8x8 acc[4][4];
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
  }
  // Step 0 into buffer 0.
  float4 xv[4];
  moe_ld8<X, X4>(xr, xlive, vec, lc, args.K, xv[0], xv[1]);
  moe_ld8<X, X4>(xr, xlive, vec, lc + 8, args.K, xv[2], xv[3]);
  moe_stage_w<F, T>(args, wr, sr, br, wlive, lc, tiles_ + wo);
  moe_stage_x<T>(xv[0], xv[1], xv[2], xv[3], tiles_ + xo, guard, ovf, ovf + 2 + lr, 0);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int steps = (args.K + MOE_BK - 1) / MOE_BK;
  for (int s = 0; s < steps; s++) {
    const int k0 = s * MOE_BK, cur = s % NB;
    const bool next = s + 1 < steps;
    threadgroup T *sw = tiles_ + cur * BUF;
    threadgroup T *sx = sw + MOE_TR * LD;
    if (NB == 2 && next) {
      // The next step's activations: in flight during the multiplies.
      moe_ld8<X, X4>(xr, xlive, vec, k0 + MOE_BK + lc, args.K, xv[0], xv[1]);
      moe_ld8<X, X4>(xr, xlive, vec, k0 + MOE_BK + lc + 8, args.K, xv[2], xv[3]);
    }
    if (guard && ovf[cur] == k0) {
      // Uniform: some token's x in this step is beyond half's range.
      // Multiply the step from x in float, 16 columns at a time, in the x
      // half tile's place: that token's values as they are, the others'
      // rounded to half.
      threadgroup float *sxf = (threadgroup float *)sx; // [64 tokens][MOE_LDF2]
      const bool big = ovf[2 + MOE_BN * cur + lr] == k0;
      const int fc = 8 * (tiitg % 2);
      for (int h = 0; h < 2; h++) {
        float4 a, b;
        moe_ld8<X, X4>(xr, xlive, vec, k0 + 16 * h + fc, args.K, a, b);
        if (!big) {
          a = float4(half4(a));
          b = float4(half4(b));
        }
        moe_st8(sxf + lr * MOE_LDF2 + fc, a, b);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        moe_mma(acc, sxf + to * MOE_LDF2, MOE_LDF2, sw + ro * LD + 16 * h, LD, 2, nf);
        threadgroup_barrier(mem_flags::mem_threadgroup);
      }
    } else {
      moe_mma(acc, sx + to * LD, LD, sw + ro * LD, LD, MOE_BK / 8, nf);
    }
    if (NB == 2 && next) {
      // Step s+1 into the other buffer, which no simdgroup reads in this
      // step (its last reads, step s-1's, ended at the barrier before).
      const int nb = 1 - cur;
      moe_stage_w<F, T>(args, wr, sr, br, wlive, k0 + MOE_BK + lc, tiles_ + nb * BUF + wo);
      moe_stage_x<T>(xv[0], xv[1], xv[2], xv[3], tiles_ + nb * BUF + xo, guard, ovf + nb, ovf + 2 + MOE_BN * nb + lr, k0 + MOE_BK);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (NB == 1 && next) {
      moe_ld8<X, X4>(xr, xlive, vec, k0 + MOE_BK + lc, args.K, xv[0], xv[1]);
      moe_ld8<X, X4>(xr, xlive, vec, k0 + MOE_BK + lc + 8, args.K, xv[2], xv[3]);
      moe_stage_w<F, T>(args, wr, sr, br, wlive, k0 + MOE_BK + lc, tiles_ + wo);
      moe_stage_x<T>(xv[0], xv[1], xv[2], xv[3], tiles_ + xo, guard, ovf, ovf + 2 + lr, k0 + MOE_BK);
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  // Stage the product [64 tokens][64 tile rows] in float (the loop ended
  // at a barrier: no simdgroup reads the tiles any more).
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      simdgroup_store(acc[i][j], shmem + (to + 8 * i) * MOE_TR + ro + 8 * j, MOE_TR);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return true;
}

template <typename F, typename T, typename T4>
static inline void moe_gu_impl(constant kargs_matmul &args, device const uchar *gw, device const uchar *gs,
                               device const uchar *gb, device const uchar *uw, device const uchar *us,
                               device const uchar *ub, device const float *x, device T *h, device const int *counts,
                               device const int *lists, device const int *tiles, threadgroup float *shmem,
                               threadgroup int *rows, threadgroup int *outs, threadgroup int *ovf, uint3 tgpig,
                               ushort tiitg, ushort sgitg) {
  int m0;
  if (!moe_mm<F, T, float, float4, true>(args, gw, gs, gb, uw, us, ub, x, counts, lists, tiles, shmem, rows, outs, ovf,
                                         tgpig, tiitg, sgitg, m0)) {
    return;
  }
  // Epilogue: shmem holds [64 tokens][gate 32 | up 32]; each thread writes
  // SiLU(g) * u for its elements, rows of the matrix only.
  for (int idx = tiitg; idx < MOE_BN * MOE_GU_BM; idx += 128) {
    const int t = idx / MOE_GU_BM, r = idx % MOE_GU_BM;
    const int o = outs[t];
    if (o >= 0 && m0 + r < args.M) {
      const float g = shmem[t * MOE_TR + r];
      h[(ulong)o * args.y_stride + m0 + r] = T(g / (1.0f + exp(-g)) * shmem[t * MOE_TR + MOE_GU_BM + r]);
    }
  }
}

// moe_bf16 rounds v to bfloat16 (nearest even; a NaN stays a quiet NaN) and
// returns its bits, as quant.Float32ToBF16.
static inline ushort moe_bf16(float v) {
  const uint u = as_type<uint>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return ushort((u >> 16) | 0x40u);
  }
  return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// moe_sty stores an output value as the kernel's Y: float, or bf16 bits.
static inline void moe_sty(device float *p, float v) { *p = v; }
static inline void moe_sty(device ushort *p, float v) { *p = moe_bf16(v); }

template <typename F, typename T, typename T4, typename Y>
static inline void moe_down_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                                 device const uchar *wb, device const T *x, device Y *y, device const int *counts,
                                 device const int *lists, device const int *tiles, threadgroup float *shmem,
                                 threadgroup int *rows, threadgroup int *outs, threadgroup int *ovf, uint3 tgpig,
                                 ushort tiitg, ushort sgitg) {
  int m0;
  if (!moe_mm<F, T, T, T4, false>(args, w, ws, wb, w, ws, wb, x, counts, lists, tiles, shmem, rows, outs, ovf, tgpig,
                                  tiitg, sgitg, m0)) {
    return;
  }
  for (int idx = tiitg; idx < MOE_BN * MOE_DN_BM; idx += 128) {
    const int t = idx / MOE_DN_BM, r = idx % MOE_DN_BM;
    const int o = outs[t];
    if (o >= 0 && m0 + r < args.M) {
      moe_sty(y + (ulong)o * args.y_stride + m0 + r, shmem[idx]);
    }
  }
}

// moe_gu_*: 0 args, 1-3 gate (W, MLX scales, MLX biases: bind W again for
// ggml formats), 4 x [tokens][K] float, 5 h [entries][M] (half; float for
// f32 and bf16), 6 counts, 7 lists, 8 the tile table (read only when
// args.tiles = 1; bind any buffer otherwise), 9-11 up (as 1-3; the same
// storage as gate).
// moe_down_*: 0 args, 1-3 W, 4 h, 5 y [entries][M] (bf16 bits; float for
// f32, bf16 and f16), 6-8 as moe_gu_*.
#define MOE_GU_PARAMS(T)                                                                                \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *gw [[buffer(1)]],                     \
      device const uchar *gs [[buffer(2)]], device const uchar *gb [[buffer(3)]],                       \
      device const float *x [[buffer(4)]], device T *h [[buffer(5)]], device const int *counts [[buffer(6)]], \
      device const int *lists [[buffer(7)]], device const int *tiles [[buffer(8)]],                     \
      device const uchar *uw [[buffer(9)]], device const uchar *us [[buffer(10)]],                      \
      device const uchar *ub [[buffer(11)]], uint3 tgpig [[threadgroup_position_in_grid]],               \
      ushort tiitg [[thread_index_in_threadgroup]], ushort sgitg [[simdgroup_index_in_threadgroup]]
#define MOE_DOWN_PARAMS(T, Y)                                                                           \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                      \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const T *x [[buffer(4)]], device Y *y [[buffer(5)]], device const int *counts [[buffer(6)]], \
      device const int *lists [[buffer(7)]], device const int *tiles [[buffer(8)]],                     \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],       \
      ushort sgitg [[simdgroup_index_in_threadgroup]]
// Threadgroup arrays may only be declared in entry-point functions.
#define MOE_TG(T)                                                                                       \
  threadgroup float shmem[MOE_SHMEM_FLOATS(T)];                                                         \
  threadgroup int rows[MOE_BN];                                                                         \
  threadgroup int outs[MOE_BN];                                                                         \
  threadgroup int ovf[2 + 2 * MOE_BN]
#define MOE_GU_CALL(F, T, T4)                                                                           \
  MOE_TG(T);                                                                                            \
  moe_gu_impl<F, T, T4>(args, gw, gs, gb, uw, us, ub, x, h, counts, lists, tiles, shmem, rows, outs, ovf, tgpig, tiitg, \
                        sgitg)
#define MOE_DOWN_CALL(F, T, T4, Y)                                                                      \
  MOE_TG(T);                                                                                            \
  moe_down_impl<F, T, T4, Y>(args, w, ws, wb, x, y, counts, lists, tiles, shmem, rows, outs, ovf, tgpig, tiitg, sgitg)
#define MOE_GU_H(F) MOE_GU_CALL(F, half, half4)
#define MOE_DOWN_H(F) MOE_DOWN_CALL(F, half, half4, ushort)

kernel void moe_gu_f32(MOE_GU_PARAMS(float)) { MOE_GU_CALL(fmt_f32, float, float4); }
kernel void moe_gu_f16(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_f16); }
kernel void moe_gu_bf16(MOE_GU_PARAMS(float)) { MOE_GU_CALL(fmt_bf16, float, float4); }
kernel void moe_gu_q8_0(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q8_0); }
kernel void moe_gu_q5_1(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q5_1); }
kernel void moe_gu_q5_0(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q5_0); }
kernel void moe_gu_q4_1(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q4_1); }
kernel void moe_gu_q4_0(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q4_0); }
kernel void moe_gu_q6_K(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q6_K); }
kernel void moe_gu_q5_K(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q5_K); }
kernel void moe_gu_q4_K(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q4_K); }
kernel void moe_gu_q3_K(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q3_K); }
kernel void moe_gu_q2_K(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_q2_K); }
kernel void moe_gu_mlx4(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_mlx4); }
kernel void moe_gu_mlx8(MOE_GU_PARAMS(half)) { MOE_GU_H(fmt_mlx8); }

kernel void moe_down_f32(MOE_DOWN_PARAMS(float, float)) { MOE_DOWN_CALL(fmt_f32, float, float4, float); }
kernel void moe_down_f16(MOE_DOWN_PARAMS(half, float)) { MOE_DOWN_CALL(fmt_f16, half, half4, float); }
kernel void moe_down_bf16(MOE_DOWN_PARAMS(float, float)) { MOE_DOWN_CALL(fmt_bf16, float, float4, float); }
kernel void moe_down_q8_0(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q8_0); }
kernel void moe_down_q5_1(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q5_1); }
kernel void moe_down_q5_0(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q5_0); }
kernel void moe_down_q4_1(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q4_1); }
kernel void moe_down_q4_0(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q4_0); }
kernel void moe_down_q6_K(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q6_K); }
kernel void moe_down_q5_K(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q5_K); }
kernel void moe_down_q4_K(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q4_K); }
kernel void moe_down_q3_K(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q3_K); }
kernel void moe_down_q2_K(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_q2_K); }
kernel void moe_down_mlx4(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_mlx4); }
kernel void moe_down_mlx8(MOE_DOWN_PARAMS(half, ushort)) { MOE_DOWN_H(fmt_mlx8); }

// moe_ldy reads an output value stored as float or as bf16 bits.
static inline float moe_ldy(device const float *p) { return *p; }
static inline float moe_ldy(device const ushort *p) { return as_type<float>(uint(*p) << 16); }

// moe_combine_impl is moe_combine_f32 and moe_combine_bf16: 0 args, 1 ys
// [tokens*topk][cols] of Y, 2 weights [tokens][topk], 3 residual
// [tokens][cols] (read with args.add_residual), 4 y [tokens][cols] float.
template <typename Y>
static inline void moe_combine_impl(constant kargs_moe &args, device const Y *ys, device const float *weights,
                                    device const float *residual, device float *y, uint i) {
  const int t = i / args.cols, c = i % args.cols;
  if (t >= args.tokens) {
    return;
  }
  float acc = args.add_residual ? residual[i] : 0.0f;
  for (int s = 0; s < args.topk; s++) {
    const int entry = t * args.topk + s;
    acc += weights[entry] * moe_ldy(ys + (ulong)entry * args.cols + c);
  }
  y[i] = acc;
}

kernel void moe_combine_f32(constant kargs_moe &args [[buffer(0)]],
                            device const float *ys [[buffer(1)]],
                            device const float *weights [[buffer(2)]],
                            device const float *residual [[buffer(3)]],
                            device float *y [[buffer(4)]],
                            uint i [[thread_position_in_grid]]) {
  moe_combine_impl<float>(args, ys, weights, residual, y, i);
}

kernel void moe_combine_bf16(constant kargs_moe &args [[buffer(0)]],
                             device const ushort *ys [[buffer(1)]],
                             device const float *weights [[buffer(2)]],
                             device const float *residual [[buffer(3)]],
                             device float *y [[buffer(4)]],
                             uint i [[thread_position_in_grid]]) {
  moe_combine_impl<ushort>(args, ys, weights, residual, y, i);
}

// moe_grid writes, for every expert stored on its own, the two indirect
// grids of its launches (args.tiles = 0): grids[6e..6e+2] = (args.rows_gu,
// ceil(count/64), 1) for moe_gu_*, grids[6e+3..6e+5] = (args.rows_down,
// ceil(count/64), 1) for moe_down_*, so that each expert's launch covers
// exactly the tokens routed to it without a CPU round trip (an expert with
// no tokens launches nothing). One thread per expert, grid
// ceil(n_expert/32) x 32; grids is [n_expert][6] uint.
kernel void moe_grid(constant kargs_moe_tiles &args [[buffer(0)]],
                     device const int *counts [[buffer(1)]],
                     device uint *grids [[buffer(2)]],
                     uint e [[thread_position_in_grid]]) {
  if ((int)e >= args.n_expert) {
    return;
  }
  const uint t = uint((counts[e] + MOE_BN - 1) / MOE_BN);
  grids[6 * e + 0] = uint(args.rows_gu);
  grids[6 * e + 1] = t;
  grids[6 * e + 2] = 1u;
  grids[6 * e + 3] = uint(args.rows_down);
  grids[6 * e + 4] = t;
  grids[6 * e + 5] = 1u;
}
