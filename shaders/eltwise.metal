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

// y[r][c] = a[r][c] + b[c]: a bias of cols values added to every row of a
// (n = rows * cols elements).
kernel void add_bias_f32(constant kargs_eltwise &args [[buffer(0)]],
                         device const float *a [[buffer(1)]],
                         device const float *b [[buffer(2)]],
                         device float *y [[buffer(3)]],
                         uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    y[i] = a[i] + b[i % args.cols];
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

// y = x^T: x [rows][cols] (n = rows * cols, cols = args.cols), y [cols][rows].
// One thread per element of x.
kernel void transpose_f32(constant kargs_eltwise &args [[buffer(0)]],
                          device const float *x [[buffer(1)]],
                          device float *y [[buffer(2)]],
                          uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    const int rows = args.n / args.cols;
    const int r = i / args.cols, c = i % args.cols;
    y[(ulong)c * rows + r] = x[i];
  }
}

// y[r] = [a[r], b[r], a[r] * b[r], |a[r] - b[r]|] for a, b [rows][cols]
// (n = rows * cols, cols = args.cols), y [rows][4 * cols]: the matching
// features of a pair of vectors. One thread per element of a.
kernel void pair_features_f32(constant kargs_eltwise &args [[buffer(0)]],
                              device const float *a [[buffer(1)]],
                              device const float *b [[buffer(2)]],
                              device float *y [[buffer(3)]],
                              uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    const int r = i / args.cols, c = i % args.cols;
    device float *yr = y + (ulong)r * 4 * args.cols;
    const float u = a[i], v = b[i];
    yr[c] = u;
    yr[args.cols + c] = v;
    yr[2 * args.cols + c] = u * v;
    yr[3 * args.cols + c] = fabs(u - v);
  }
}

// y[s][c] = mean of x[r][c] over the rows r in [spans[2s], spans[2s+1]),
// summed in row order (n = spans * cols, cols = args.cols; the host checks
// every span is non-empty and inside x). One thread per element of y.
kernel void span_means_f32(constant kargs_eltwise &args [[buffer(0)]],
                           device const float *x [[buffer(1)]],
                           device const int *spans [[buffer(2)]],
                           device float *y [[buffer(3)]],
                           uint i [[thread_position_in_grid]]) {
  if ((int)i < args.n) {
    const int s = i / args.cols, c = i % args.cols;
    const int lo = spans[2 * s], hi = spans[2 * s + 1];
    float acc = 0.0f;
    for (int r = lo; r < hi; r++) {
      acc += x[(ulong)r * args.cols + c];
    }
    y[i] = acc / float(hi - lo);
  }
}

// Im2Col: y[(n, oy, ox)][(ch, ky, kx)] = x[n, oy*sh-ph+ky, ox*sw-pw+kx, ch]
// for x [n*h*w][c] channels-last, 0 for taps in the padding; y is
// [n*oh*ow][c*kh*kw] (the host keeps it below 2^31 values). One thread per
// element of y: consecutive threads write consecutive columns.
kernel void im2col_f32(constant kargs_im2col &args [[buffer(0)]],
                       device const float *x [[buffer(1)]],
                       device float *y [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
  const int taps = args.kh * args.kw;
  const int cols = args.c * taps;
  const int pix = args.oh * args.ow;
  if ((long)i >= (long)args.n * pix * cols) {
    return;
  }
  const int row = (int)(i / (uint)cols), col = (int)(i % (uint)cols);
  const int ch = col / taps, t = col % taps;
  const int n = row / pix, p = row % pix;
  const int iy = (p / args.ow) * args.sh - args.ph + t / args.kw;
  const int ix = (p % args.ow) * args.sw - args.pw + t % args.kw;
  float v = 0.0f;
  if (iy >= 0 && iy < args.h && ix >= 0 && ix < args.w) {
    v = x[(((ulong)n * args.h + iy) * args.w + ix) * args.c + ch];
  }
  y[i] = v;
}
