// rope.metal: rotary position embedding, NeoX pairing (dim i rotates with
// i + head_dim/2), from x[token][head][head_dim] into y (which may be x).
// Frequency i reads position stream stream[i] of pos[token][3] and inverse
// frequency inv_freq[i]; the host fills both tables (plain RoPE: every stream
// 0; the thinker's interleaved M-RoPE: THW THW ... TTTT), because at 64k
// positions one ulp of inv_freq moves the angle by ~4e-3 rad, so it must be
// computed exactly as the reference computes it. One thread per (pair, head,
// token): grid (ceil(head_dim/2 / 32), heads, tokens) x 32.
#include <metal_stdlib>
#include "kargs.h"
using namespace metal;

kernel void rope_f32(constant kargs_rope &args [[buffer(0)]],
                     device const float *x [[buffer(1)]],
                     device const int *pos [[buffer(2)]],
                     device const float *inv_freq [[buffer(3)]],
                     device const int *stream [[buffer(4)]],
                     device float *y [[buffer(5)]],
                     uint3 tpig [[thread_position_in_grid]]) {
  const int half_dim = args.head_dim / 2;
  const int i = tpig.x; // frequency 0..half_dim-1
  const int h = tpig.y; // head
  const int t = tpig.z; // token
  if (i >= half_dim || h >= args.heads || t >= args.tokens) {
    return;
  }
  const int p = pos[3 * t + stream[i]];
  // The angle is the float product, like the reference.
  const float ang = float(p) * inv_freq[i];
  const float cs = precise::cos(ang);
  const float sn = precise::sin(ang);
  device const float *xv = x + (ulong)t * args.x_stride + (ulong)h * args.head_dim;
  device float *yv = y + (ulong)t * args.y_stride + (ulong)h * args.head_dim;
  const float a = xv[i];
  const float b = xv[i + half_dim];
  yv[i] = a * cs - b * sn;
  yv[i + half_dim] = b * cs + a * sn;
}
