// runtime.cpp: the CPU executor of the MSL emulation harness.
//
// usage: harness JOB OUT
//
// JOB (little-endian): "MSLJ", kernel name, grid[3], threadgroup[3], function
// constants, threadgroup-memory lengths, buffers. OUT receives every buffer,
// in job order, after the dispatch. Threadgroups are spread over worker OS
// threads; the threads of one threadgroup are fibers run cooperatively on one
// worker, so threadgroup memory is per worker and barriers are exact. A
// collective that not every participant reaches (a barrier under divergent
// control flow) is reported as an error instead of hanging.
#include <atomic>
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

enum Wait { NONE, TG, SIMD };

struct Fiber {
  jmp_buf jb;
  ucontext_t uc;
  void *stack = nullptr;
  bool started = false, done = false;
  Wait wait = NONE;
  unsigned wgen = 0, lane = 0, sg = 0;
  msl::ctx c;
};

struct SimdState {
  unsigned count = 0, gen = 0, active = 0, mask = 0;
  alignas(64) unsigned char slots[kSimd * 64];
};

struct Worker {
  jmp_buf sched;
  std::vector<Fiber> fibers;
  std::vector<SimdState> sgs;
  unsigned nthreads = 0, tg_count = 0, tg_gen = 0;
  unsigned long serial = 0; // threadgroups run by this worker
  void (*fn)(msl::ctx &) = nullptr;
};

thread_local Worker *W;
thread_local Fiber *cur;

[[noreturn]] void die(const char *msg) {
  fprintf(stderr, "msl-emu: %s\n", msg);
  fflush(stderr);
  _exit(3);
}

void yield_to_sched() {
  if (!_setjmp(cur->jb))
    _longjmp(W->sched, 1);
}

void fiber_main() {
  for (;;) {
    Fiber *f = cur;
    W->fn(f->c);
    f->done = true;
    SimdState &s = W->sgs[f->sg];
    s.active--;
    s.mask &= ~(1u << f->lane);
    if (s.count > 0 && s.count == s.active) {
      s.count = 0;
      s.gen++;
    }
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

bool runnable(Worker &w, Fiber &f) {
  if (f.done)
    return false;
  switch (f.wait) {
  case TG:
    return w.tg_gen != f.wgen;
  case SIMD:
    return w.sgs[f.sg].gen != f.wgen;
  default:
    return true;
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
};

void run_group(Worker &w, const Job &job, unsigned gx, unsigned gy, unsigned gz,
               std::vector<std::vector<unsigned char>> &tgmem) {
  unsigned n = w.nthreads;
  w.serial++;
  for (auto &m : tgmem)
    memset(m.data(), 0xff, m.size()); // uninitialised threadgroup memory reads as NaN
  unsigned nsg = (n + kSimd - 1) / kSimd;
  for (unsigned s = 0; s < nsg; s++) {
    w.sgs[s].count = 0;
    w.sgs[s].active = (s + 1) * kSimd <= n ? kSimd : n - s * kSimd;
    w.sgs[s].mask = w.sgs[s].active == 32 ? ~0u : (1u << w.sgs[s].active) - 1;
  }
  w.tg_count = 0;
  for (unsigned i = 0; i < n; i++) {
    Fiber &f = w.fibers[i];
    f.done = false;
    f.wait = NONE;
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
  }
  unsigned left = n;
  while (left > 0) {
    bool progressed = false;
    for (unsigned i = 0; i < n; i++) {
      Fiber &f = w.fibers[i];
      if (!runnable(w, f))
        continue;
      f.wait = NONE;
      resume(&f);
      progressed = true;
      if (f.done)
        left--;
    }
    if (!progressed) {
      unsigned at_tg = 0, at_simd = 0;
      for (unsigned i = 0; i < n; i++) {
        if (w.fibers[i].done)
          continue;
        if (w.fibers[i].wait == TG)
          at_tg++;
        else if (w.fibers[i].wait == SIMD)
          at_simd++;
      }
      char msg[256];
      snprintf(msg, sizeof msg,
               "kernel %s: collective not reached by every thread (group %u,%u,%u: %u threads wait at "
               "threadgroup_barrier, %u at a simd-group collective, %u finished)",
               job.name.c_str(), gx, gy, gz, at_tg, at_simd, n - left);
      die(msg);
    }
  }
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

} // namespace

extern "C" void msl_rt_threadgroup_barrier(void) {
  Worker &w = *W;
  unsigned g = w.tg_gen;
  if (++w.tg_count == w.nthreads) {
    w.tg_count = 0;
    w.tg_gen++;
    return;
  }
  cur->wait = TG;
  cur->wgen = g;
  yield_to_sched();
}

extern "C" void msl_rt_simd_sync(void) {
  SimdState &s = W->sgs[cur->sg];
  unsigned g = s.gen;
  if (++s.count == s.active) {
    s.count = 0;
    s.gen++;
    return;
  }
  cur->wait = SIMD;
  cur->wgen = g;
  yield_to_sched();
}

extern "C" void msl_rt_poison(void *p, unsigned long n, unsigned long *gen) {
  if (*gen != W->serial) {
    memset(p, 0xff, n);
    *gen = W->serial;
  }
}

extern "C" unsigned char *msl_rt_simd_slots(unsigned *lane, unsigned *mask) {
  SimdState &s = W->sgs[cur->sg];
  *lane = cur->lane;
  *mask = s.mask;
  return s.slots;
}

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
    if (idx > 30 || sz > 32768 || sz % 16 != 0)
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

  void (*fn)(msl::ctx &) = nullptr;
  for (int i = 0; i < msl_nkernels; i++)
    if (job.name == msl_kernels[i].name)
      fn = msl_kernels[i].fn;
  if (!fn)
    die(("no kernel named " + job.name).c_str());
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
    for (;;) {
      uint64_t g = next.fetch_add(1);
      if (g >= ngroups)
        break;
      unsigned gx = g % job.grid[0], gy = (g / job.grid[0]) % job.grid[1],
               gz = g / ((uint64_t)job.grid[0] * job.grid[1]);
      run_group(w, job, gx, gy, gz, tgmem);
    }
    for (auto &fb : w.fibers)
      munmap(fb.stack, kStack);
  };
  std::vector<std::thread> ts;
  for (unsigned i = 1; i < nw; i++)
    ts.emplace_back(work);
  work();
  for (auto &t : ts)
    t.join();

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
