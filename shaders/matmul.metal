// matmul.metal: y[n][m] = sum_k x[n][k] * W[m][k] for W in every storage
// format the loader supports (quants.h), x and y f32.
//   mul_mv_<fmt>:    few tokens (N <= 8): 64 threads = 2 simdgroups, each
//                    simdgroup 2 rows x 1 token; lanes stride over 16-element
//                    chunks, dequantization fused into the dot, one simd_sum.
//                    Grid (ceil(M/4), N, 1).
//   mul_mm_<fmt>:    prefill: a 64-row x 32-token output tile per threadgroup of
//                    128 threads, K step 32: each thread dequantizes 16 weights
//                    into threadgroup memory, then 4 simdgroups each multiply a
//                    16x32 sub-tile with 8x8 simdgroup matrices. Grid
//                    (ceil(N/32), ceil(M/64), 1).
//   mul_mm_id_<fmt>: the MoE gathered matmul. The tile's token rows come from
//                    an expert's list built by moe_map (entries
//                    token*topk + slot). With args.tiles = 1 (one launch per
//                    projection): grid x indexes the (expert, first entry)
//                    table of moe_tiles, which holds only non-empty tiles;
//                    grid (n_tiles, ceil(M/64), 1), read from the device.
//                    With args.tiles = 0: grid z = expert, x = token tile,
//                    tiles past the list's end return at once; grid
//                    (ceil(N/32), ceil(M/64), n_expert). Expert e's weights
//                    start e * expert_bytes after buffer 1 (2, 3: scales,
//                    biases, e * s_expert_bytes).
//   get_rows_<fmt>:  the embedding gather, one threadgroup per id.
//   gather_blend_<fmt>: f32, f16 and bf16 only: y[i] = sum over j < k of
//                    weights[i*k+j] * W[ids[i*k+j]] (the vision tower's
//                    bilinear position embeddings), one threadgroup per row
//                    of y.
// K must be a whole number of blocks for the block formats (32 for MLX
// groups); the float formats take any K.
#include <metal_stdlib>
#include "kargs.h"
#include "quants.h"
using namespace metal;

#define MV_ROWS_PER_SG 2
#define MV_SG 2

template <typename F>
static inline void mul_mv_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                               device const uchar *wb, device const float *x, device float *y, uint3 tgpig,
                               ushort tiisg, ushort sgitg) {
  const int n = tgpig.y;
  const int r0 = (tgpig.x * MV_SG + sgitg) * MV_ROWS_PER_SG;
  device const float *xr = x + (ulong)n * args.x_stride;
  const int chunks = args.K / 16;
  for (int rr = 0; rr < MV_ROWS_PER_SG; rr++) {
    const int r = r0 + rr;
    if (r >= args.M) {
      break; // uniform over the simdgroup
    }
    device const uchar *wr = w + (ulong)r * args.row_bytes;
    device const uchar *sr = ws + (ulong)r * args.s_row_bytes;
    device const uchar *br = wb + (ulong)r * args.s_row_bytes;
    float acc = 0.0f;
    for (int c = tiisg; c < chunks; c += 32) {
      float v[16];
      F::dq16(wr, sr, br, c, args.group_size, args.scale_bf16, v);
      device const float *xc = xr + 16 * c;
      for (int j = 0; j < 16; j++) {
        acc += v[j] * xc[j];
      }
    }
    for (int e = chunks * 16 + tiisg; e < args.K; e += 32) {
      acc += F::dq1(wr, sr, br, e, args.group_size, args.scale_bf16) * xr[e];
    }
    acc = simd_sum(acc);
    if (tiisg == 0) {
      y[(ulong)n * args.y_stride + r] = acc;
    }
  }
}

// FC_mm_direct (function constant 0, mul_mm_* only): every tile lies wholly
// inside y (M % 64 == 0 and N % 32 == 0), so tiles are stored straight from
// the simdgroup matrices instead of through threadgroup memory with bounds
// checks.
constant bool FC_mm_direct [[function_constant(0)]];

#define MM_BM 64
#define MM_BN 32
#define MM_BK 32

// mul_mm_tile computes one 64x32 output tile. rows[i] (i < 32) is the x row of
// tile token i and out[i] its y row, or -1 past the end.
template <typename F>
static inline void mul_mm_tile(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                               device const uchar *wb, device const float *x, device float *y,
                               threadgroup float *shmem, threadgroup int *rows, threadgroup int *outs, int m0,
                               bool direct, ushort tiitg, ushort sgitg) {
  threadgroup float *sa = shmem;                 // W tile [64 rows][32 k]
  threadgroup float *sb = shmem + MM_BM * MM_BK; // x tile [32 tokens][32 k]
  const int ar = tiitg / 2, ac = tiitg % 2;      // this thread's W row and 16-chunk
  const int br = tiitg / 4, bc = 8 * (tiitg % 4); // this thread's x row and 8 columns
  const int wrow = m0 + ar;
  device const uchar *wr = w + (ulong)wrow * args.row_bytes;
  device const uchar *sr = ws + (ulong)wrow * args.s_row_bytes;
  device const uchar *bsr = wb + (ulong)wrow * args.s_row_bytes;
  const int xrow = rows[br];
  device const float *xr = x + (ulong)(xrow < 0 ? 0 : xrow) * args.x_stride;

  const int to = 16 * (sgitg % 2); // this simdgroup's tokens [to, to+16)
  const int ro = 32 * (sgitg / 2); // and W rows [ro, ro+32) of the tile
  simdgroup_float8x8 acc[2][4];
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 4; j++) {
      acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
  }
  for (int k0 = 0; k0 < args.K; k0 += MM_BK) {
    float v[16];
    const int kc = k0 + 16 * ac;
    if (wrow < args.M && kc + 16 <= args.K) {
      F::dq16(wr, sr, bsr, kc / 16, args.group_size, args.scale_bf16, v);
    } else {
      // Past the last row, or the tail of a row whose length is not a
      // multiple of 32 (float formats only: block formats never have one).
      for (int j = 0; j < 16; j++) {
        v[j] = wrow < args.M && kc + j < args.K ? F::dq1(wr, sr, bsr, kc + j, args.group_size, args.scale_bf16) : 0.0f;
      }
    }
    for (int j = 0; j < 16; j++) {
      sa[ar * MM_BK + 16 * ac + j] = v[j];
    }
    for (int j = 0; j < 8; j++) {
      sb[br * MM_BK + bc + j] = xrow >= 0 && k0 + bc + j < args.K ? xr[k0 + bc + j] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int kk = 0; kk < MM_BK; kk += 8) {
      simdgroup_float8x8 ma[2];
      simdgroup_float8x8 mb[4];
      for (int i = 0; i < 2; i++) {
        simdgroup_load(ma[i], sb + (to + 8 * i) * MM_BK + kk, MM_BK);
      }
      for (int j = 0; j < 4; j++) {
        simdgroup_load(mb[j], sa + (ro + 8 * j) * MM_BK + kk, MM_BK, ulong2(0, 0), true);
      }
      for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 4; j++) {
          simdgroup_multiply_accumulate(acc[i][j], ma[i], mb[j], acc[i][j]);
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (direct) {
    for (int i = 0; i < 2; i++) {
      for (int j = 0; j < 4; j++) {
        simdgroup_store(acc[i][j], y + (ulong)outs[to + 8 * i] * args.y_stride + m0 + ro + 8 * j, args.y_stride);
      }
    }
    return;
  }
  // Stage the tile [32 tokens][64 rows] in threadgroup memory, then store
  // the part inside the matrix.
  threadgroup float *sc = shmem;
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 4; j++) {
      simdgroup_store(acc[i][j], sc + (to + 8 * i) * MM_BM + ro + 8 * j, MM_BM);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int idx = tiitg; idx < MM_BN * MM_BM; idx += 128) {
    const int t = idx / MM_BM, r = idx % MM_BM;
    const int o = outs[t];
    if (o >= 0 && m0 + r < args.M) {
      y[(ulong)o * args.y_stride + m0 + r] = sc[idx];
    }
  }
}

// Threadgroup arrays may only be declared in entry-point functions: those
// declare them (MM_TG) and pass them down.
#define MM_TG                                                                                           \
  threadgroup float shmem[MM_BM * MM_BK + MM_BN * MM_BK];                                               \
  threadgroup int rows[MM_BN];                                                                          \
  threadgroup int outs[MM_BN]

template <typename F>
static inline void mul_mm_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                               device const uchar *wb, device const float *x, device float *y,
                               threadgroup float *shmem, threadgroup int *rows, threadgroup int *outs, uint3 tgpig,
                               ushort tiitg, ushort sgitg) {
  const int n0 = tgpig.x * MM_BN, m0 = tgpig.y * MM_BM;
  if (tiitg < MM_BN) {
    const int n = n0 + tiitg;
    rows[tiitg] = n < args.N ? n : -1;
    outs[tiitg] = n < args.N ? n : -1;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  mul_mm_tile<F>(args, w, ws, wb, x, y, shmem, rows, outs, m0, FC_mm_direct, tiitg, sgitg);
}

template <typename F>
static inline void mul_mm_id_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                                  device const uchar *wb, device const float *x, device float *y,
                                  device const int *counts, device const int *lists, device const int *tiles,
                                  threadgroup float *shmem, threadgroup int *rows, threadgroup int *outs, uint3 tgpig,
                                  ushort tiitg, ushort sgitg) {
  const int e = args.tiles ? tiles[2 * tgpig.x] : int(tgpig.z);
  const int n0 = args.tiles ? tiles[2 * tgpig.x + 1] : int(tgpig.x) * MM_BN;
  const int m0 = tgpig.y * MM_BM;
  const int count = counts[e];
  if (n0 >= count) {
    return; // uniform: the whole tile is past this expert's token list
  }
  if (tiitg < MM_BN) {
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
  mul_mm_tile<F>(args, w + (ulong)e * args.expert_bytes, ws + (ulong)e * args.s_expert_bytes,
                 wb + (ulong)e * args.s_expert_bytes, x, y, shmem, rows, outs, m0, false, tiitg, sgitg);
}

template <typename F>
static inline void get_rows_impl(constant kargs_get_rows &args, device const uchar *w, device const uchar *ws,
                                 device const uchar *wb, device const int *ids, device float *y, uint3 tgpig,
                                 ushort tiitg, ushort ntg) {
  const int i = tgpig.x;
  if (i >= args.n_ids) {
    return;
  }
  const int id = ids[i];
  device float *yr = y + (ulong)i * args.cols;
  if (id < 0 || id >= args.n_rows) {
    // An id out of range is a host bug; make it loud instead of reading
    // outside the table.
    for (int c = tiitg; c < args.cols; c += ntg) {
      yr[c] = NAN;
    }
    return;
  }
  device const uchar *wr = w + (ulong)id * args.row_bytes;
  device const uchar *sr = ws + (ulong)id * args.s_row_bytes;
  device const uchar *br = wb + (ulong)id * args.s_row_bytes;
  const int chunks = args.cols / 16;
  for (int c = tiitg; c < chunks; c += ntg) {
    float v[16];
    F::dq16(wr, sr, br, c, args.group_size, args.scale_bf16, v);
    for (int j = 0; j < 16; j++) {
      yr[16 * c + j] = v[j];
    }
  }
  for (int e = chunks * 16 + tiitg; e < args.cols; e += ntg) {
    yr[e] = F::dq1(wr, sr, br, e, args.group_size, args.scale_bf16);
  }
}

template <typename F>
static inline void gather_blend_impl(constant kargs_gather_blend &args, device const uchar *w, device const int *ids,
                                     device const float *weights, device float *y, uint3 tgpig, ushort tiitg,
                                     ushort ntg) {
  const int i = tgpig.x;
  if (i >= args.n_out) {
    return;
  }
  device float *yr = y + (ulong)i * args.cols;
  device const int *id = ids + (ulong)i * args.k;
  device const float *wt = weights + (ulong)i * args.k;
  for (int j = 0; j < args.k; j++) {
    if (id[j] < 0 || id[j] >= args.n_rows) {
      // An id out of range is a host bug (the host checks them); make it
      // loud instead of reading outside the table. Uniform over the group.
      for (int c = tiitg; c < args.cols; c += ntg) {
        yr[c] = NAN;
      }
      return;
    }
  }
  for (int c = tiitg; c < args.cols; c += ntg) {
    // Each product rounded to float, summed in j order (torch's
    // embed(idx) * w, then the sum of the k terms). The emulator compiles
    // without FMA contraction; Apple's compiler may fuse a product into the
    // sum (within float rounding of the CPU backend's bits).
    device const uchar *r0 = w + (ulong)id[0] * args.row_bytes;
    float acc = wt[0] * F::dq1(r0, r0, r0, c, 0, 0);
    for (int j = 1; j < args.k; j++) {
      device const uchar *r = w + (ulong)id[j] * args.row_bytes;
      const float p = wt[j] * F::dq1(r, r, r, c, 0, 0);
      acc += p;
    }
    yr[c] = acc;
  }
}

// gather_blend_*: 0 args, 1 W, 2 ids [n_out * k], 3 weights [n_out * k]
// (f32), 4 y; grid (n_out, 1, 1), any threadgroup size.
#define GB_PARAMS                                                                                       \
  constant kargs_gather_blend &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                \
      device const int *ids [[buffer(2)]], device const float *weights [[buffer(3)]],                   \
      device float *y [[buffer(4)]], uint3 tgpig [[threadgroup_position_in_grid]],                      \
      ushort tiitg [[thread_index_in_threadgroup]], ushort ntg [[threads_per_threadgroup]]

kernel void gather_blend_f32(GB_PARAMS) { gather_blend_impl<fmt_f32>(args, w, ids, weights, y, tgpig, tiitg, ntg); }
kernel void gather_blend_f16(GB_PARAMS) { gather_blend_impl<fmt_f16>(args, w, ids, weights, y, tgpig, tiitg, ntg); }
kernel void gather_blend_bf16(GB_PARAMS) { gather_blend_impl<fmt_bf16>(args, w, ids, weights, y, tgpig, tiitg, ntg); }

// Every entry point binds: 0 args, 1 W (or its packed codes), 2 MLX scales,
// 3 MLX biases (bind W again for ggml formats), 4 x / ids, 5 y; mul_mm_id
// also 6 per-expert counts, 7 per-expert lists and 8 the tile table (read
// only when args.tiles = 1; bind any buffer otherwise).
#define MM_PARAMS                                                                                       \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                      \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const float *x [[buffer(4)]], device float *y [[buffer(5)]],                               \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],       \
      ushort tiisg [[thread_index_in_simdgroup]], ushort sgitg [[simdgroup_index_in_threadgroup]]
#define MM_ID_PARAMS                                                                                    \
  MM_PARAMS, device const int *counts [[buffer(6)]], device const int *lists [[buffer(7)]],            \
      device const int *tiles [[buffer(8)]]
#define GR_PARAMS                                                                                       \
  constant kargs_get_rows &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                    \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const int *ids [[buffer(4)]], device float *y [[buffer(5)]],                               \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],       \
      ushort ntg [[threads_per_threadgroup]]
#define MV_CALL(F) mul_mv_impl<F>(args, w, ws, wb, x, y, tgpig, tiisg, sgitg)
#define MM_CALL(F)                                                                                      \
  MM_TG;                                                                                                \
  mul_mm_impl<F>(args, w, ws, wb, x, y, shmem, rows, outs, tgpig, tiitg, sgitg)
#define MM_ID_CALL(F)                                                                                   \
  MM_TG;                                                                                                \
  mul_mm_id_impl<F>(args, w, ws, wb, x, y, counts, lists, tiles, shmem, rows, outs, tgpig, tiitg, sgitg)
#define GR_CALL(F) get_rows_impl<F>(args, w, ws, wb, ids, y, tgpig, tiitg, ntg)

kernel void mul_mv_f32(MM_PARAMS) { MV_CALL(fmt_f32); }
kernel void mul_mv_f16(MM_PARAMS) { MV_CALL(fmt_f16); }
kernel void mul_mv_bf16(MM_PARAMS) { MV_CALL(fmt_bf16); }
kernel void mul_mv_q8_0(MM_PARAMS) { MV_CALL(fmt_q8_0); }
kernel void mul_mv_q5_1(MM_PARAMS) { MV_CALL(fmt_q5_1); }
kernel void mul_mv_q5_0(MM_PARAMS) { MV_CALL(fmt_q5_0); }
kernel void mul_mv_q4_1(MM_PARAMS) { MV_CALL(fmt_q4_1); }
kernel void mul_mv_q4_0(MM_PARAMS) { MV_CALL(fmt_q4_0); }
kernel void mul_mv_q6_K(MM_PARAMS) { MV_CALL(fmt_q6_K); }
kernel void mul_mv_q5_K(MM_PARAMS) { MV_CALL(fmt_q5_K); }
kernel void mul_mv_q4_K(MM_PARAMS) { MV_CALL(fmt_q4_K); }
kernel void mul_mv_q3_K(MM_PARAMS) { MV_CALL(fmt_q3_K); }
kernel void mul_mv_q2_K(MM_PARAMS) { MV_CALL(fmt_q2_K); }
kernel void mul_mv_mlx4(MM_PARAMS) { MV_CALL(fmt_mlx4); }
kernel void mul_mv_mlx8(MM_PARAMS) { MV_CALL(fmt_mlx8); }

kernel void mul_mm_f32(MM_PARAMS) { MM_CALL(fmt_f32); }
kernel void mul_mm_f16(MM_PARAMS) { MM_CALL(fmt_f16); }
kernel void mul_mm_bf16(MM_PARAMS) { MM_CALL(fmt_bf16); }
kernel void mul_mm_q8_0(MM_PARAMS) { MM_CALL(fmt_q8_0); }
kernel void mul_mm_q5_1(MM_PARAMS) { MM_CALL(fmt_q5_1); }
kernel void mul_mm_q5_0(MM_PARAMS) { MM_CALL(fmt_q5_0); }
kernel void mul_mm_q4_1(MM_PARAMS) { MM_CALL(fmt_q4_1); }
kernel void mul_mm_q4_0(MM_PARAMS) { MM_CALL(fmt_q4_0); }
kernel void mul_mm_q6_K(MM_PARAMS) { MM_CALL(fmt_q6_K); }
kernel void mul_mm_q5_K(MM_PARAMS) { MM_CALL(fmt_q5_K); }
kernel void mul_mm_q4_K(MM_PARAMS) { MM_CALL(fmt_q4_K); }
kernel void mul_mm_q3_K(MM_PARAMS) { MM_CALL(fmt_q3_K); }
kernel void mul_mm_q2_K(MM_PARAMS) { MM_CALL(fmt_q2_K); }
kernel void mul_mm_mlx4(MM_PARAMS) { MM_CALL(fmt_mlx4); }
kernel void mul_mm_mlx8(MM_PARAMS) { MM_CALL(fmt_mlx8); }

kernel void mul_mm_id_f32(MM_ID_PARAMS) { MM_ID_CALL(fmt_f32); }
kernel void mul_mm_id_f16(MM_ID_PARAMS) { MM_ID_CALL(fmt_f16); }
kernel void mul_mm_id_bf16(MM_ID_PARAMS) { MM_ID_CALL(fmt_bf16); }
kernel void mul_mm_id_q8_0(MM_ID_PARAMS) { MM_ID_CALL(fmt_q8_0); }
kernel void mul_mm_id_q5_1(MM_ID_PARAMS) { MM_ID_CALL(fmt_q5_1); }
kernel void mul_mm_id_q5_0(MM_ID_PARAMS) { MM_ID_CALL(fmt_q5_0); }
kernel void mul_mm_id_q4_1(MM_ID_PARAMS) { MM_ID_CALL(fmt_q4_1); }
kernel void mul_mm_id_q4_0(MM_ID_PARAMS) { MM_ID_CALL(fmt_q4_0); }
kernel void mul_mm_id_q6_K(MM_ID_PARAMS) { MM_ID_CALL(fmt_q6_K); }
kernel void mul_mm_id_q5_K(MM_ID_PARAMS) { MM_ID_CALL(fmt_q5_K); }
kernel void mul_mm_id_q4_K(MM_ID_PARAMS) { MM_ID_CALL(fmt_q4_K); }
kernel void mul_mm_id_q3_K(MM_ID_PARAMS) { MM_ID_CALL(fmt_q3_K); }
kernel void mul_mm_id_q2_K(MM_ID_PARAMS) { MM_ID_CALL(fmt_q2_K); }
kernel void mul_mm_id_mlx4(MM_ID_PARAMS) { MM_ID_CALL(fmt_mlx4); }
kernel void mul_mm_id_mlx8(MM_ID_PARAMS) { MM_ID_CALL(fmt_mlx8); }

kernel void get_rows_f32(GR_PARAMS) { GR_CALL(fmt_f32); }
kernel void get_rows_f16(GR_PARAMS) { GR_CALL(fmt_f16); }
kernel void get_rows_bf16(GR_PARAMS) { GR_CALL(fmt_bf16); }
kernel void get_rows_q8_0(GR_PARAMS) { GR_CALL(fmt_q8_0); }
kernel void get_rows_q5_1(GR_PARAMS) { GR_CALL(fmt_q5_1); }
kernel void get_rows_q5_0(GR_PARAMS) { GR_CALL(fmt_q5_0); }
kernel void get_rows_q4_1(GR_PARAMS) { GR_CALL(fmt_q4_1); }
kernel void get_rows_q4_0(GR_PARAMS) { GR_CALL(fmt_q4_0); }
kernel void get_rows_q6_K(GR_PARAMS) { GR_CALL(fmt_q6_K); }
kernel void get_rows_q5_K(GR_PARAMS) { GR_CALL(fmt_q5_K); }
kernel void get_rows_q4_K(GR_PARAMS) { GR_CALL(fmt_q4_K); }
kernel void get_rows_q3_K(GR_PARAMS) { GR_CALL(fmt_q3_K); }
kernel void get_rows_q2_K(GR_PARAMS) { GR_CALL(fmt_q2_K); }
kernel void get_rows_mlx4(GR_PARAMS) { GR_CALL(fmt_mlx4); }
kernel void get_rows_mlx8(GR_PARAMS) { GR_CALL(fmt_mlx8); }

// Block-diagonal product of G = args.n_expert groups (GroupMatMul):
// y[t][g*M + m] = sum_k x[t][g*K + k] * w[g*M + m][k] for the N rows t of x
// (x_stride = G*K, y_stride = G*M elements between rows), x and w f32 (w
// [G*M][K]). One simdgroup per element of y, 4 per threadgroup of 128;
// grid (ceil(N*G*M / 4), 1, 1).
kernel void group_matmul_f32(constant kargs_matmul &args [[buffer(0)]],
                             device const float *x [[buffer(1)]],
                             device const float *w [[buffer(2)]],
                             device float *y [[buffer(3)]],
                             uint3 tgpig [[threadgroup_position_in_grid]],
                             ushort tiisg [[thread_index_in_simdgroup]],
                             ushort sgitg [[simdgroup_index_in_threadgroup]]) {
  const int cols = args.n_expert * args.M; // columns of y
  const long o = (long)tgpig.x * 4 + sgitg;
  if (o >= (long)args.N * cols) {
    return; // uniform over the simdgroup
  }
  const int t = o / cols, j = o % cols;
  const int g = j / args.M;
  device const float *xr = x + (ulong)t * args.x_stride + (ulong)g * args.K;
  device const float *wr = w + (ulong)j * args.K;
  float s = 0.0f;
  for (int k = tiisg; k < args.K; k += 32) {
    s += xr[k] * wr[k];
  }
  s = simd_sum(s);
  if (tiisg == 0) {
    y[(ulong)t * args.y_stride + j] = s;
  }
}
