// matmul.metal: y[n][m] = sum_k x[n][k] * W[m][k] for W in every storage
// format the loader supports (quants.h), x and y f32.
//   mul_mv_<fmt>:    few tokens (N <= 8): 64 threads = 2 simdgroups, each
//                    simdgroup 2 rows x 1 token; lanes stride over 16-element
//                    chunks, dequantization fused into the dot, one simd_sum.
//                    Grid (ceil(M/4), N, 1).
//   mul_mm_<fmt>:    prefill: a 64-row x 64-token output tile per threadgroup
//                    of 128 threads, K step 32: each thread dequantizes 16
//                    weights and loads 16 activations into threadgroup
//                    memory (half tiles, double-buffered, for most formats:
//                    see mm_tiles), then 4 simdgroups each multiply a 32x32
//                    sub-tile with 4 x 4 8x8 simdgroup matrices. Grid
//                    (ceil(N/64), ceil(M/64), 1).
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

// FC_mm_direct (function constant 0): every tile lies wholly inside y
// (M % 64 == 0 and N % 64 == 0), so tiles are stored straight from the
// simdgroup matrices instead of through threadgroup memory with bounds
// checks.
constant bool FC_mm_direct [[function_constant(0)]];

#define MM_BM 64 // weight rows per threadgroup
#define MM_BN 64 // tokens per threadgroup
#define MM_BK 32 // K step
#define MM_XG 32 // tokens per overflow group (see below)

// Threadgroup tiles. W and x are staged in half for f16 and every block
// format (a dequantized weight rounded once to half; f16 weights exactly),
// in float for f32 (activations as the right-hand side, TolFloat) and bf16
// (its range exceeds half's, and the bf16 release answers byte-identically
// to the reference only with x in float). Products of two halves are exact
// in float; accumulation is simdgroup_float8x8.
//
// Half tiles are double-buffered: while the simdgroups multiply step s from
// one buffer, the threads stage step s+1 into the other, so a K step costs
// one barrier and a simdgroup's loads and dequantization run beside the
// other simdgroups' multiplies (2 x (64 + 64) rows of 40 halves: 20 KiB).
// Float tiles (2 x 64 rows of 36 floats, 18 KiB) fit once: stage, barrier,
// multiply, barrier.
//
// Overflow guard (half tiles): a K step in which some x of a 32-token group
// is a finite |x| > 65504 (it would round to inf) is multiplied from x in
// float: the whole threadgroup takes the step in two halves of 16 columns,
// restaging x from memory as float in the x half tile's place ([64][16 + 4]
// floats), the overflowing group's values as they are and the other
// group's rounded to half (so that its products are those of the half
// path). Groups of 32 tokens, not the whole 64-token tile, so that a launch
// split at a multiple of 32 tokens (matmul.go) gives the bits of the whole.
//
// Rows are padded to keep the simdgroup loads free of bank conflicts (32
// banks of 4 bytes assumed): a load reads 8 rows x 8 elements; a half row of
// 32 + 8 elements is 80 bytes, so the 8 rows' 16-byte pieces fall on 8
// disjoint groups of 4 banks; a float row of 32 + 4 is 144 bytes (16 + 4:
// 80 bytes), so each bank serves exactly 2 of the 8 rows' 32-byte pieces
// (the minimum for 256 bytes).
#define MM_LD(T) (MM_BK + (sizeof(T) == 2 ? 8 : 4))
#define MM_LDF2 (MM_BK / 2 + 4)
#define MM_NBUF(T) (sizeof(T) == 2 ? 2 : 1)
#define MM_BUF(T) ((MM_BM + MM_BN) * MM_LD(T)) // elements of one buffer: W rows, then x rows
#define MM_STAGE_BYTES (MM_BN * MM_BM * 4)     // the output tile, staged in float
#define MM_TILE_BYTES(T) (MM_NBUF(T) * MM_BUF(T) * sizeof(T))
#define MM_SHMEM_FLOATS(T) ((MM_TILE_BYTES(T) > MM_STAGE_BYTES ? MM_TILE_BYTES(T) : MM_STAGE_BYTES) / 4)

// mm_st8 stores 8 values (a, b) at d, converted to the tile's type.
static inline void mm_st8(threadgroup half *d, float4 a, float4 b) {
  *((threadgroup half4 *)d) = half4(a);
  *((threadgroup half4 *)(d + 4)) = half4(b);
}
static inline void mm_st8(threadgroup float *d, float4 a, float4 b) {
  *((threadgroup float4 *)d) = a;
  *((threadgroup float4 *)(d + 4)) = b;
}

// mm_ld8 reads 8 activations of row xr from column k into (a, b): two
// float4 loads when vec (rows 16-byte aligned) and k + 8 <= K, else one by
// one with zeros past K; zeros for a token past N (live false).
static inline void mm_ld8(device const float *xr, bool live, bool vec, int k, int K, thread float4 &a,
                          thread float4 &b) {
  a = float4(0.0f);
  b = float4(0.0f);
  if (live && vec && k + 8 <= K) {
    device const float4 *p = (device const float4 *)(xr + k);
#ifdef MSL_EMU
    msl::check_aligned(p, 16, "mul_mm x float4");
#endif
    a = p[0];
    b = p[1];
  } else if (live) {
    for (int j = 0; j < 4; j++) {
      a[j] = k + j < K ? xr[k + j] : 0.0f;
      b[j] = k + 4 + j < K ? xr[k + 4 + j] : 0.0f;
    }
  }
}

// mm_stage_w dequantizes the 16 weights of row wr from column kc (zeros
// past the row or past K) into dst.
template <typename F, typename T>
static inline void mm_stage_w(constant kargs_matmul &args, device const uchar *wr, device const uchar *sr,
                              device const uchar *br, bool live, int kc, threadgroup T *dst) {
  float v[16];
  if (live && kc + 16 <= args.K) {
    F::dq16(wr, sr, br, kc / 16, args.group_size, args.scale_bf16, v);
  } else {
    // Past the last row, or the tail of a row whose length is not a
    // multiple of 32 (float formats only: block formats never have one).
    for (int j = 0; j < 16; j++) {
      v[j] = live && kc + j < args.K ? F::dq1(wr, sr, br, kc + j, args.group_size, args.scale_bf16) : 0.0f;
    }
  }
  mm_st8(dst, float4(v[0], v[1], v[2], v[3]), float4(v[4], v[5], v[6], v[7]));
  mm_st8(dst + 8, float4(v[8], v[9], v[10], v[11]), float4(v[12], v[13], v[14], v[15]));
}

// mm_stage_x stores this thread's 16 activations (x0..x3) at dst and, for
// half tiles, marks the step (k0) in *ovf when one of them is beyond half's
// range (every writer stores the same value).
template <typename T>
static inline void mm_stage_x(float4 x0, float4 x1, float4 x2, float4 x3, threadgroup T *dst, threadgroup int *ovf,
                              int k0) {
  mm_st8(dst, x0, x1);
  mm_st8(dst + 8, x2, x3);
  if (sizeof(T) == 2) {
    const float4 a = max(max(fabs(x0), fabs(x1)), max(fabs(x2), fabs(x3)));
    if (max(max(a.x, a.y), max(a.z, a.w)) > 65504.0f) {
      *ovf = k0;
    }
  }
}

// mm_mma multiplies nk 8-wide column steps of the staged tiles into acc:
// this simdgroup's 32 tokens (sx, row stride ldx) by its 32 W rows (sw,
// stride ldw, read transposed): 4 + 4 loads and 16 multiply-accumulates
// per step.
template <typename TX, typename TW>
static inline void mm_mma(thread simdgroup_float8x8 (&acc)[4][4], threadgroup const TX *sx, int ldx,
                          threadgroup const TW *sw, int ldw, int nk) {
  for (int kk = 0; kk < 8 * nk; kk += 8) {
    simdgroup_matrix<TX, 8, 8> mx[4];
    simdgroup_matrix<TW, 8, 8> mw[4];
    for (int i = 0; i < 4; i++) {
      simdgroup_load(mx[i], sx + 8 * i * ldx + kk, ldx);
    }
    for (int j = 0; j < 4; j++) {
      simdgroup_load(mw[j], sw + 8 * j * ldw + kk, ldw, ulong2(0, 0), true);
    }
    for (int i = 0; i < 4; i++) {
      for (int j = 0; j < 4; j++) {
        simdgroup_multiply_accumulate(acc[i][j], mx[i], mw[j], acc[i][j]);
      }
    }
  }
}

// mm_tiles names the tile type of each format (see above).
template <typename F> struct mm_tiles {
  typedef half t;
};
template <> struct mm_tiles<fmt_f32> {
  typedef float t;
};
template <> struct mm_tiles<fmt_bf16> {
  typedef float t;
};

// mul_mm_impl computes the 64-row x 64-token output tile (tgpig.y, tgpig.x)
// with 128 threads: thread i stages 16 weights of W row i/2 and 16
// activations of token i/2 per K step; simdgroup g multiplies tokens
// [32 (g % 2), +32) by rows [32 (g / 2), +32) into 4 x 4 accumulators.
// ovf[2 b + g] is the K step (k0) whose x overflowed half in buffer b,
// token group g, once one has.
template <typename F, typename T>
static inline void mul_mm_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                               device const uchar *wb, device const float *x, device float *y,
                               threadgroup float *shmem, threadgroup int *ovf, uint3 tgpig, ushort tiitg,
                               ushort sgitg) {
  const bool half_tiles = sizeof(T) == 2;
  const int LD = MM_LD(T), NB = MM_NBUF(T), BUF = MM_BUF(T);
  const int n0 = tgpig.x * MM_BN, m0 = tgpig.y * MM_BM;
  threadgroup T *tiles = (threadgroup T *)shmem; // buffer b: W [64][LD] at b * BUF, x [64][LD] after it
  const int lr = tiitg / 2, lc = 16 * (tiitg % 2); // this thread's W row / token, and 16 columns
  const int wrow = m0 + lr;
  const bool wlive = wrow < args.M;
  device const uchar *wr = w + (ulong)(wlive ? wrow : 0) * args.row_bytes;
  device const uchar *sr = ws + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  device const uchar *br = wb + (ulong)(wlive ? wrow : 0) * args.s_row_bytes;
  const int xn = n0 + lr;
  const bool xlive = xn < args.N;
  device const float *xr = x + (ulong)(xlive ? xn : 0) * args.x_stride;
  // Rows of x start 16-byte aligned when x_stride is a multiple of 4 (the
  // host binds x at 16-byte aligned offsets). Uniform over the threadgroup.
  const bool vec = (args.x_stride & 3) == 0;
  const int wo = lr * LD + lc, xo = MM_BM * LD + lr * LD + lc; // this thread's places in a buffer
  threadgroup int *xovf = ovf + lr / MM_XG;

  const int to = 32 * (sgitg % 2); // this simdgroup's tokens [to, to+32)
  const int ro = 32 * (sgitg / 2); // and W rows [ro, ro+32) of the tile
  simdgroup_float8x8 acc[4][4];
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
  }
  if (tiitg < 4) {
    ovf[tiitg] = -1;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // Step 0 into buffer 0.
  float4 xv[4];
  mm_ld8(xr, xlive, vec, lc, args.K, xv[0], xv[1]);
  mm_ld8(xr, xlive, vec, lc + 8, args.K, xv[2], xv[3]);
  mm_stage_w<F, T>(args, wr, sr, br, wlive, lc, tiles + wo);
  mm_stage_x<T>(xv[0], xv[1], xv[2], xv[3], tiles + xo, xovf, 0);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int steps = (args.K + MM_BK - 1) / MM_BK;
  for (int s = 0; s < steps; s++) {
    const int k0 = s * MM_BK, cur = s % NB;
    const bool next = s + 1 < steps;
    threadgroup T *sw = tiles + cur * BUF;
    threadgroup T *sx = sw + MM_BM * LD;
    if (NB == 2 && next) {
      // The next step's activations: in flight during the multiplies.
      mm_ld8(xr, xlive, vec, k0 + MM_BK + lc, args.K, xv[0], xv[1]);
      mm_ld8(xr, xlive, vec, k0 + MM_BK + lc + 8, args.K, xv[2], xv[3]);
    }
    if (half_tiles && (ovf[2 * cur] == k0 || ovf[2 * cur + 1] == k0)) {
      // Uniform: some x of this step is beyond half's range. Multiply it
      // from x in float, 16 columns at a time, in the x half tile's place.
      threadgroup float *sxf = (threadgroup float *)sx; // [64 tokens][MM_LDF2]
      const bool big = ovf[2 * cur + lr / MM_XG] == k0;
      const int fc = 8 * (tiitg % 2);
      for (int h = 0; h < 2; h++) {
        float4 a, b;
        mm_ld8(xr, xlive, vec, k0 + 16 * h + fc, args.K, a, b);
        if (!big) {
          a = float4(half4(a));
          b = float4(half4(b));
        }
        mm_st8(sxf + lr * MM_LDF2 + fc, a, b);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mm_mma(acc, sxf + to * MM_LDF2, MM_LDF2, sw + ro * LD + 16 * h, LD, 2);
        threadgroup_barrier(mem_flags::mem_threadgroup);
      }
    } else {
      mm_mma(acc, sx + to * LD, LD, sw + ro * LD, LD, MM_BK / 8);
    }
    if (NB == 2 && next) {
      // Step s+1 into the other buffer, which no simdgroup reads in this
      // step (its last reads, step s-1's, ended at the barrier before).
      threadgroup T *nb = tiles + (1 - cur) * BUF;
      mm_stage_w<F, T>(args, wr, sr, br, wlive, k0 + MM_BK + lc, nb + wo);
      mm_stage_x<T>(xv[0], xv[1], xv[2], xv[3], nb + xo, xovf + 2 * (1 - cur), k0 + MM_BK);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (NB == 1 && next) {
      mm_ld8(xr, xlive, vec, k0 + MM_BK + lc, args.K, xv[0], xv[1]);
      mm_ld8(xr, xlive, vec, k0 + MM_BK + lc + 8, args.K, xv[2], xv[3]);
      mm_stage_w<F, T>(args, wr, sr, br, wlive, k0 + MM_BK + lc, tiles + wo);
      mm_stage_x<T>(xv[0], xv[1], xv[2], xv[3], tiles + xo, xovf, k0 + MM_BK);
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  if (FC_mm_direct) {
    for (int i = 0; i < 4; i++) {
      for (int j = 0; j < 4; j++) {
        simdgroup_store(acc[i][j], y + (ulong)(n0 + to + 8 * i) * args.y_stride + m0 + ro + 8 * j, args.y_stride);
      }
    }
    return;
  }
  // Stage the tile [64 tokens][64 rows] in threadgroup memory (the loop
  // ended at a barrier), then store the part inside the matrix.
  threadgroup float *sc = shmem;
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      simdgroup_store(acc[i][j], sc + (to + 8 * i) * MM_BM + ro + 8 * j, MM_BM);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int idx = tiitg; idx < MM_BN * MM_BM; idx += 128) {
    const int t = idx / MM_BM, r = idx % MM_BM;
    if (n0 + t < args.N && m0 + r < args.M) {
      y[(ulong)(n0 + t) * args.y_stride + m0 + r] = sc[idx];
    }
  }
}

// Threadgroup arrays may only be declared in entry-point functions: those
// declare them (MM_TG) and pass them down.
#define MM_TG(F)                                                                                        \
  threadgroup float shmem[MM_SHMEM_FLOATS(mm_tiles<F>::t)];                                             \
  threadgroup int ovf[4]

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
// 3 MLX biases (bind W again for ggml formats), 4 x / ids, 5 y.
#define MM_PARAMS                                                                                       \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                      \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const float *x [[buffer(4)]], device float *y [[buffer(5)]],                               \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],       \
      ushort tiisg [[thread_index_in_simdgroup]], ushort sgitg [[simdgroup_index_in_threadgroup]]
#define GR_PARAMS                                                                                       \
  constant kargs_get_rows &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                    \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const int *ids [[buffer(4)]], device float *y [[buffer(5)]],                               \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],       \
      ushort ntg [[threads_per_threadgroup]]
#define MV_CALL(F) mul_mv_impl<F>(args, w, ws, wb, x, y, tgpig, tiisg, sgitg)
#define MM_CALL(F)                                                                                      \
  MM_TG(F);                                                                                             \
  mul_mm_impl<F, mm_tiles<F>::t>(args, w, ws, wb, x, y, shmem, ovf, tgpig, tiitg, sgitg)
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
