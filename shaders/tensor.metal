// tensor.metal: the M5 path. Prefill matmuls on Metal 4 tensor operations
// (MSL 4: <metal_tensor> and MetalPerformancePrimitives' matmul2d), which the
// M5's per-core neural accelerators run. This file is a library of its own
// (shaders.TensorLibrary), compiled with MSL 4.0 only on a GPU of family
// Apple10 (M5, A19); everything else keeps the simdgroup-matrix kernels of
// matmul.metal, which are the fallback wherever this library is absent.
//
//   mul_mm_t_<fmt>: y[n][m] = sum_k x[n][k] * W[m][k], for the prefill
//                   (N > 8). A 64-row x 128-token output tile per
//                   threadgroup of 128 threads (4 simdgroups), K step 32:
//                   each thread dequantizes 16 weights of the 64 x 32 weight
//                   tile into threadgroup memory as half, then the 4
//                   simdgroups run one matmul2d (128 x 64, k = the step's
//                   extent) of the f32 activations, read by the operation
//                   from device memory, with the half weight tile,
//                   accumulating in an f32 cooperative tensor; the tile is
//                   stored once at the end, clipped to y by the tensor's
//                   extents. Grid (ceil(N/128), ceil(M/64), 1).
//
// Binding as mul_mm_*: 0 args (kargs_matmul), 1 W (or its packed codes),
// 2 MLX scales, 3 MLX biases (bind W again for ggml formats), 4 x, 5 y.
// K must be a whole number of blocks for the block formats; f16 takes any K.
//
// Precision: weights are rounded to half once (f16 weights are exact; a
// dequantized block value is within 2^-11 relative, or 2^-25 absolute below
// half's normal range), activations stay f32, products accumulate in f32
// (relaxed_precision off). A weight beyond half's range (65504) would become
// infinite: no released checkpoint has one.
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
#include "kargs.h"
#include "quants.h"
using namespace metal;

#define MMT_BM 64  // weight rows per threadgroup
#define MMT_BN 128 // tokens per threadgroup
#define MMT_BK 32  // K step

template <typename F>
static inline void mul_mm_t_impl(constant kargs_matmul &args, device const uchar *w, device const uchar *ws,
                                 device const uchar *wb, device const float *x, device float *y,
                                 threadgroup half *sa, uint3 tgpig, ushort tiitg) {
  const int n0 = tgpig.x * MMT_BN, m0 = tgpig.y * MMT_BM;
  const int rows = min(MMT_BM, args.M - m0);
  const int toks = min(MMT_BN, args.N - n0);
  // The operation takes non-const element types; it only reads x.
  device float *xt = (device float *)x + (ulong)n0 * args.x_stride;

  // destination (128 tokens x 64 rows) = x tile (128 x k) * W tileᵀ: the
  // right operand is the weight tile as stored, [row][k], so transposed.
  constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(
      MMT_BN, MMT_BM, static_cast<int>(dynamic_extent), false, true, false,
      mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
  mpp::tensor_ops::matmul2d<desc, execution_simdgroups<4>> mm;
  auto tx0 = tensor(xt, dextents<int32_t, 2>(MMT_BK, toks), array<int, 2>({1, args.x_stride}));
  auto tw0 = tensor(sa, dextents<int32_t, 2>(MMT_BK, rows), array<int, 2>({1, MMT_BK}));
  auto acc = mm.get_destination_cooperative_tensor<decltype(tx0), decltype(tw0), float>();
  for (ushort i = 0; i < acc.get_capacity(); i++) {
    if (acc.is_valid_element(i)) {
      acc[i] = 0.0f;
    }
  }

  const int ar = tiitg / 2, ac = tiitg % 2; // this thread's W row and 16-chunk
  const int wrow = m0 + ar;
  device const uchar *wr = w + (ulong)wrow * args.row_bytes;
  device const uchar *sr = ws + (ulong)wrow * args.s_row_bytes;
  device const uchar *br = wb + (ulong)wrow * args.s_row_bytes;
  for (int k0 = 0; k0 < args.K; k0 += MMT_BK) {
    float v[16];
    const int kc = k0 + 16 * ac;
    if (wrow < args.M && kc + 16 <= args.K) {
      F::dq16(wr, sr, br, kc / 16, args.group_size, args.scale_bf16, v);
    } else {
      // Past the last row, or the tail of a row whose length is not a
      // multiple of 32 (f16 only: block formats never have one). The
      // operation reads no element outside its extents; the zeros keep the
      // tile defined all the same.
      for (int j = 0; j < 16; j++) {
        v[j] = wrow < args.M && kc + j < args.K ? F::dq1(wr, sr, br, kc + j, args.group_size, args.scale_bf16) : 0.0f;
      }
    }
    for (int j = 0; j < 16; j++) {
      sa[ar * MMT_BK + 16 * ac + j] = half(v[j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int kext = min(MMT_BK, args.K - k0);
    auto tx = tensor(xt + k0, dextents<int32_t, 2>(kext, toks), array<int, 2>({1, args.x_stride}));
    auto tw = tensor(sa, dextents<int32_t, 2>(kext, rows), array<int, 2>({1, MMT_BK}));
    mm.run(tx, tw, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  auto ty = tensor(y + (ulong)n0 * args.y_stride + m0, dextents<int32_t, 2>(rows, toks), array<int, 2>({1, args.y_stride}));
  acc.store(ty);
}

#define MMT_PARAMS                                                                                      \
  constant kargs_matmul &args [[buffer(0)]], device const uchar *w [[buffer(1)]],                      \
      device const uchar *ws [[buffer(2)]], device const uchar *wb [[buffer(3)]],                       \
      device const float *x [[buffer(4)]], device float *y [[buffer(5)]],                               \
      uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]]
// Threadgroup arrays may only be declared in entry-point functions.
#define MMT_CALL(F)                                                                                     \
  threadgroup half sa[MMT_BM * MMT_BK];                                                                 \
  mul_mm_t_impl<F>(args, w, ws, wb, x, y, sa, tgpig, tiitg)

kernel void mul_mm_t_f16(MMT_PARAMS) { MMT_CALL(fmt_f16); }
kernel void mul_mm_t_q8_0(MMT_PARAMS) { MMT_CALL(fmt_q8_0); }
kernel void mul_mm_t_q5_K(MMT_PARAMS) { MMT_CALL(fmt_q5_K); }
// q4_K and q6_K take the int8 path: tensor_q8.metal mul_mm_t8_q4_K and
// mul_mm_t8_q6_K on q8_K activations.
kernel void mul_mm_t_mlx4(MMT_PARAMS) { MMT_CALL(fmt_mlx4); }
kernel void mul_mm_t_mlx8(MMT_PARAMS) { MMT_CALL(fmt_mlx8); }
