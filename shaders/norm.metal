// norm.metal: RMSNorm (the thinker's input/post-attention/final norms and the
// per-head q/k norms) and LayerNorm (the head and the encoders). One
// threadgroup per row, any multiple of 32 threads up to 1024; the host uses 256
// (32 for the per-head q/k norm of 128 elements).
#include <metal_stdlib>
#include "kargs.h"
using namespace metal;

// block_sum returns the sum of v over the threadgroup; every thread gets it.
static inline float block_sum(float v, threadgroup float *scratch, ushort tiisg, ushort sgitg, ushort nsg) {
  v = simd_sum(v);
  if (tiisg == 0) {
    scratch[sgitg] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float s = tiisg < nsg ? scratch[tiisg] : 0.0f;
  s = simd_sum(s);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return s;
}

// y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * w[c]
kernel void rms_norm_f32(constant kargs_norm &args [[buffer(0)]],
                         device const float *x [[buffer(1)]],
                         device const float *w [[buffer(2)]],
                         device float *y [[buffer(3)]],
                         uint3 tgpig [[threadgroup_position_in_grid]],
                         ushort tpitg [[thread_index_in_threadgroup]],
                         ushort tiisg [[thread_index_in_simdgroup]],
                         ushort sgitg [[simdgroup_index_in_threadgroup]],
                         ushort ntg [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  const int row = tgpig.x;
  if (row >= args.rows) {
    return; // uniform over the threadgroup
  }
  device const float *xr = x + (ulong)row * args.x_stride;
  device float *yr = y + (ulong)row * args.y_stride;
  float ss = 0.0f;
  for (int c = tpitg; c < args.cols; c += ntg) {
    ss += xr[c] * xr[c];
  }
  ss = block_sum(ss, scratch, tiisg, sgitg, ntg / 32);
  const float scale = rsqrt(ss / args.cols + args.eps);
  for (int c = tpitg; c < args.cols; c += ntg) {
    yr[c] = xr[c] * scale * w[c];
  }
}

// y[r][c] = (x[r][c] - mean) / sqrt(var + eps) * w[c] + b[c], mean and
// (biased) variance in float32; without has_bias b is not read (the host binds
// any buffer there).
kernel void layer_norm_f32(constant kargs_norm &args [[buffer(0)]],
                           device const float *x [[buffer(1)]],
                           device const float *w [[buffer(2)]],
                           device const float *b [[buffer(3)]],
                           device float *y [[buffer(4)]],
                           uint3 tgpig [[threadgroup_position_in_grid]],
                           ushort tpitg [[thread_index_in_threadgroup]],
                           ushort tiisg [[thread_index_in_simdgroup]],
                           ushort sgitg [[simdgroup_index_in_threadgroup]],
                           ushort ntg [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  const int row = tgpig.x;
  if (row >= args.rows) {
    return;
  }
  device const float *xr = x + (ulong)row * args.x_stride;
  device float *yr = y + (ulong)row * args.y_stride;
  float s = 0.0f;
  for (int c = tpitg; c < args.cols; c += ntg) {
    s += xr[c];
  }
  const float mean = block_sum(s, scratch, tiisg, sgitg, ntg / 32) / args.cols;
  float v = 0.0f;
  for (int c = tpitg; c < args.cols; c += ntg) {
    const float d = xr[c] - mean;
    v += d * d;
  }
  const float var = block_sum(v, scratch, tiisg, sgitg, ntg / 32) / args.cols;
  const float scale = rsqrt(var + args.eps);
  if (args.has_bias) {
    for (int c = tpitg; c < args.cols; c += ntg) {
      yr[c] = (xr[c] - mean) * scale * w[c] + b[c];
    }
  } else {
    for (int c = tpitg; c < args.cols; c += ntg) {
      yr[c] = (xr[c] - mean) * scale * w[c];
    }
  }
}

// block_max returns the maximum of v over the threadgroup; every thread gets it.
static inline float block_max(float v, threadgroup float *scratch, ushort tiisg, ushort sgitg, ushort nsg) {
  v = simd_max(v);
  if (tiisg == 0) {
    scratch[sgitg] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float m = tiisg < nsg ? scratch[tiisg] : -FLT_MAX;
  m = simd_max(m);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return m;
}

// y[r] = softmax(alpha * x[r][lo:hi]) over the columns [lo, hi) =
// [ranges[2r], ranges[2r+1]) of row r, 0 in its other columns (x, y
// [rows][cols], n = rows * cols, cols = args.cols; the host checks every
// range is non-empty). One threadgroup per row.
kernel void softmax_f32(constant kargs_eltwise &args [[buffer(0)]],
                        device const float *x [[buffer(1)]],
                        device const int *ranges [[buffer(2)]],
                        device float *y [[buffer(3)]],
                        uint3 tgpig [[threadgroup_position_in_grid]],
                        ushort tpitg [[thread_index_in_threadgroup]],
                        ushort tiisg [[thread_index_in_simdgroup]],
                        ushort sgitg [[simdgroup_index_in_threadgroup]],
                        ushort ntg [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  const int row = tgpig.x;
  if (row >= args.n / args.cols) {
    return; // uniform over the threadgroup
  }
  const int lo = ranges[2 * row], hi = ranges[2 * row + 1];
  device const float *xr = x + (ulong)row * args.cols;
  device float *yr = y + (ulong)row * args.cols;
  float m = -FLT_MAX;
  for (int c = lo + tpitg; c < hi; c += ntg) {
    m = max(m, args.alpha * xr[c]);
  }
  m = block_max(m, scratch, tiisg, sgitg, ntg / 32);
  float s = 0.0f;
  for (int c = lo + tpitg; c < hi; c += ntg) {
    const float e = exp(args.alpha * xr[c] - m);
    yr[c] = e;
    s += e;
  }
  s = block_sum(s, scratch, tiisg, sgitg, ntg / 32);
  for (int c = lo + tpitg; c < hi; c += ntg) {
    yr[c] = yr[c] / s; // this thread's own value
  }
  for (int c = tpitg; c < args.cols; c += ntg) {
    if (c < lo || c >= hi) {
      yr[c] = 0.0f;
    }
  }
}

// y[r] = sum_c a[r][c] * b[r][c] for a, b [rows][cols] (x_stride elements
// between rows of a and b), y [rows][1]. One threadgroup per row.
kernel void row_dots_f32(constant kargs_norm &args [[buffer(0)]],
                         device const float *a [[buffer(1)]],
                         device const float *b [[buffer(2)]],
                         device float *y [[buffer(3)]],
                         uint3 tgpig [[threadgroup_position_in_grid]],
                         ushort tpitg [[thread_index_in_threadgroup]],
                         ushort tiisg [[thread_index_in_simdgroup]],
                         ushort sgitg [[simdgroup_index_in_threadgroup]],
                         ushort ntg [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  const int row = tgpig.x;
  if (row >= args.rows) {
    return;
  }
  device const float *ar = a + (ulong)row * args.x_stride;
  device const float *br = b + (ulong)row * args.x_stride;
  float s = 0.0f;
  for (int c = tpitg; c < args.cols; c += ntg) {
    s += ar[c] * br[c];
  }
  s = block_sum(s, scratch, tiisg, sgitg, ntg / 32);
  if (tpitg == 0) {
    y[row] = s;
  }
}
