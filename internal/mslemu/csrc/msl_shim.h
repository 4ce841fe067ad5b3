// msl_shim.h: just enough of the Metal Shading Language, as C++, to compile
// the kernels in shaders/*.metal with clang++-19 on a machine without Metal
// and run them on CPU fibers (see runtime.cpp). It is included before the
// (lightly rewritten) .metal source; see internal/mslemu (Build) for the rewrite and
// shaders/README.md for the subset of MSL it emulates faithfully.
//
// Model: every GPU thread of a threadgroup is a fiber; fibers of one
// threadgroup run cooperatively on one OS thread, so `threadgroup` arrays are
// `static thread_local`. Simd-group collectives publish each lane's value in a
// per-simdgroup exchange area; the runtime lets the lanes that reach the same
// call site take part (the active lanes of a branch, as on the GPU).
// threadgroup_barrier synchronises every thread of the group at one call site.
// simdgroup_matrix values are held in full by every lane, and the runtime
// checks that every lane loads, stores and computes the same matrix. `half`
// is _Float16 compiled with -fexcess-precision=16: every operation rounds to
// fp16, as on the GPU, not once per expression.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>
#include <type_traits>

#define MSL_SHIM 1

// ---- address spaces and function qualifiers --------------------------------
#define kernel
#define device
#define constant
#define thread
#define threadgroup
#define METAL_FUNC inline

// ---- scalar types ------------------------------------------------------------
typedef _Float16 half;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef uint64_t ulong;

// ---- vector types (ext_vector_type gives swizzles and component-wise ops) ----
#define MSL_VEC(T, N) typedef T T##N __attribute__((ext_vector_type(N)));
#define MSL_VECS(T) MSL_VEC(T, 2) MSL_VEC(T, 3) MSL_VEC(T, 4)
MSL_VECS(float)
MSL_VECS(half)
MSL_VECS(int)
MSL_VECS(uint)
MSL_VECS(short)
MSL_VECS(ushort)
MSL_VECS(char)
MSL_VECS(uchar)
MSL_VECS(ulong)
#undef MSL_VECS
#undef MSL_VEC

namespace msl {

template <class T> struct vinfo {
  static constexpr int n = 0;
  typedef T elem;
};
#define MSL_VINFO(T, N)                                                        \
  template <> struct vinfo<T##N> {                                             \
    static constexpr int n = N;                                                \
    typedef T elem;                                                            \
  };
#define MSL_VINFOS(T) MSL_VINFO(T, 2) MSL_VINFO(T, 3) MSL_VINFO(T, 4)
MSL_VINFOS(float)
MSL_VINFOS(half)
MSL_VINFOS(int)
MSL_VINFOS(uint)
MSL_VINFOS(short)
MSL_VINFOS(ushort)
MSL_VINFOS(char)
MSL_VINFOS(uchar)
MSL_VINFOS(ulong)
#undef MSL_VINFOS
#undef MSL_VINFO

template <class T> constexpr bool is_vec = vinfo<T>::n > 0;

template <class E, class A> inline void put(E *buf, int &i, A a) {
  if constexpr (is_vec<A>) {
    for (int k = 0; k < vinfo<A>::n; k++)
      buf[i++] = (E)a[k];
  } else {
    buf[i++] = (E)a;
  }
}

// make builds an MSL vector the way its constructor syntax does: a splat of
// one scalar, a component-wise conversion of one vector of the same length, or
// the concatenation of scalars and vectors.
template <class V, class... A> inline V make(A... a) {
  typedef typename vinfo<V>::elem E;
  constexpr int N = vinfo<V>::n;
  if constexpr (sizeof...(A) == 0) {
    V v = (E)0;
    return v;
  } else if constexpr (sizeof...(A) == 1 && (!is_vec<A> && ...)) {
    E e = (E)(a, ...);
    V v = e;
    return v;
  } else if constexpr (sizeof...(A) == 1 && (is_vec<A> && ...)) {
    static_assert(((vinfo<A>::n == N) && ...), "vector conversion between different lengths");
    return __builtin_convertvector((a, ...), V);
  } else {
    E buf[N];
    int i = 0;
    (put(buf, i, a), ...);
    if (i != N)
      __builtin_trap();
    V v;
    for (int k = 0; k < N; k++)
      v[k] = buf[k];
    return v;
  }
}

// check_aligned stops the run when a wide load (shaders/quants.h ld_u16,
// ld_u32) is given an address that is not a multiple of its size: x86 would
// load it anyway, a GPU may not, so the emulation must not hide it.
inline void check_aligned(const void *p, unsigned long n, const char *what) {
  if ((reinterpret_cast<uintptr_t>(p) & (n - 1)) != 0) {
    fprintf(stderr, "msl-emu: misaligned %s at %p (needs %lu-byte alignment)\n", what, p, n);
    fflush(stderr);
    _exit(3);
  }
}

} // namespace msl

#define float2(...) msl::make<float2>(__VA_ARGS__)
#define float3(...) msl::make<float3>(__VA_ARGS__)
#define float4(...) msl::make<float4>(__VA_ARGS__)
#define half2(...) msl::make<half2>(__VA_ARGS__)
#define half3(...) msl::make<half3>(__VA_ARGS__)
#define half4(...) msl::make<half4>(__VA_ARGS__)
#define int2(...) msl::make<int2>(__VA_ARGS__)
#define int3(...) msl::make<int3>(__VA_ARGS__)
#define int4(...) msl::make<int4>(__VA_ARGS__)
#define uint2(...) msl::make<uint2>(__VA_ARGS__)
#define uint3(...) msl::make<uint3>(__VA_ARGS__)
#define uint4(...) msl::make<uint4>(__VA_ARGS__)
#define ulong2(...) msl::make<ulong2>(__VA_ARGS__)
#define short2(...) msl::make<short2>(__VA_ARGS__)
#define short4(...) msl::make<short4>(__VA_ARGS__)
#define ushort2(...) msl::make<ushort2>(__VA_ARGS__)
#define ushort4(...) msl::make<ushort4>(__VA_ARGS__)
#define char4(...) msl::make<char4>(__VA_ARGS__)
#define uchar4(...) msl::make<uchar4>(__VA_ARGS__)

// ---- constants -------------------------------------------------------------
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX 3.402823466e+38f
#define FLT_MIN 1.175494351e-38f
#define HALF_MAX ((half)65504.0f)
#define M_PI_F 3.14159265358979323846f
#define M_LOG2E_F 1.44269504088896340736f
#define M_SQRT1_2_F 0.70710678118654752440f

namespace metal {

template <class T, class F> inline T vmap(T v, F f) {
  if constexpr (msl::is_vec<T>) {
    T r;
    for (int k = 0; k < msl::vinfo<T>::n; k++)
      r[k] = f(v[k]);
    return r;
  } else {
    return f(v);
  }
}

template <class T> struct real_of {
  typedef T type;
};

#define MSL_UNARY(name, fexpr)                                                 \
  inline float name(float x) { return fexpr; }                                 \
  inline half name(half h) {                                                   \
    float x = (float)h;                                                        \
    return (half)(fexpr);                                                      \
  }                                                                            \
  template <class V, class = std::enable_if_t<msl::is_vec<V>>>                 \
  inline V name(V v) {                                                         \
    return vmap(v, [](typename msl::vinfo<V>::elem e) { return name(e); });    \
  }

MSL_UNARY(exp, __builtin_expf(x))
MSL_UNARY(exp2, __builtin_exp2f(x))
MSL_UNARY(log, __builtin_logf(x))
MSL_UNARY(log2, __builtin_log2f(x))
MSL_UNARY(sqrt, __builtin_sqrtf(x))
MSL_UNARY(rsqrt, 1.0f / __builtin_sqrtf(x))
MSL_UNARY(tanh, __builtin_tanhf(x))
MSL_UNARY(sin, __builtin_sinf(x))
MSL_UNARY(cos, __builtin_cosf(x))
MSL_UNARY(fabs, __builtin_fabsf(x))
MSL_UNARY(floor, __builtin_floorf(x))
MSL_UNARY(ceil, __builtin_ceilf(x))
MSL_UNARY(round, __builtin_roundf(x))
MSL_UNARY(rint, __builtin_rintf(x))
MSL_UNARY(trunc, __builtin_truncf(x))
#undef MSL_UNARY

inline float pow(float x, float y) { return __builtin_powf(x, y); }
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline float fmax(float a, float b) { return __builtin_fmaxf(a, b); }
inline float fmin(float a, float b) { return __builtin_fminf(a, b); }

template <class T> inline T abs(T x) {
  return vmap(x, [](auto e) { return e < 0 ? (decltype(e))-e : e; });
}
template <class T> inline T min(T a, T b) {
  if constexpr (msl::is_vec<T>) {
    T r;
    for (int k = 0; k < msl::vinfo<T>::n; k++)
      r[k] = a[k] < b[k] ? a[k] : b[k];
    return r;
  } else {
    return a < b ? a : b;
  }
}
template <class T> inline T max(T a, T b) {
  if constexpr (msl::is_vec<T>) {
    T r;
    for (int k = 0; k < msl::vinfo<T>::n; k++)
      r[k] = a[k] > b[k] ? a[k] : b[k];
    return r;
  } else {
    return a > b ? a : b;
  }
}
template <class T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }

template <class V> inline typename msl::vinfo<V>::elem dot(V a, V b) {
  typename msl::vinfo<V>::elem s = 0;
  for (int k = 0; k < msl::vinfo<V>::n; k++)
    s += a[k] * b[k];
  return s;
}

// as_type reinterprets the bits of a value of the same size.
template <class To, class From> inline To as_type(From f) {
  static_assert(sizeof(To) == sizeof(From), "as_type between different sizes");
  return __builtin_bit_cast(To, f);
}

namespace fast {
using metal::exp;
using metal::exp2;
using metal::log;
using metal::rsqrt;
using metal::sqrt;
using metal::tanh;
using metal::sin;
using metal::cos;
} // namespace fast
namespace precise {
using metal::exp;
using metal::exp2;
using metal::log;
using metal::rsqrt;
using metal::sqrt;
using metal::tanh;
using metal::sin;
using metal::cos;
} // namespace precise

// ---- synchronisation (implemented by the runtime) ----------------------------
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };

} // namespace metal

// Every barrier, collective and simdgroup-matrix operation passes its call
// site (source position of the call in the kernel, through these default
// arguments) to the runtime, which tells branches and call sites apart by it.
#define MSL_SITE_PARAMS                                                                                          \
  const char *msl_file = __builtin_FILE(), unsigned msl_line = __builtin_LINE(), unsigned msl_col = __builtin_COLUMN()
#define MSL_SITE msl_file, msl_line, msl_col

// The runtime's entry points are convergent: the compiler must not duplicate
// a call into branches (tail duplication, loop unswitching), which would make
// one call site of the source two.
#define MSL_CONVERGENT __attribute__((convergent))
extern "C" {
MSL_CONVERGENT void msl_rt_threadgroup_barrier(const char *file, unsigned line, unsigned col);
// msl_rt_simd_op publishes size bytes of x (kind 0, a collective) or nothing
// (kind 1, simdgroup_barrier), waits until the lanes of the simdgroup taking
// part in this call are known, and returns the simdgroup's exchange area (32
// lanes x 64 bytes, each participant's value in its lane's slot), this lane's
// index and the mask of participating lanes.
MSL_CONVERGENT unsigned char *msl_rt_simd_op(const void *x, unsigned size, int kind, const char *file, unsigned line,
                                             unsigned col, unsigned *lane, unsigned *mask);
// msl_rt_mma checks one simdgroup-matrix operation against the other lanes'
// (kind 0 load, 1 store: p, elements per row a, origin b = x | y << 32,
// transpose c; kind 2 multiply: n bytes of the product at p).
MSL_CONVERGENT void msl_rt_mma(int kind, const void *p, unsigned long a, unsigned long b, unsigned long c,
                               unsigned long n, const char *file, unsigned line, unsigned col);
// msl_rt_poison fills a threadgroup array with 0xff bytes (NaN) once per
// threadgroup run: *gen remembers the run that last did it.
void msl_rt_poison(void *p, unsigned long n, unsigned long *gen);
}

namespace metal {

inline void threadgroup_barrier(mem_flags, MSL_SITE_PARAMS) { msl_rt_threadgroup_barrier(MSL_SITE); }
inline void simdgroup_barrier(mem_flags, MSL_SITE_PARAMS) {
  unsigned lane, mask;
  msl_rt_simd_op(nullptr, 0, 1, MSL_SITE, &lane, &mask);
}

namespace detail {
// simd_collective publishes x in this lane's slot and waits for the lanes
// taking part (those that reach this call site together: the active lanes of
// the branch), then combines the slots of the lanes in the mask.
template <class T, class F> inline T simd_collective(T x, F combine, const char *file, unsigned line, unsigned col) {
  static_assert(sizeof(T) <= 64, "simd value too large");
  unsigned lane, mask;
  unsigned char *slots = msl_rt_simd_op(&x, sizeof(T), 0, file, line, col, &lane, &mask);
  return combine(slots, lane, mask);
}
template <class T> inline T slot(unsigned char *slots, unsigned i) {
  T v;
  memcpy(&v, slots + 64 * i, sizeof(T));
  return v;
}
inline bool live(unsigned mask, unsigned i) { return i < 32 && ((mask >> i) & 1u); }
template <class T, class Op> inline T reduce(unsigned char *s, unsigned mask, Op op) {
  bool first = true;
  T r{};
  for (unsigned i = 0; i < 32; i++)
    if (live(mask, i)) {
      r = first ? slot<T>(s, i) : op(r, slot<T>(s, i));
      first = false;
    }
  return r;
}
} // namespace detail

template <class T> inline T simd_sum(T x, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x, [](unsigned char *s, unsigned, unsigned m) { return detail::reduce<T>(s, m, [](T a, T b) { return a + b; }); },
      MSL_SITE);
}
template <class T> inline T simd_max(T x, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [](unsigned char *s, unsigned, unsigned m) { return detail::reduce<T>(s, m, [](T a, T b) { return max(a, b); }); },
      MSL_SITE);
}
template <class T> inline T simd_min(T x, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [](unsigned char *s, unsigned, unsigned m) { return detail::reduce<T>(s, m, [](T a, T b) { return min(a, b); }); },
      MSL_SITE);
}
template <class T> inline T simd_prefix_exclusive_sum(T x, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [](unsigned char *s, unsigned lane, unsigned m) {
        T r = 0;
        for (unsigned i = 0; i < lane; i++)
          if (detail::live(m, i))
            r += detail::slot<T>(s, i);
        return r;
      },
      MSL_SITE);
}
template <class T> inline T simd_prefix_inclusive_sum(T x, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [](unsigned char *s, unsigned lane, unsigned m) {
        T r = 0;
        for (unsigned i = 0; i <= lane; i++)
          if (detail::live(m, i))
            r += detail::slot<T>(s, i);
        return r;
      },
      MSL_SITE);
}
// Reading an inactive lane is undefined in MSL; the emulation returns the
// caller's own value there.
template <class T> inline T simd_shuffle(T x, ushort src, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x, [src, x](unsigned char *s, unsigned, unsigned m) { return detail::live(m, src) ? detail::slot<T>(s, src) : x; },
      MSL_SITE);
}
template <class T> inline T simd_broadcast(T x, ushort src, MSL_SITE_PARAMS) { return simd_shuffle(x, src, MSL_SITE); }
template <class T> inline T simd_shuffle_down(T x, ushort d, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [d, x](unsigned char *s, unsigned lane, unsigned m) {
        return detail::live(m, lane + d) ? detail::slot<T>(s, lane + d) : x;
      },
      MSL_SITE);
}
template <class T> inline T simd_shuffle_up(T x, ushort d, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [d, x](unsigned char *s, unsigned lane, unsigned m) {
        return lane >= d && detail::live(m, lane - d) ? detail::slot<T>(s, lane - d) : x;
      },
      MSL_SITE);
}
template <class T> inline T simd_shuffle_xor(T x, ushort k, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      x,
      [k, x](unsigned char *s, unsigned lane, unsigned m) {
        return detail::live(m, lane ^ k) ? detail::slot<T>(s, lane ^ k) : x;
      },
      MSL_SITE);
}
inline bool simd_any(bool b, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      b,
      [](unsigned char *s, unsigned, unsigned m) {
        return detail::reduce<bool>(s, m, [](bool a, bool c) { return a || c; });
      },
      MSL_SITE);
}
inline bool simd_all(bool b, MSL_SITE_PARAMS) {
  return detail::simd_collective(
      b,
      [](unsigned char *s, unsigned, unsigned m) {
        return detail::reduce<bool>(s, m, [](bool a, bool c) { return a && c; });
      },
      MSL_SITE);
}

// ---- simdgroup matrices ------------------------------------------------------
// Every lane holds the whole matrix (row-major); loads read it whole, stores
// write it whole, products are computed in float by every lane. The runtime
// compares each lane's operation with the other lanes' (msl_rt_mma): a load or
// store whose address, stride, origin or transpose depends on the lane, or a
// product that differs between lanes, is an error, since on the GPU each lane
// holds only its own elements of one matrix shared by the simdgroup.
//
// thread_elements() (8x8 matrices) gives a lane its own two elements, as on
// the GPU, where the 64 elements are spread over the 32 lanes. The mapping
// is the one MLX's steel kernels build their fragments on (BaseMMAFrag::
// get_coord in mlx/backend/metal/kernels/steel/{gemm,attn}/mma.h): lane l
// holds row (l/4 & 4) + (l/2 % 4), columns c and c+1 with
// c = (l/4 & 2)*2 + (l%2)*2 (rows 0-3 in lanes 0-15, rows 4-7 in lanes
// 16-31; a row's 8 elements in the lanes l, l^1, l^8, l^9). Here it is a
// reference into the lane's full copy; a write through it makes the copies
// differ, so the matrix is marked split and the next operation that reads
// it as a whole (a product, a store) first gathers every lane's two
// elements (detail::mma_gather, one collective of the simdgroup at that
// operation). thread_elements() must then be called by every lane of the
// simdgroup (as every simdgroup-matrix operation is); the writes through
// it may be conditional.
template <class T, int R, int C> struct simdgroup_matrix {
  // mutable: gathering a split matrix (in a product or store, which take
  // their operands as const references) completes the caller's copy in
  // place, once, without changing the lane's own elements.
  alignas(2 * sizeof(T)) mutable T e[R * C];
  mutable bool split = false; // a lane's thread_elements() may have changed its own elements
  typedef T elem2 __attribute__((ext_vector_type(2)));
  elem2 &thread_elements();
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

} // namespace metal
extern "C" {
void msl_rt_thread(unsigned *index, unsigned *nthreads);
[[noreturn]] void msl_rt_fail(const char *msg);
}
namespace metal {
namespace detail {
// frag_coord is the row and first column of lane l's two elements of an
// 8x8 simdgroup matrix (see thread_elements above).
inline void frag_coord(unsigned l, unsigned *row, unsigned *col) {
  *row = ((l / 4) & 4) + (l / 2) % 4;
  *col = ((l / 4) & 2) * 2 + (l % 2) * 2;
}
inline unsigned sim_lane() {
  unsigned index, n;
  msl_rt_thread(&index, &n);
  return index % 32;
}
// mma_gather rebuilds a split matrix from each lane's own two elements.
template <class T, int R, int C> inline void mma_gather(const simdgroup_matrix<T, R, C> &m, const char *file, unsigned line,
                                                       unsigned col) {
  if (!m.split)
    return;
  static_assert(R == 8 && C == 8, "thread_elements() is emulated for 8x8 matrices");
  unsigned index, n;
  msl_rt_thread(&index, &n);
  const unsigned size = n - index / 32 * 32 < 32 ? n - index / 32 * 32 : 32;
  const unsigned full = size == 32 ? 0xffffffffu : (1u << size) - 1;
  unsigned r, c;
  frag_coord(index % 32, &r, &c);
  T mine[2] = {m.e[r * C + c], m.e[r * C + c + 1]};
  unsigned lane, mask;
  unsigned char *slots = msl_rt_simd_op(mine, sizeof mine, 0, file, line, col, &lane, &mask);
  if (mask != full || size != 32) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "simdgroup matrix at %s:%u: its thread_elements() were taken by lanes 0x%x of a simdgroup of %u lanes "
             "(lane-divergent control flow or a partial simdgroup); every lane holds two of its elements",
             file, line, mask, size);
    msl_rt_fail(msg);
  }
  for (unsigned i = 0; i < 32; i++) {
    frag_coord(i, &r, &c);
    memcpy(&m.e[r * C + c], slots + 64 * i, sizeof mine);
  }
  m.split = false;
}
} // namespace detail

template <class T, int R, int C>
inline typename simdgroup_matrix<T, R, C>::elem2 &simdgroup_matrix<T, R, C>::thread_elements() {
  static_assert(R == 8 && C == 8, "thread_elements() is emulated for 8x8 matrices");
  unsigned r, c;
  detail::frag_coord(detail::sim_lane(), &r, &c);
  split = true;
  return *reinterpret_cast<elem2 *>(&e[r * C + c]);
}

template <class T, int R, int C> inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, R, C> m;
  for (int i = 0; i < R * C; i++)
    m.e[i] = v;
  return m;
}

template <class T, class S, int R, int C>
inline void simdgroup_load(thread simdgroup_matrix<T, R, C> &m, const S *src, ulong elements_per_row = C,
                           ulong2 origin = 0, bool transpose = false, MSL_SITE_PARAMS) {
  msl_rt_mma(0, src, elements_per_row, origin.x | origin.y << 32, transpose, 0, MSL_SITE);
  m.split = false;
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      ulong row = transpose ? (ulong)c : (ulong)r, col = transpose ? (ulong)r : (ulong)c;
      m.e[r * C + c] = (T)src[(origin.y + row) * elements_per_row + origin.x + col];
    }
}
template <class T, class S, int R, int C>
inline void simdgroup_store(const simdgroup_matrix<T, R, C> &m, S *dst, ulong elements_per_row = C, ulong2 origin = 0,
                            bool transpose = false, MSL_SITE_PARAMS) {
  detail::mma_gather(m, MSL_SITE);
  msl_rt_mma(1, dst, elements_per_row, origin.x | origin.y << 32, transpose, 0, MSL_SITE);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      ulong row = transpose ? (ulong)c : (ulong)r, col = transpose ? (ulong)r : (ulong)c;
      dst[(origin.y + row) * elements_per_row + origin.x + col] = (S)m.e[r * C + c];
    }
}
template <class TD, class TA, class TB, class TC, int M, int N, int K>
inline void simdgroup_multiply_accumulate(thread simdgroup_matrix<TD, M, N> &d, const simdgroup_matrix<TA, M, K> &a,
                                          const simdgroup_matrix<TB, K, N> &b, const simdgroup_matrix<TC, M, N> &c,
                                          MSL_SITE_PARAMS) {
  detail::mma_gather(a, MSL_SITE);
  detail::mma_gather(b, MSL_SITE);
  detail::mma_gather(c, MSL_SITE);
  simdgroup_matrix<TD, M, N> r;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = (float)c.e[i * N + j];
      for (int k = 0; k < K; k++)
        s += (float)a.e[i * K + k] * (float)b.e[k * N + j];
      r.e[i * N + j] = (TD)s;
    }
  msl_rt_mma(2, r.e, 0, 0, 0, sizeof(r.e), MSL_SITE);
  d = r;
}
template <class TD, class TA, class TB, int M, int N, int K>
inline void simdgroup_multiply(thread simdgroup_matrix<TD, M, N> &d, const simdgroup_matrix<TA, M, K> &a,
                               const simdgroup_matrix<TB, K, N> &b, MSL_SITE_PARAMS) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, M, N>((TD)0), MSL_SITE);
}

// ---- atomics (device scope; threadgroups may run on different OS threads) -----
enum memory_order { memory_order_relaxed = 0 };
struct atomic_uint {
  uint v;
};
struct atomic_int {
  int v;
};
inline uint atomic_fetch_add_explicit(volatile atomic_uint *p, uint x, memory_order) {
  return __atomic_fetch_add(&p->v, x, __ATOMIC_SEQ_CST);
}
inline int atomic_fetch_add_explicit(volatile atomic_int *p, int x, memory_order) {
  return __atomic_fetch_add(&p->v, x, __ATOMIC_SEQ_CST);
}
inline uint atomic_load_explicit(volatile atomic_uint *p, memory_order) { return __atomic_load_n(&p->v, __ATOMIC_SEQ_CST); }
inline void atomic_store_explicit(volatile atomic_uint *p, uint x, memory_order) {
  __atomic_store_n(&p->v, x, __ATOMIC_SEQ_CST);
}

} // namespace metal

// ---- binding helpers used by the generated dispatch wrappers -----------------
namespace msl {
// anyptr converts to whatever pointer or reference type a kernel parameter has.
struct anyptr {
  void *p;
  template <class T> operator T *() const { return (T *)p; }
  template <class T> operator T &() const { return *(T *)p; }
};
// anyvec converts a builtin position to the scalar or vector type declared.
struct anyvec {
  uint3 v;
  template <class T> operator T() const {
    if constexpr (is_vec<T>) {
      T r;
      for (int k = 0; k < vinfo<T>::n && k < 3; k++)
        r[k] = (typename vinfo<T>::elem)v[k];
      return r;
    } else {
      return (T)v.x;
    }
  }
};
struct ctx {
  anyptr buf[31];
  anyptr tgmem[31];
  uint3 thread_position_in_grid, threadgroup_position_in_grid, thread_position_in_threadgroup,
      threads_per_threadgroup, threadgroups_per_grid;
  uint thread_index_in_threadgroup, thread_index_in_simdgroup, simdgroup_index_in_threadgroup,
      threads_per_simdgroup, simdgroups_per_threadgroup;
};
} // namespace msl

using namespace metal;
