// runtime.cpp: the CPU executor of the MSL emulation harness.
//
// usage: harness JOB OUT | harness -serve
//
// JOB (little-endian): "MSLJ", kernel name, grid[3], threadgroup[3], function
// constants, threadgroup-memory lengths, buffers, aliases, fiber orders. OUT
// receives every buffer, in job order, after the dispatch. Threadgroups are
// spread over worker OS threads; the threads of one threadgroup are fibers
// run cooperatively on one worker, so threadgroup memory is per worker and
// barriers are exact.
//
// Scheduling: a fiber runs until it reaches a barrier or a simd-group
// collective, or finishes. When no fiber of the threadgroup can run:
//   - in each simdgroup with lanes waiting at a simd-group function, the
//     lanes at the earliest call site (source position, then code address)
//     take part in it: lanes in other branches, at a threadgroup barrier or
//     finished are inactive, as on an Apple GPU, so a collective in a
//     divergent branch combines only the lanes of that branch;
//   - otherwise every unfinished thread waits at threadgroup_barrier, which
//     is released only if all threads of the group wait there, at one call
//     site.
// Everything else a GPU would reject or do differently stops the run with an
// error naming the kernel (msl-emu: ... on stderr, exit status 3): a barrier
// not reached by every thread or reached from different call sites, a
// threadgroup-memory total over 32 KiB, simdgroup-matrix operations whose
// arguments or operands differ between the lanes of a simdgroup, and (with
// more than one fiber order) outputs that depend on the order the threads of
// a threadgroup run in: a read of another thread's write without a barrier.
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <setjmp.h>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <ucontext.h>
#include <vector>

#include <unistd.h>

#include "msl_shim.h"
// The runtime itself is plain C++: drop the MSL keyword macros.
#undef kernel
#undef device
#undef constant
#undef thread
#undef threadgroup

struct msl_kentry {
  const char *name;
  void (*fn)(msl::ctx &);
  unsigned long tgstatic; // bytes of the threadgroup arrays the kernel declares
};
struct msl_fcentry {
  int index;
  void *p;
  int size;
};
extern const msl_kentry msl_kernels[];
extern const int msl_nkernels;
extern const msl_fcentry msl_fconsts[];
extern const int msl_nfconsts;

namespace {

const size_t kStack = 256 * 1024;
const unsigned kSimd = 32;
const unsigned long kTGMemLimit = 32768; // Apple GPUs: maxThreadgroupMemoryLength

enum State { RUN, AT_TG, AT_SIMD, DONE };

// A Site is one call of a barrier or collective: its source position
// (__builtin_FILE/LINE/COLUMN of the call in the kernel source) and the code
// address it returns to, which tells apart the inlined copies of a helper
// called from two places.
struct Site {
  const char *file = "";
  unsigned line = 0, col = 0;
  const void *ret = nullptr;
};

int cmp_pos(const Site &a, const Site &b) {
  if (a.file != b.file)
    if (int c = strcmp(a.file, b.file))
      return c;
  if (a.line != b.line)
    return a.line < b.line ? -1 : 1;
  if (a.col != b.col)
    return a.col < b.col ? -1 : 1;
  return 0;
}
int cmp_site(const Site &a, const Site &b) {
  if (int c = cmp_pos(a, b))
    return c;
  if (a.ret != b.ret)
    return a.ret < b.ret ? -1 : 1;
  return 0;
}

std::string where(const Site &s) {
  const char *f = strrchr(s.file, '/');
  char buf[256];
  snprintf(buf, sizeof buf, "%s:%u:%u", f ? f + 1 : s.file, s.line, s.col);
  return buf;
}

// An MmaRec is one simdgroup-matrix operation as the first lane to reach it
// did it: every other lane's operation with the same index must match.
struct MmaRec {
  int kind; // 0 load, 1 store, 2 multiply
  unsigned lane;
  Site site;
  // load/store: address, elements per row, origin x | y<<32, transpose;
  // multiply: offset and length of the product in SimdState::products.
  unsigned long a, b, c, d;
};

struct Fiber {
  jmp_buf jb;
  ucontext_t uc;
  void *stack = nullptr;
  bool started = false;
  State st = RUN;
  int kind = 0; // at AT_SIMD: 0 collective, 1 simdgroup_barrier
  Site site;
  unsigned lane = 0, sg = 0, index = 0;
  unsigned long mma = 0; // simdgroup-matrix operations since the last check
  alignas(16) unsigned char val[64];
  msl::ctx c;
};

struct SimdState {
  unsigned mask = 0; // the lanes taking part in the collective last released
  std::vector<MmaRec> mma;
  std::vector<unsigned char> products;
  alignas(64) unsigned char slots[kSimd * 64];
};

struct Worker {
  jmp_buf sched;
  std::vector<Fiber> fibers;
  std::vector<SimdState> sgs;
  std::vector<unsigned> perm; // the order fibers are resumed in
  unsigned nthreads = 0;
  unsigned long serial = 0; // threadgroups run by this worker
  unsigned gid[3] = {0, 0, 0};
  void (*fn)(msl::ctx &) = nullptr;
};

thread_local Worker *W;
thread_local Fiber *cur;
const char *g_kernel = "";

[[noreturn]] void die(const std::string &msg) {
  fprintf(stderr, "msl-emu: %s\n", msg.c_str());
  fflush(stderr);
  _exit(3);
}

// fail stops the run with a message about the current kernel and group.
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...) {
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  char msg[1200];
  if (W)
    snprintf(msg, sizeof msg, "kernel %s (threadgroup %u,%u,%u): %s", g_kernel, W->gid[0], W->gid[1], W->gid[2],
             body);
  else
    snprintf(msg, sizeof msg, "kernel %s: %s", g_kernel, body);
  die(msg);
}

void yield_to_sched() {
  if (!_setjmp(cur->jb))
    _longjmp(W->sched, 1);
}

void fiber_main() {
  for (;;) {
    Fiber *f = cur;
    W->fn(f->c);
    f->st = DONE;
    yield_to_sched();
  }
}

void resume(Fiber *f) {
  cur = f;
  if (!_setjmp(W->sched)) {
    if (!f->started) {
      f->started = true;
      getcontext(&f->uc);
      f->uc.uc_stack.ss_sp = f->stack;
      f->uc.uc_stack.ss_size = kStack;
      f->uc.uc_link = nullptr;
      makecontext(&f->uc, fiber_main, 0);
      setcontext(&f->uc);
    }
    _longjmp(f->jb, 1);
  }
  cur = nullptr;
}

// lanes returns the range of fiber indices of simdgroup s.
void lanes(const Worker &w, unsigned s, unsigned &lo, unsigned &hi) {
  lo = s * kSimd;
  hi = lo + kSimd < w.nthreads ? lo + kSimd : w.nthreads;
}

// mma_sync is called when every unfinished lane of simdgroup s meets at one
// point (what, at site): every lane, finished or not, must have done the same
// simdgroup-matrix operations since the last meeting (they were compared one
// by one as they happened), since they need the whole simdgroup.
void mma_sync(Worker &w, unsigned s, const char *what, const Site *site) {
  unsigned lo, hi;
  lanes(w, s, lo, hi);
  for (unsigned i = lo + 1; i < hi; i++) {
    const Fiber &a = w.fibers[lo], &f = w.fibers[i];
    if (f.mma != a.mma)
      fail("simdgroup-matrix operations under lane-divergent control flow: before %s%s%s, lane %u of simdgroup %u "
           "did %lu and lane %u did %lu%s (simdgroup_load/store/multiply must be reached by every lane of the "
           "simdgroup, with the same arguments)",
           what, site ? " at " : "", site ? where(*site).c_str() : "", a.lane, s, a.mma, f.lane, f.mma,
           a.st == DONE || f.st == DONE ? "; a lane that returned early takes no part in them" : "");
  }
  for (unsigned i = lo; i < hi; i++)
    w.fibers[i].mma = 0;
  w.sgs[s].mma.clear();
  w.sgs[s].products.clear();
}

// release_simd lets the lanes of simdgroup s at the earliest call site take
// part in their collective. It returns false when no lane waits at one.
bool release_simd(Worker &w, unsigned s) {
  unsigned lo, hi;
  lanes(w, s, lo, hi);
  const Fiber *best = nullptr;
  for (unsigned i = lo; i < hi; i++) {
    const Fiber &f = w.fibers[i];
    if (f.st == AT_SIMD && (!best || cmp_site(f.site, best->site) < 0))
      best = &f;
  }
  if (!best)
    return false;
  unsigned mask = 0, unfinished = 0;
  for (unsigned i = lo; i < hi; i++) {
    const Fiber &f = w.fibers[i];
    if (f.st != DONE)
      unfinished |= 1u << f.lane;
    if (f.st == AT_SIMD && cmp_site(f.site, best->site) == 0)
      mask |= 1u << f.lane;
  }
  if (best->kind == 1 && mask != unfinished) {
    const Fiber *other = nullptr;
    for (unsigned i = lo; i < hi && !other; i++)
      if (w.fibers[i].st != DONE && !((mask >> w.fibers[i].lane) & 1u))
        other = &w.fibers[i];
    fail("simdgroup_barrier at %s not reached by every lane of simdgroup %u: lanes 0x%08x wait there, lane %u "
         "waits at %s %s",
         where(best->site).c_str(), s, mask, other->lane,
         other->st == AT_TG ? "threadgroup_barrier" : other->kind == 1 ? "simdgroup_barrier" : "a simd-group function",
         where(other->site).c_str());
  }
  const Site site = best->site;
  for (unsigned i = lo; i < hi; i++) {
    Fiber &f = w.fibers[i];
    if (f.st == AT_SIMD && cmp_site(f.site, site) == 0) {
      memcpy(w.sgs[s].slots + 64 * f.lane, f.val, 64);
      f.st = RUN;
    }
  }
  w.sgs[s].mask = mask;
  if (mask == unfinished)
    mma_sync(w, s, best->kind == 1 ? "simdgroup_barrier" : "the simd-group function", &site);
  return true;
}

// release_tg releases threadgroup_barrier when every thread waits there, at
// one call site; anything else is an error.
void release_tg(Worker &w) {
  unsigned n = w.nthreads, waiting = 0;
  const Fiber *first = nullptr, *other = nullptr;
  unsigned nfirst = 0;
  for (unsigned i = 0; i < n; i++) {
    const Fiber &f = w.fibers[i];
    if (f.st != AT_TG)
      continue;
    waiting++;
    if (!first)
      first = &f;
    if (cmp_site(f.site, first->site) == 0)
      nfirst++;
    else if (!other)
      other = &f;
  }
  if (!first)
    fail("no thread can run and none waits at a barrier (internal error)");
  if (waiting < n)
    fail("threadgroup_barrier at %s not reached by every thread of the threadgroup (collective not reached): "
         "%u threads wait there, %u finished",
         where(first->site).c_str(), waiting, n - waiting);
  if (other) {
    if (cmp_pos(first->site, other->site) == 0)
      fail("threadgroup_barrier at %s reached from different call sites by threads of one threadgroup (the "
           "helper holding it is called from two places): %u threads (thread %u) at one, %u (thread %u) at another",
           where(first->site).c_str(), nfirst, first->index, waiting - nfirst, other->index);
    fail("threadgroup_barrier reached from different call sites by threads of one threadgroup: %u threads (thread "
         "%u) at %s, %u (thread %u) at %s",
         nfirst, first->index, where(first->site).c_str(), waiting - nfirst, other->index,
         where(other->site).c_str());
  }
  for (unsigned s = 0; s < w.sgs.size(); s++)
    mma_sync(w, s, "threadgroup_barrier", &first->site);
  for (unsigned i = 0; i < n; i++)
    w.fibers[i].st = RUN;
}

// splitmix64, for the seeded fiber orders.
uint64_t mix(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// set_order fills w.perm: order 0 is forward, 1 reverse, k >= 2 a shuffle
// seeded by k and the group.
void set_order(Worker &w, unsigned order, uint64_t group) {
  unsigned n = w.nthreads;
  w.perm.resize(n);
  for (unsigned i = 0; i < n; i++)
    w.perm[i] = order == 1 ? n - 1 - i : i;
  if (order >= 2) {
    uint64_t seed = (uint64_t)order * 0x100000001b3ull ^ group;
    for (unsigned i = n - 1; i > 0; i--) {
      unsigned j = (unsigned)(mix(seed) % (i + 1));
      unsigned t = w.perm[i];
      w.perm[i] = w.perm[j];
      w.perm[j] = t;
    }
  }
}

struct Job {
  std::string name;
  unsigned grid[3], tg[3];
  std::vector<std::pair<unsigned, std::vector<unsigned char>>> consts;
  std::vector<std::pair<unsigned, unsigned>> tgmem;
  struct Buf {
    unsigned index;
    size_t size;
    unsigned char *p;
  };
  std::vector<Buf> bufs;
  std::vector<std::pair<unsigned, unsigned>> alias; // index -> index of a bound buffer
  unsigned orders = 1;
};

void run_group(Worker &w, const Job &job, unsigned gx, unsigned gy, unsigned gz,
               std::vector<std::vector<unsigned char>> &tgmem) {
  unsigned n = w.nthreads;
  w.serial++;
  w.gid[0] = gx, w.gid[1] = gy, w.gid[2] = gz;
  for (auto &m : tgmem)
    memset(m.data(), 0xff, m.size()); // uninitialised threadgroup memory reads as NaN
  unsigned nsg = (n + kSimd - 1) / kSimd;
  for (unsigned s = 0; s < nsg; s++) {
    w.sgs[s].mask = 0;
    w.sgs[s].mma.clear();
    w.sgs[s].products.clear();
  }
  for (unsigned i = 0; i < n; i++) {
    Fiber &f = w.fibers[i];
    f.st = RUN;
    f.mma = 0;
    msl::ctx &c = f.c;
    for (auto &b : job.bufs)
      c.buf[b.index].p = b.p;
    for (auto &a : job.alias)
      c.buf[a.first].p = c.buf[a.second].p;
    for (size_t k = 0; k < job.tgmem.size(); k++)
      c.tgmem[job.tgmem[k].first].p = tgmem[k].data();
    unsigned tx = i % job.tg[0], ty = (i / job.tg[0]) % job.tg[1], tz = i / (job.tg[0] * job.tg[1]);
    c.thread_position_in_threadgroup = uint3{tx, ty, tz};
    c.threadgroup_position_in_grid = uint3{gx, gy, gz};
    c.threads_per_threadgroup = uint3{job.tg[0], job.tg[1], job.tg[2]};
    c.threadgroups_per_grid = uint3{job.grid[0], job.grid[1], job.grid[2]};
    c.thread_position_in_grid = uint3{gx * job.tg[0] + tx, gy * job.tg[1] + ty, gz * job.tg[2] + tz};
    c.thread_index_in_threadgroup = i;
    c.thread_index_in_simdgroup = i % kSimd;
    c.simdgroup_index_in_threadgroup = i / kSimd;
    c.threads_per_simdgroup = kSimd;
    c.simdgroups_per_threadgroup = nsg;
    f.lane = i % kSimd;
    f.sg = i / kSimd;
    f.index = i;
  }
  for (;;) {
    bool progressed = false;
    for (unsigned i : w.perm) {
      Fiber &f = w.fibers[i];
      if (f.st != RUN)
        continue;
      resume(&f);
      progressed = true;
    }
    if (progressed)
      continue;
    bool done = true;
    for (unsigned i = 0; i < n && done; i++)
      done = w.fibers[i].st == DONE;
    if (done)
      break;
    bool released = false;
    for (unsigned s = 0; s < nsg; s++)
      released |= release_simd(w, s);
    if (!released)
      release_tg(w);
  }
  for (unsigned s = 0; s < nsg; s++)
    mma_sync(w, s, "the end of the kernel", nullptr);
}

uint32_t rd32(FILE *f) {
  uint32_t v;
  if (fread(&v, 4, 1, f) != 1)
    die("truncated job file");
  return v;
}
uint64_t rd64(FILE *f) {
  uint64_t v;
  if (fread(&v, 8, 1, f) != 1)
    die("truncated job file");
  return v;
}

const char *mma_what(int kind) { return kind == 0 ? "simdgroup_load" : kind == 1 ? "simdgroup_store" : "simdgroup_multiply"; }

} // namespace

extern "C" void msl_rt_threadgroup_barrier(const char *file, unsigned line, unsigned col) {
  cur->st = AT_TG;
  cur->site = Site{file, line, col, __builtin_return_address(0)};
  yield_to_sched();
}

extern "C" unsigned char *msl_rt_simd_op(const void *x, unsigned size, int kind, const char *file, unsigned line,
                                         unsigned col, unsigned *lane, unsigned *mask) {
  Fiber *f = cur;
  if (size > 64)
    fail("simd value of %u bytes (at most 64)", size);
  if (size)
    memcpy(f->val, x, size);
  f->st = AT_SIMD;
  f->kind = kind;
  f->site = Site{file, line, col, __builtin_return_address(0)};
  yield_to_sched();
  SimdState &s = W->sgs[f->sg];
  *lane = f->lane;
  *mask = s.mask;
  return s.slots;
}

extern "C" void msl_rt_mma(int kind, const void *p, unsigned long a, unsigned long b, unsigned long c,
                           unsigned long n, const char *file, unsigned line, unsigned col) {
  Fiber *f = cur;
  SimdState &s = W->sgs[f->sg];
  MmaRec r{kind, f->lane, Site{file, line, col, nullptr}, 0, 0, 0, 0};
  if (kind != 2)
    r.a = (unsigned long)p, r.b = a, r.c = b, r.d = c;
  unsigned long k = f->mma++;
  if (k > s.mma.size())
    fail("internal error: simdgroup-matrix record %lu of %zu", k, s.mma.size());
  if (k == s.mma.size()) {
    if (kind == 2) { // the product every lane computed: it must be the same everywhere
      r.a = s.products.size(), r.b = n;
      s.products.insert(s.products.end(), (const unsigned char *)p, (const unsigned char *)p + n);
    }
    s.mma.push_back(r);
    return;
  }
  const MmaRec &o = s.mma[k];
  if (o.kind != r.kind || cmp_pos(o.site, r.site) != 0)
    fail("simdgroup-matrix operations under lane-divergent control flow: lane %u of simdgroup %u reached %s at %s "
         "where lane %u reached %s at %s",
         r.lane, f->sg, mma_what(r.kind), where(r.site).c_str(), o.lane, mma_what(o.kind), where(o.site).c_str());
  if (kind == 2 && (o.b != n || memcmp(s.products.data() + o.a, p, n) != 0))
    fail("%s at %s: the product differs between lanes %u and %u of simdgroup %u: its operands are not uniform "
         "over the simdgroup (a lane-dependent load, fill or element write)",
         mma_what(kind), where(r.site).c_str(), o.lane, r.lane, f->sg);
  if (kind != 2 && (o.a != r.a || o.b != r.b || o.c != r.c || o.d != r.d))
    fail("%s at %s: arguments depend on the lane: lane %u passes address %p, %lu elements per row, origin (%lu,%lu)%s "
         "and lane %u address %p, %lu elements per row, origin (%lu,%lu)%s; a simdgroup matrix is loaded and stored "
         "by the whole simdgroup from one address",
         mma_what(kind), where(r.site).c_str(), o.lane, (void *)o.a, o.b, o.c & 0xffffffffu, o.c >> 32,
         o.d ? " transposed" : "", r.lane, (void *)r.a, r.b, r.c & 0xffffffffu, r.c >> 32, r.d ? " transposed" : "");
}

extern "C" void msl_rt_poison(void *p, unsigned long n, unsigned long *gen) {
  if (*gen != W->serial) {
    memset(p, 0xff, n);
    *gen = W->serial;
  }
}

// run_dispatch runs every threadgroup of job with fibers resumed in the
// given order.
static void run_dispatch(const Job &job, void (*fn)(msl::ctx &), unsigned order) {
  unsigned nthreads = job.tg[0] * job.tg[1] * job.tg[2];
  uint64_t ngroups = (uint64_t)job.grid[0] * job.grid[1] * job.grid[2];
  unsigned nw = std::thread::hardware_concurrency();
  if (const char *e = getenv("MSL_EMU_THREADS"))
    nw = (unsigned)atoi(e);
  if (nw < 1)
    nw = 1;
  if (nw > 8)
    nw = 8;
  if (ngroups < nw)
    nw = (unsigned)(ngroups ? ngroups : 1);
  std::atomic<uint64_t> next{0};
  auto work = [&]() {
    Worker w;
    W = &w;
    w.fn = fn;
    w.nthreads = nthreads;
    w.fibers.resize(nthreads);
    w.sgs.resize((nthreads + kSimd - 1) / kSimd);
    for (auto &fb : w.fibers) {
      fb.stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (fb.stack == MAP_FAILED)
        die("cannot allocate fiber stacks");
    }
    std::vector<std::vector<unsigned char>> tgmem;
    for (auto &t : job.tgmem)
      tgmem.emplace_back(t.second);
    if (order <= 1)
      set_order(w, order, 0);
    for (;;) {
      uint64_t g = next.fetch_add(1);
      if (g >= ngroups)
        break;
      unsigned gx = g % job.grid[0], gy = (g / job.grid[0]) % job.grid[1],
               gz = g / ((uint64_t)job.grid[0] * job.grid[1]);
      if (order > 1)
        set_order(w, order, g);
      run_group(w, job, gx, gy, gz, tgmem);
    }
    for (auto &fb : w.fibers)
      munmap(fb.stack, kStack);
    W = nullptr;
  };
  std::vector<std::thread> ts;
  for (unsigned i = 1; i < nw; i++)
    ts.emplace_back(work);
  work();
  for (auto &t : ts)
    t.join();
}

static const char *order_name(unsigned k) { return k == 0 ? "forward" : k == 1 ? "reverse" : "shuffled"; }

// run_job reads one job from f, runs it and writes the buffers to o. It
// returns false at a clean end of input.
static bool run_job(FILE *f, FILE *o) {
  uint32_t magic;
  if (fread(&magic, 4, 1, f) != 1)
    return false;
  if (magic != 0x4a4c534d)
    die("bad job magic");
  for (int i = 0; i < msl_nfconsts; i++)
    memset(msl_fconsts[i].p, 0, msl_fconsts[i].size);
  Job job;
  uint32_t nl = rd32(f);
  job.name.resize(nl);
  if (fread(&job.name[0], 1, nl, f) != nl)
    die("truncated job file");
  for (int i = 0; i < 3; i++)
    job.grid[i] = rd32(f);
  for (int i = 0; i < 3; i++)
    job.tg[i] = rd32(f);
  uint32_t nc = rd32(f);
  for (uint32_t i = 0; i < nc; i++) {
    uint32_t idx = rd32(f), sz = rd32(f);
    std::vector<unsigned char> v(sz);
    if (sz && fread(v.data(), 1, sz, f) != sz)
      die("truncated job file");
    job.consts.push_back({idx, v});
  }
  uint32_t nt = rd32(f);
  for (uint32_t i = 0; i < nt; i++) {
    uint32_t idx = rd32(f), sz = rd32(f);
    if (idx > 30 || sz > kTGMemLimit || sz % 16 != 0)
      die("threadgroup memory: index > 30, length > 32 KiB or not a multiple of 16");
    job.tgmem.push_back({idx, sz});
  }
  uint32_t nb = rd32(f);
  for (uint32_t i = 0; i < nb; i++) {
    uint32_t idx = rd32(f);
    uint64_t sz = rd64(f);
    if (idx > 30)
      die("buffer index > 30");
    unsigned char *p = (unsigned char *)aligned_alloc(64, (sz + 63) / 64 * 64 + 64);
    if (sz && fread(p, 1, sz, f) != sz)
      die("truncated job file");
    job.bufs.push_back({idx, (size_t)sz, p});
  }
  uint32_t na = rd32(f);
  for (uint32_t i = 0; i < na; i++) {
    uint32_t idx = rd32(f), src = rd32(f);
    bool bound = false;
    for (auto &b : job.bufs)
      bound = bound || b.index == src;
    if (idx > 30 || !bound)
      die("alias of an unbound buffer");
    job.alias.push_back({idx, src});
  }
  job.orders = rd32(f);
  if (job.orders < 1 || job.orders > 16)
    die("fiber orders must be 1..16");

  const msl_kentry *k = nullptr;
  for (int i = 0; i < msl_nkernels; i++)
    if (job.name == msl_kernels[i].name)
      k = &msl_kernels[i];
  if (!k)
    die("no kernel named " + job.name);
  g_kernel = k->name;
  for (auto &c : job.consts) {
    bool found = false;
    for (int i = 0; i < msl_nfconsts; i++)
      if ((unsigned)msl_fconsts[i].index == c.first) {
        if ((size_t)msl_fconsts[i].size != c.second.size())
          die("function constant size mismatch");
        memcpy(msl_fconsts[i].p, c.second.data(), c.second.size());
        found = true;
      }
    if (!found)
      die("unknown function constant index");
  }
  unsigned nthreads = job.tg[0] * job.tg[1] * job.tg[2];
  if (nthreads == 0 || nthreads > 1024)
    die("threads per threadgroup must be 1..1024");
  unsigned long dyn = 0;
  for (auto &t : job.tgmem)
    dyn += t.second;
  if (k->tgstatic + dyn > kTGMemLimit)
    fail("threadgroup memory %lu bytes (threadgroup arrays declared in the kernel: %lu, setThreadgroupMemoryLength: "
         "%lu) exceeds the %lu bytes a threadgroup may use",
         k->tgstatic + dyn, k->tgstatic, dyn, kTGMemLimit);

  // With several orders, every order starts from the same inputs and must
  // leave the same outputs.
  std::vector<std::vector<unsigned char>> in, out;
  if (job.orders > 1)
    for (auto &b : job.bufs)
      in.emplace_back(b.p, b.p + b.size);
  for (unsigned ord = 0; ord < job.orders; ord++) {
    if (ord > 0)
      for (size_t i = 0; i < job.bufs.size(); i++)
        memcpy(job.bufs[i].p, in[i].data(), in[i].size());
    run_dispatch(job, k->fn, ord);
    if (job.orders == 1)
      break;
    if (ord == 0) {
      for (auto &b : job.bufs)
        out.emplace_back(b.p, b.p + b.size);
      continue;
    }
    for (size_t i = 0; i < job.bufs.size(); i++) {
      if (memcmp(job.bufs[i].p, out[i].data(), out[i].size()) == 0)
        continue;
      size_t at = 0;
      while (job.bufs[i].p[at] == out[i][at])
        at++;
      fail("race: buffer(%u) differs at byte %zu when the threads of each threadgroup run in %s order instead of "
           "forward: a thread reads memory another thread writes without a barrier between the write and the read "
           "(or the result depends on the order threads run)",
           job.bufs[i].index, at, order_name(ord));
    }
  }

  for (auto &b : job.bufs) {
    uint64_t sz = b.size;
    fwrite(&sz, 8, 1, o);
    fwrite(b.p, 1, b.size, o);
    free(b.p);
  }
  if (fflush(o) != 0)
    die("cannot write the output");
  return true;
}

// usage: harness JOB OUT   (one job from a file)
//        harness -serve    (jobs on stdin, results on stdout, until EOF)
int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "-serve") == 0) {
    while (run_job(stdin, stdout)) {
    }
    return 0;
  }
  if (argc != 3)
    die("usage: harness JOB OUT | harness -serve");
  FILE *f = fopen(argv[1], "rb");
  if (!f)
    die("cannot open job file");
  FILE *o = fopen(argv[2], "wb");
  if (!o)
    die("cannot create output file");
  if (!run_job(f, o))
    die("empty job file");
  fclose(f);
  if (fclose(o) != 0)
    die("cannot write output file");
  return 0;
}

// ---- tensor operations (include/MetalPerformancePrimitives) -------------------
// msl_rt_thread reports the calling thread's index in its threadgroup and the
// threadgroup's size: the emulated tensor operations give each thread of an
// operation's scope its own elements of a cooperative tensor.
extern "C" void msl_rt_thread(unsigned *index, unsigned *nthreads) {
  *index = cur->index;
  *nthreads = W->nthreads;
}

// msl_rt_fail stops the run with msg about the current kernel and group
// (the shim's own checks: thread_elements() in msl_shim.h).
extern "C" void msl_rt_fail(const char *msg) { fail("%s", msg); }
