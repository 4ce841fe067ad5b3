// eltwise.metal: elementwise ops over flat f32 arrays. One thread per element;
// the host dispatches ceil(n/256) threadgroups of 256 threads.
#include <metal_stdlib>
#include "kargs.h"
using namespace metal;

// y = a + b
kernel void add_f32(constant kargs_eltwise &args [[buffer(0)]],
                    device const float *a [[buffer(1)]],
                    device const float *b [[buffer(2)]],
                    device float *y [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    y[i] = a[i] + b[i];
  }
}

// y = a * b
kernel void mul_f32(constant kargs_eltwise &args [[buffer(0)]],
                    device const float *a [[buffer(1)]],
                    device const float *b [[buffer(2)]],
                    device float *y [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    y[i] = a[i] * b[i];
  }
}

// y = alpha * a
kernel void scale_f32(constant kargs_eltwise &args [[buffer(0)]],
                      device const float *a [[buffer(1)]],
                      device float *y [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    y[i] = args.alpha * a[i];
  }
}

// y = silu(g) * u, silu(g) = g / (1 + exp(-g))
kernel void silu_mul_f32(constant kargs_eltwise &args [[buffer(0)]],
                         device const float *g [[buffer(1)]],
                         device const float *u [[buffer(2)]],
                         device float *y [[buffer(3)]],
                         uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    float x = g[i];
    y[i] = x / (1.0f + exp(-x)) * u[i];
  }
}

// erf by Abramowitz-Stegun 7.1.26 refined (max abs error 1.2e-7 in float):
// MSL has no erf.
static inline float erf_approx(float x) {
  float s = x < 0.0f ? -1.0f : 1.0f;
  float a = fabs(x);
  float t = 1.0f / (1.0f + 0.5f * a);
  // Numerical Recipes erfc: fractional error < 1.2e-7 everywhere.
  float p = -a * a - 1.26551223f +
            t * (1.00002368f +
                 t * (0.37409196f +
                      t * (0.09678418f +
                           t * (-0.18628806f +
                                t * (0.27886807f +
                                     t * (-1.13520398f +
                                          t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  float erfc = t * exp(p);
  return s * (1.0f - erfc);
}

// y = gelu(a) with the exact (erf) form: 0.5 a (1 + erf(a / sqrt 2)).
kernel void gelu_f32(constant kargs_eltwise &args [[buffer(0)]],
                     device const float *a [[buffer(1)]],
                     device float *y [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    float x = a[i];
    y[i] = 0.5f * x * (1.0f + erf_approx(x * M_SQRT1_2_F));
  }
}

// y = gelu(a) with the tanh form: 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))).
kernel void gelu_tanh_f32(constant kargs_eltwise &args [[buffer(0)]],
                          device const float *a [[buffer(1)]],
                          device float *y [[buffer(2)]],
                          uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    float x = a[i];
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    y[i] = 0.5f * x * (1.0f + precise::tanh(u));
  }
}

// y = a
kernel void copy_f32(constant kargs_eltwise &args [[buffer(0)]],
                     device const float *a [[buffer(1)]],
                     device float *y [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    y[i] = a[i];
  }
}

// y[rows[i]][c] += src[i][c] for i < n_src (y already holds x; rows are
// distinct, so no two threads write one element). Grid ceil(n_src*cols/256)
// x 256.
kernel void add_rows_f32(constant kargs_add_rows &args [[buffer(0)]],
                         device const float *src [[buffer(1)]],
                         device const int *rows [[buffer(2)]],
                         device float *y [[buffer(3)]],
                         uint i [[thread_position_in_grid]]) {
  const int r = i / args.cols, c = i % args.cols;
  if (r >= args.n_src) {
    return;
  }
  const int dst = rows[r];
  if (dst >= 0 && dst < args.rows) {
    y[(ulong)dst * args.cols + c] += src[i];
  }
}
