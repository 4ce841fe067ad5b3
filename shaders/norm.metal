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

// y[r][c] = (x[r][c] - mean) / sqrt(var + eps) * w[c] + b[c]
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
  for (int c = tpitg; c < args.cols; c += ntg) {
    yr[c] = (xr[c] - mean) * scale * w[c] + b[c];
  }
}
