// MetalPerformancePrimitives.h: a reference implementation, for the emulation
// harness, of the part of MSL 4's tensor operations (Metal 4, macOS 26) that
// shaders/tensor.metal uses: mpp::tensor_ops::matmul2d with its descriptor,
// execution scopes and destination cooperative tensors. Apple's header is
// not reproduced; the behaviour follows its documentation:
//
//   matmul2d_descriptor(m, n, k = dynamic, transpose_left, transpose_right,
//                       relaxed_precision, mode): destination (m x n) =
//     left (m x k) * right (k x n), plus the destination's previous value in
//     mode::multiply_accumulate. A tensor's coordinate 0 is its inner
//     dimension: left is (k, m) (transposed: (m, k)), right (n, k)
//     (transposed: (k, n)), the destination (n, m). With a dynamic k the
//     reduction length is the operands' k extent.
//   matmul2d<descriptor, scope>: run(left, right, destination) is called by
//     every thread of the scope (execution_thread, execution_simdgroup,
//     execution_simdgroups<N>: the whole threadgroup, exactly N simdgroups).
//   get_destination_cooperative_tensor<L, R, T>(): the destination tile held
//     across the scope's threads, each thread owning some elements in an
//     implementation-defined layout: get_capacity(), is_valid_element(i),
//     get_multidimensional_index(i) (index[0] in n, index[1] in m),
//     operator[], load(tensor) and store(tensor) (elements outside the
//     tensor's extents are not stored).
//
// What the emulation does, and how it differs from a GPU:
//   - each thread of the scope owns the tile elements e = slot * P + r' (P
//     threads in the scope, r' a fixed permutation of the thread's rank, the
//     tile numbered column by column), so a kernel that assumes a layout gets
//     wrong results; run() computes exactly the calling thread's elements;
//   - a new cooperative tensor holds NaN (a kernel must initialise it before
//     accumulating), and destination elements whose row or column lies
//     outside the operands' extents become NaN (never stored by a correct
//     kernel: store() clips to the target's extents);
//   - products are formed and summed in float, k in order (a GPU's order
//     and any relaxed_precision shortcut differ within float rounding);
//   - int8_t x int8_t operands need an int32_t destination (the MSL 4.0
//     combination for integer operands; the table also pairs half, bfloat and
//     float operands of one kind with float destinations): the products are
//     summed exactly, and a sum (with the destination's previous value in
//     multiply_accumulate) outside int32 stops the run, where a GPU would
//     wrap; integer and floating operands are never mixed;
//   - run() does not synchronise the threads of its scope (no wait of any
//     kind: the runtime releases a wait only when no thread can go on, so
//     one would hide missing barriers): operands written by other threads
//     need a threadgroup_barrier before it, and operands overwritten after
//     it one after it (a missing one is reported as a race by the
//     multi-order runs). That every thread of the scope calls run() is not
//     checked as such: a thread that does not leaves its share of the tile
//     as it was, which the results show;
//   - a scope of execution_simdgroups<N> in a threadgroup of other than 32N
//     threads, operand k extents that disagree, or a destination
//     cooperative tensor of another operation stop the run.
#ifndef CLEF_EMU_MPP_H
#define CLEF_EMU_MPP_H

#include <metal_tensor>

extern "C" {
// msl_rt_thread reports the calling thread's index in its threadgroup and the
// number of threads in the threadgroup (runtime.cpp).
void msl_rt_thread(unsigned *index, unsigned *nthreads);
}

namespace mpp {
namespace tensor_ops {
namespace emu {

[[noreturn]] inline void stop(const char *what, const char *file, unsigned line) {
  const char *f = __builtin_strrchr(file, '/');
  fprintf(stderr, "msl-emu: tensor operation at %s:%u: %s\n", f ? f + 1 : file, line, what);
  fflush(stderr);
  _exit(3);
}

// layout is the distribution of an M x N destination tile over the P threads
// of a scope (Simd: one simdgroup's scope).
template <int M, int N, int P, bool Simd> struct layout {
  static constexpr int m = M, n = N, threads = P;
  static constexpr int capacity = (M * N + P - 1) / P;
  // The permutation of ranks: a multiplier coprime with P.
  static constexpr int mul = P % 5 ? 5 : (P % 7 ? 7 : (P % 11 ? 11 : 13));
  static unsigned rank(const char *file, unsigned line) {
    unsigned index, nthreads;
    msl_rt_thread(&index, &nthreads);
    if (P == 1)
      return 0;
    unsigned r = index;
    if (Simd) {
      r = index % 32;
    } else if (nthreads != (unsigned)P) {
      char msg[200];
      snprintf(msg, sizeof msg, "an operation of execution_simdgroups<%d> in a threadgroup of %u threads (it needs %d)",
               P / 32, nthreads, P);
      stop(msg, file, line);
    }
    return (r * mul + 3) % P;
  }
};

template <class T> struct is_coop : std::false_type {};
template <class T, class E, class L> struct is_coop<metal::cooperative_tensor<T, E, L>> : std::true_type {};

// is_int8 is true for the 8-bit integer operand types (MSL char, int8_t).
template <class T> struct is_int8 : std::integral_constant<bool, std::is_same<typename std::remove_cv<T>::type, int8_t>::value ||
                                                              std::is_same<typename std::remove_cv<T>::type, signed char>::value> {};

template <class T> inline T poison() {
  if constexpr (std::is_floating_point<T>::value || std::is_same<T, half>::value)
    return (T)__builtin_nanf("");
  else
    return (T)-1;
}

} // namespace emu

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };
  int m, n, k;
  bool transpose_left, transpose_right, relaxed_precision;
  mode matmul_mode;

  constexpr matmul2d_descriptor(int m_, int n_, int k_ = static_cast<int>(metal::dynamic_extent), bool tl = false,
                                bool tr = false, bool relaxed = false, mode md = mode::multiply)
      : m(m_), n(n_), k(k_), transpose_left(tl), transpose_right(tr), relaxed_precision(relaxed), matmul_mode(md) {}

  // MSL passes the descriptor itself as a template argument; C++17 has no
  // class-type template parameters, so it travels encoded in an integer.
  constexpr operator unsigned long long() const {
    return (unsigned long long)(unsigned short)m | (unsigned long long)(unsigned short)n << 16 |
           (unsigned long long)(unsigned short)(k < 0 ? 0 : k + 1) << 32 | (unsigned long long)transpose_left << 48 |
           (unsigned long long)transpose_right << 49 | (unsigned long long)relaxed_precision << 50 |
           (unsigned long long)(matmul_mode == mode::multiply_accumulate) << 51;
  }
  static constexpr matmul2d_descriptor decode(unsigned long long e) {
    return matmul2d_descriptor(int(e & 0xffff), int((e >> 16) & 0xffff), int((e >> 32) & 0xffff) - 1, (e >> 48) & 1,
                               (e >> 49) & 1, (e >> 50) & 1, (e >> 51) & 1 ? mode::multiply_accumulate : mode::multiply);
  }
};

template <unsigned long long Desc, class Scope> class matmul2d {
public:
  static constexpr matmul2d_descriptor descriptor = matmul2d_descriptor::decode(Desc);
  static_assert(descriptor.m > 0 && descriptor.n > 0 && descriptor.m < 65536 && descriptor.n < 65536,
                "matmul2d: tile extents out of range");
  static constexpr int threads = Scope::simdgroups == 0 ? 1 : 32 * Scope::simdgroups;
  typedef emu::layout<descriptor.m, descriptor.n, threads, std::is_same<Scope, metal::execution_simdgroup>::value>
      layout;
  typedef Scope scope;

  template <class L, class R, class T, class C = int>
  using cooperative_tensor_destination_t = metal::cooperative_tensor<T, metal::dextents<C, 2>, layout>;

  template <class L, class R, class T, class C = int>
  cooperative_tensor_destination_t<L, R, T, C> get_destination_cooperative_tensor(
      const char *file = __builtin_FILE(), unsigned line = __builtin_LINE()) const {
    return cooperative_tensor_destination_t<L, R, T, C>(file, line);
  }

  template <class L, class R, class D>
  void run(const L &left, const R &right, D &dest, const char *msl_file = __builtin_FILE(),
           unsigned msl_line = __builtin_LINE()) const {
    static_assert(!emu::is_coop<L>::value && !emu::is_coop<R>::value,
                  "cooperative-tensor operands are not emulated: pass tensors");
    if constexpr (emu::is_coop<D>::value) {
      static_assert(std::is_same<typename D::layout_type, layout>::value,
                    "the destination cooperative tensor belongs to another operation");
      compute(left, right, dest, msl_file, msl_line);
    } else {
      // A tensor destination: read (multiply_accumulate), compute, store,
      // through this thread's share of the tile.
      cooperative_tensor_destination_t<L, R, typename D::element_type> c(msl_file, msl_line);
      if (descriptor.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate)
        c.load(dest);
      compute(left, right, c, msl_file, msl_line);
      c.store(dest);
    }
  }

private:
  template <class L, class R, class C>
  static void compute(const L &left, const R &right, C &c, const char *file, unsigned line) {
    constexpr auto d = descriptor;
    const long lk = d.transpose_left ? left.get_extent(1) : left.get_extent(0);
    const long lm = d.transpose_left ? left.get_extent(0) : left.get_extent(1);
    const long rk = d.transpose_right ? right.get_extent(0) : right.get_extent(1);
    const long rn = d.transpose_right ? right.get_extent(1) : right.get_extent(0);
    long K;
    if (d.k < 0) {
      if (lk != rk) {
        char msg[160];
        snprintf(msg, sizeof msg, "matmul2d with a dynamic k: the left operand's k extent is %ld, the right's %ld", lk, rk);
        emu::stop(msg, file, line);
      }
      K = lk;
    } else if (lk >= d.k && rk >= d.k) {
      K = d.k;
    } else if (lk == rk) {
      K = lk; // the tail of a k loop
    } else {
      char msg[160];
      snprintf(msg, sizeof msg, "matmul2d with k = %d: operand k extents %ld and %ld", d.k, lk, rk);
      emu::stop(msg, file, line);
    }
    const bool acc = d.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate;
    typedef typename C::element_type T;
    typedef typename std::remove_cv<typename L::element_type>::type LT;
    typedef typename std::remove_cv<typename R::element_type>::type RT;
    constexpr bool lint = emu::is_int8<LT>::value, rint = emu::is_int8<RT>::value;
    static_assert(!std::is_same<LT, char>::value && !std::is_same<RT, char>::value,
                  "matmul2d: declare 8-bit integer operands int8_t (plain char's sign is the host's)");
    static_assert(lint == rint, "matmul2d: integer and floating operands are not mixed");
    static_assert(!lint || std::is_same<T, int32_t>::value, "matmul2d: int8_t operands need an int32_t destination");
    static_assert(lint || !std::is_integral<T>::value, "matmul2d: an integer destination needs int8_t operands");
    if constexpr (lint) {
      for (int i = 0; i < c.get_capacity(); i++) {
        if (!c.is_valid_element(i))
          continue;
        const metal::array<int, 2> ix = c.get_multidimensional_index(i);
        const long ni = ix[0], mi = ix[1];
        if (mi >= lm || ni >= rn) {
          c[i] = emu::poison<T>();
          continue;
        }
        long long s = acc ? (long long)c[i] : 0;
        for (long kk = 0; kk < K; kk++) {
          const int a = (int)(d.transpose_left ? left.at(mi, kk) : left.at(kk, mi));
          const int b = (int)(d.transpose_right ? right.at(kk, ni) : right.at(ni, kk));
          s += (long long)a * b;
        }
        if (s < INT32_MIN || s > INT32_MAX) {
          char msg[160];
          snprintf(msg, sizeof msg, "matmul2d: the int32 destination at (m %ld, n %ld) overflows (%lld)", mi, ni, s);
          emu::stop(msg, file, line);
        }
        c[i] = (T)s;
      }
      return;
    }
    for (int i = 0; i < c.get_capacity(); i++) {
      if (!c.is_valid_element(i))
        continue;
      const metal::array<int, 2> ix = c.get_multidimensional_index(i);
      const long ni = ix[0], mi = ix[1];
      if (mi >= lm || ni >= rn) {
        c[i] = emu::poison<T>(); // outside the operands: undefined
        continue;
      }
      float s = acc ? (float)c[i] : 0.0f;
      for (long kk = 0; kk < K; kk++) {
        const float a = (float)(d.transpose_left ? left.at(mi, kk) : left.at(kk, mi));
        const float b = (float)(d.transpose_right ? right.at(kk, ni) : right.at(ni, kk));
        s += a * b;
      }
      c[i] = (T)s;
    }
  }
};

} // namespace tensor_ops
} // namespace mpp

namespace metal {

// cooperative_tensor: this thread's elements of a tile distributed over an
// operation's scope (see the layout above).
template <class T, class Ext, class Layout> struct cooperative_tensor {
  typedef T element_type;
  typedef Layout layout_type;
  T v[Layout::capacity];
  unsigned rank;

  cooperative_tensor(const char *file, unsigned line) : rank(Layout::rank(file, line)) {
    for (int i = 0; i < Layout::capacity; i++)
      v[i] = mpp::tensor_ops::emu::poison<T>();
  }

  static constexpr unsigned short get_capacity() { return Layout::capacity; }
  long element(unsigned short i) const { return (long)i * Layout::threads + rank; }
  bool is_valid_element(unsigned short i) const {
    return i < Layout::capacity && element(i) < (long)Layout::m * Layout::n;
  }
  // get_multidimensional_index: (column in n, row in m) of element i.
  array<int, 2> get_multidimensional_index(unsigned short i) const {
    const long e = element(i);
    return array<int, 2>{{int(e / Layout::m), int(e % Layout::m)}};
  }
  T &operator[](unsigned short i) { return v[i]; }
  const T &operator[](unsigned short i) const { return v[i]; }

  template <class U, class E2, class L2> void store(const tensor<U, E2, L2> &t) const {
    for (int i = 0; i < Layout::capacity; i++) {
      if (!is_valid_element(i))
        continue;
      const array<int, 2> ix = get_multidimensional_index(i);
      if (t.in(ix[0], ix[1]))
        t.at(ix[0], ix[1]) = (U)v[i];
    }
  }
  template <class U, class E2, class L2> void load(const tensor<U, E2, L2> &t) {
    for (int i = 0; i < Layout::capacity; i++) {
      if (!is_valid_element(i))
        continue;
      const array<int, 2> ix = get_multidimensional_index(i);
      v[i] = t.in(ix[0], ix[1]) ? (T)t.at(ix[0], ix[1]) : mpp::tensor_ops::emu::poison<T>();
    }
  }
};

} // namespace metal

#endif
