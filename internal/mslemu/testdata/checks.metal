// checks.metal: probe kernels for what the emulator must catch or model as a
// GPU would (checks_test.go). Each probe that must be reported has a correct
// twin that must run clean.
#include <metal_stdlib>
using namespace metal;

// ---- 1. simd-group functions in divergent branches ----------------------------
// Only the lanes active in a branch take part in a collective there. out holds
// 8 results per thread.
kernel void probe_simd_branch(device const float *x [[buffer(0)]],
                              device float *out [[buffer(1)]],
                              uint tid [[thread_index_in_threadgroup]],
                              ushort lane [[thread_index_in_simdgroup]]) {
  const float v = x[tid];
  device float *o = out + 8 * tid;
  // if/else, a different collective on each side.
  if (lane < 12) {
    o[0] = simd_sum(v);
  } else {
    o[0] = simd_max(v);
  }
  // An if without else, then a collective of every lane.
  if (lane % 3 == 0) {
    o[1] = simd_prefix_exclusive_sum(v);
  }
  o[2] = simd_sum(v);
  // A loop whose trip count depends on the lane: iteration i combines the
  // lanes still in the loop.
  float acc = 0.0f;
  for (uint i = 0; i <= lane % 4; i++) {
    acc += simd_sum(v + float(i));
  }
  o[3] = acc;
  if (lane >= 16) {
    o[4] = simd_shuffle_xor(v, 1);
  } else {
    o[4] = simd_broadcast(v, 3);
  }
  if (lane & 1) {
    o[5] = simd_all(v > -2.0f) ? 1.0f : 0.0f;
  } else {
    o[5] = simd_any(v > 2.5f) ? 1.0f : 0.0f;
  }
  // After an early return, the remaining lanes.
  if (lane >= 20) {
    o[6] = -1.0f;
    o[7] = -1.0f;
    return;
  }
  o[6] = simd_min(v);
  o[7] = simd_prefix_inclusive_sum(v);
}

// ---- 2. barriers reached from different call sites ------------------------------
static inline void sync_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }

// mode 0 (the twin): one barrier after the branch. mode 1: a barrier in each
// branch. mode 2: each branch calls the same helper holding the barrier.
// mode 3: simdgroup_barrier in a branch only. mode 4: simdgroup_barrier in
// each branch.
kernel void probe_barrier(constant int &mode [[buffer(0)]],
                          device float *out [[buffer(1)]],
                          ushort tid [[thread_index_in_threadgroup]],
                          ushort lane [[thread_index_in_simdgroup]]) {
  threadgroup float buf[64];
  if (mode == 0) {
    if (tid < 32) {
      buf[tid] = 1.0f;
    } else {
      buf[tid] = 2.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = buf[63 - tid];
  } else if (mode == 1) {
    if (tid < 32) {
      buf[tid] = 1.0f;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      out[tid] = buf[63 - tid];
    } else {
      buf[tid] = 2.0f;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      out[tid] = buf[63 - tid] + 1.0f;
    }
  } else if (mode == 2) {
    if (tid < 32) {
      buf[tid] = 1.0f;
      sync_all();
      out[tid] = buf[63 - tid];
    } else {
      buf[tid] = 2.0f;
      sync_all();
      out[tid] = buf[63 - tid] + 1.0f;
    }
  } else if (mode == 3) {
    if (lane < 16) {
      simdgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[tid] = simd_sum(1.0f);
  } else {
    if (lane < 16) {
      out[tid] = 1.0f;
      simdgroup_barrier(mem_flags::mem_threadgroup);
    } else {
      out[tid] = 2.0f;
      simdgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
}

// ---- 3. reading another thread's threadgroup slot without a barrier ---------------
// Each thread reads its neighbour's slot: with barrier == 0 the read is not
// ordered after the write.
kernel void probe_race(device const float *x [[buffer(0)]],
                       device float *out [[buffer(1)]],
                       constant int &barrier [[buffer(2)]],
                       ushort tid [[thread_index_in_threadgroup]],
                       ushort ntg [[threads_per_threadgroup]]) {
  threadgroup float buf[256];
  buf[tid] = x[tid] * 2.0f;
  if (barrier != 0) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[tid] = buf[(tid + 1) % ntg];
}

// ---- 4. the 32 KiB threadgroup-memory total ------------------------------------
// scratch_sum declares 8 KiB of its own; with the kernel's 16 KiB that is
// 24 KiB before any dynamic threadgroup memory.
static inline float scratch_sum(float v, ushort tid) {
  threadgroup float part[2048];
  part[tid] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float s = 0.0f;
  for (int i = 0; i < 32; i++) {
    s += part[i];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return s;
}

kernel void probe_tgmem(device float *out [[buffer(0)]],
                        threadgroup float *dyn [[threadgroup(0)]],
                        ushort tid [[thread_index_in_threadgroup]]) {
  threadgroup float big[4096];
  big[tid] = float(tid);
  dyn[tid] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = scratch_sum(big[31 - tid] + dyn[tid], tid);
}

// 36 KiB of static threadgroup arrays: over the limit whatever the host does.
kernel void probe_tgmem_static(device float *out [[buffer(0)]],
                               ushort tid [[thread_index_in_threadgroup]]) {
  threadgroup float a[6144];
  threadgroup float b[3072];
  a[tid] = 1.0f;
  b[tid] = 2.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = a[tid] + b[tid];
}

// ---- 5. half arithmetic rounds to fp16 after every operation ---------------------
kernel void probe_half(device const half *x [[buffer(0)]],
                       device half *out [[buffer(1)]],
                       uint tid [[thread_position_in_grid]]) {
  const half a = x[4 * tid], b = x[4 * tid + 1], c = x[4 * tid + 2], d = x[4 * tid + 3];
  out[4 * tid] = a + b + c;
  out[4 * tid + 1] = a * b / c;
  const half4 v = half4(a, b, c, d);
  const half4 w = v * v + v;
  out[4 * tid + 2] = w.x + w.y;
  out[4 * tid + 3] = (a - b) * (c + d);
}

// ---- 6. simdgroup-matrix operations whose arguments depend on the lane ---------------
// out[sg] = a[sg] * a[sg] for each simdgroup's 8x8 matrix. mode 0 (the twin):
// uniform addresses. mode 1: the load address depends on the lane. mode 2:
// the row stride does. mode 3: a matrix filled with the lane's value. mode 4:
// the store address depends on the lane. mode 5: half the lanes load.
kernel void probe_mma(constant int &mode [[buffer(0)]],
                      device const float *a [[buffer(1)]],
                      device float *out [[buffer(2)]],
                      ushort lane [[thread_index_in_simdgroup]],
                      ushort sg [[simdgroup_index_in_threadgroup]]) {
  device const float *src = a + 64 * sg;
  device float *dst = out + 64 * sg;
  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  simdgroup_float8x8 p;
  if (mode == 1) {
    simdgroup_load(m, src + (lane & 1), 8);
  } else if (mode == 2) {
    simdgroup_load(m, src, 8 + (lane & 1));
  } else if (mode == 3) {
    m = make_filled_simdgroup_matrix<float, 8, 8>(float(lane));
  } else if (mode == 5) {
    if (lane < 16) {
      simdgroup_load(m, src, 8);
    }
  } else {
    simdgroup_load(m, src, 8);
  }
  simdgroup_multiply(p, m, m);
  simdgroup_store(p, dst + (mode == 4 ? lane % 2 : 0), 8);
}
