// frag.metal: thread_elements() of 8x8 simdgroup matrices (frag_test.go).
#include <metal_stdlib>
using namespace metal;

// probe_frag, per simdgroup sg of the threadgroup (a at a + 64*sg, out at
// out + 320*sg):
//   out[0:64]    each lane's two elements of a as loaded, at 2*lane, 2*lane+1
//   out[64:128]  w stored, w being 1000*lane + i written through each
//                lane's thread_elements()[i]
//   out[128:192] w·a
//   out[192:256] a with the elements of lanes l % 3 == 0 negated (a
//                conditional write; every lane takes thread_elements())
//   out[256:320] that matrix times a
// mode 1: only lanes below 16 take thread_elements() before the product,
// which the emulator must report.
kernel void probe_frag(constant int &mode [[buffer(0)]],
                       device const float *a [[buffer(1)]],
                       device float *out [[buffer(2)]],
                       ushort lane [[thread_index_in_simdgroup]],
                       ushort sg [[simdgroup_index_in_threadgroup]]) {
  device const float *src = a + 64 * sg;
  device float *dst = out + 320 * sg;
  simdgroup_float8x8 ma;
  simdgroup_load(ma, src, 8);
  const float2 mine = ma.thread_elements();
  dst[2 * lane] = mine.x;
  dst[2 * lane + 1] = mine.y;

  simdgroup_float8x8 mw = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  if (mode == 1) {
    if (lane < 16) {
      mw.thread_elements() = float2(1.0f, 2.0f);
    }
  } else {
    thread float2 &w = mw.thread_elements();
    w[0] = 1000.0f * lane;
    w[1] = 1000.0f * lane + 1.0f;
    simdgroup_store(mw, dst + 64, 8);
  }
  simdgroup_float8x8 p;
  simdgroup_multiply(p, mw, ma);
  simdgroup_store(p, dst + 128, 8);

  simdgroup_float8x8 mn = ma;
  thread float2 &n = mn.thread_elements();
  if (lane % 3 == 0) {
    n = -n;
  }
  simdgroup_store(mn, dst + 192, 8);
  simdgroup_multiply(p, mn, ma);
  simdgroup_store(p, dst + 256, 8);
}
