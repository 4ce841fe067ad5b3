// probe.metal: entry points that exercise the shim itself (emu_test.go).
#include <metal_stdlib>
using namespace metal;

constant int FC_bias [[function_constant(3)]];

// Simd-group collectives over a partial last simdgroup (threads = 40).
kernel void probe_simd(device const float *x [[buffer(0)]],
                       device float *out [[buffer(1)]],
                       uint tid [[thread_index_in_threadgroup]],
                       ushort lane [[thread_index_in_simdgroup]]) {
  const float v = x[tid];
  device float *o = out + 8 * tid;
  o[0] = simd_sum(v);
  o[1] = simd_max(v);
  o[2] = simd_min(v);
  o[3] = simd_prefix_exclusive_sum(v);
  o[4] = simd_shuffle_down(v, 3);
  o[5] = simd_shuffle_xor(v, 5);
  o[6] = simd_broadcast(v, 2);
  o[7] = simd_prefix_inclusive_sum(v) + float(FC_bias);
}

// Threadgroup memory and barriers: reverse the group's values.
kernel void probe_tg(device const float *x [[buffer(0)]],
                     device float *out [[buffer(1)]],
                     uint3 tgpig [[threadgroup_position_in_grid]],
                     ushort tid [[thread_index_in_threadgroup]],
                     ushort ntg [[threads_per_threadgroup]]) {
  threadgroup float buf[256];
  const uint base = tgpig.x * ntg;
  buf[tid] = x[base + tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[base + tid] = buf[ntg - 1 - tid];
}

// Vector construction and conversion: MSL semantics, not clang bit-casts.
kernel void probe_vec(device float *out [[buffer(0)]],
                      uint tid [[thread_position_in_grid]]) {
  if (tid != 0) {
    return;
  }
  const int4 i = int4(1, -2, 3, 4);
  const float4 f = float4(i);
  const float2 a = float2(5.0f);
  const float4 c = float4(a, 6.0f, 7.0f);
  const half2 h = half2(float2(0.5f, 1.5f));
  out[0] = f.x + f.y + f.z + f.w;          // 6
  out[1] = c.x + c.y + c.z + c.w;          // 23
  out[2] = float(h.x) + float(h.y);        // 2
  out[3] = dot(f, float4(1.0f));           // 6
  out[4] = as_type<float>(0x3f800000u);    // 1
}

// Device atomics across threadgroups.
kernel void probe_atomic(device atomic_uint *counter [[buffer(0)]],
                         uint tid [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
}

// A barrier under divergent control flow: undefined on the GPU, an error here.
kernel void probe_divergent(device float *out [[buffer(0)]],
                            ushort tid [[thread_index_in_threadgroup]]) {
  if (tid < 16) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[tid] = 1.0f;
}

// Reads threadgroup memory nobody wrote: NaN in the emulation.
kernel void probe_uninit(device float *out [[buffer(0)]],
                         ushort tid [[thread_index_in_threadgroup]]) {
  threadgroup float buf[64];
  if (tid == 0) {
    buf[0] = 1.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = buf[tid];
}
