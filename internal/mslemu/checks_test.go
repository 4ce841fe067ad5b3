package mslemu

import (
	"encoding/binary"
	"math"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
)

// The probes of testdata/checks.metal: what the emulator must report, or
// model as an Apple GPU does, and a correct twin of each that must run clean.

var (
	checksOnce sync.Once
	checks     *Harness
	checksErr  error
	checksDir  string
)

func buildChecks(t testing.TB) *Harness {
	t.Helper()
	if !Available() {
		t.Skipf("%s not found", Clang)
	}
	checksOnce.Do(func() {
		checksDir, checksErr = os.MkdirTemp("", "emu-checks")
		if checksErr != nil {
			return
		}
		checks, checksErr = Build(checksDir, "testdata/checks.metal")
		if checksErr == nil {
			checks.Orders = RaceOrders
		}
	})
	if checksErr != nil {
		t.Fatal(checksErr)
	}
	return checks
}

// wantReport runs job and fails unless the emulator reports an error that
// names the kernel and contains every one of want.
func wantReport(t *testing.T, h *Harness, job *Job, want ...string) {
	t.Helper()
	_, err := h.Run(job)
	if err == nil {
		t.Fatalf("%s: no error, want one containing %q", job.Kernel, want)
	}
	msg := err.Error()
	t.Logf("reported: %s", msg)
	for _, w := range append([]string{"kernel " + job.Kernel}, want...) {
		if !strings.Contains(msg, w) {
			t.Fatalf("%s: error %q does not contain %q", job.Kernel, msg, w)
		}
	}
}

func mode(m int32) Buffer { return Buffer{Index: 0, Data: I32([]int32{m})} }

// Collectives in divergent branches combine the lanes active in the branch
// only (before: lanes in the two branches met in one collective).
func TestSimdDivergentBranches(t *testing.T) {
	h := buildChecks(t)
	const n = 48 // a full simdgroup and one of 16 lanes
	rng := rand.New(rand.NewSource(1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.Intn(13) - 4) // small integers: sums are exact in any order
	}
	out, err := h.Run(&Job{Kernel: "probe_simd_branch", Grid: [3]int{1, 1, 1}, Group: [3]int{n, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: F32(x)}, {Index: 1, Data: F32(make([]float32, 8*n))}}})
	if err != nil {
		t.Fatal(err)
	}
	got := ToF32(out[1])
	for tid := 0; tid < n; tid++ {
		sg, lane := tid/32, tid%32
		lo, hi := 32*sg, min(32*sg+32, n)
		// over returns f folded over the lanes of this simdgroup that satisfy in.
		over := func(in func(l int) bool, f func(acc, v float32) float32, init float32) float32 {
			acc := init
			for i := lo; i < hi; i++ {
				if in(i - lo) {
					acc = f(acc, x[i])
				}
			}
			return acc
		}
		sum := func(a, v float32) float32 { return a + v }
		all := func(int) bool { return true }
		want := make([]float32, 8)
		if lane < 12 {
			want[0] = over(func(l int) bool { return l < 12 }, sum, 0)
		} else {
			want[0] = over(func(l int) bool { return l >= 12 }, func(a, v float32) float32 { return max(a, v) }, -1e30)
		}
		if lane%3 == 0 {
			want[1] = over(func(l int) bool { return l%3 == 0 && l < lane }, sum, 0)
		}
		want[2] = over(all, sum, 0)
		for i := 0; i <= lane%4; i++ {
			in := func(l int) bool { return l%4 >= i }
			want[3] += over(in, sum, 0) + float32(i)*over(in, func(a, _ float32) float32 { return a + 1 }, 0)
		}
		lanes := hi - lo
		switch {
		case lane >= 16 && (lane^1) < lanes:
			want[4] = x[lo+(lane^1)]
		case lane >= 16:
			want[4] = x[tid] // lane^1 does not exist: the caller's own value
		default:
			want[4] = x[lo+3]
		}
		if lane&1 == 1 {
			want[5] = 1
			for l := 1; l < lanes; l += 2 {
				if x[lo+l] <= -2 {
					want[5] = 0
				}
			}
		} else {
			for l := 0; l < lanes; l += 2 {
				if x[lo+l] > 2.5 {
					want[5] = 1
				}
			}
		}
		if lane >= 20 {
			want[6], want[7] = -1, -1
		} else {
			want[6] = over(func(l int) bool { return l < 20 }, func(a, v float32) float32 { return min(a, v) }, 1e30)
			want[7] = over(func(l int) bool { return l <= lane }, sum, 0)
		}
		for k, w := range want {
			if g := got[8*tid+k]; g != w {
				t.Errorf("thread %d result %d = %g, want %g", tid, k, g, w)
			}
		}
	}
}

func TestBarrierCallSites(t *testing.T) {
	h := buildChecks(t)
	job := func(m int32) *Job {
		return &Job{Kernel: "probe_barrier", Grid: [3]int{2, 1, 1}, Group: [3]int{64, 1, 1},
			Buffers: []Buffer{mode(m), {Index: 1, Data: F32(make([]float32, 64))}}}
	}
	out, err := h.Run(job(0))
	if err != nil {
		t.Fatalf("one barrier after the branch: %v", err)
	}
	for i, v := range ToF32(out[1]) {
		if want := float32(1 + (63-i)/32); v != want {
			t.Fatalf("twin: out[%d] = %g, want %g", i, v, want)
		}
	}
	wantReport(t, h, job(1), "threadgroup_barrier reached from different call sites", "checks.metal:")
	wantReport(t, h, job(2), "threadgroup_barrier", "reached from different call sites", "helper")
	wantReport(t, h, job(3), "simdgroup_barrier at checks.metal:", "not reached by every lane")
	wantReport(t, h, job(4), "simdgroup_barrier at checks.metal:", "not reached by every lane")
}

func TestRaceWithoutBarrier(t *testing.T) {
	h := buildChecks(t)
	const n = 96
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	job := func(barrier int32) *Job {
		return &Job{Kernel: "probe_race", Grid: [3]int{3, 1, 1}, Group: [3]int{n, 1, 1},
			Buffers: []Buffer{{Index: 0, Data: F32(x)}, {Index: 1, Data: F32(make([]float32, n))},
				{Index: 2, Data: I32([]int32{barrier})}}}
	}
	out, err := h.Run(job(1))
	if err != nil {
		t.Fatalf("with the barrier: %v", err)
	}
	for i, v := range ToF32(out[1]) {
		if want := 2 * x[(i+1)%n]; v != want {
			t.Fatalf("with the barrier: out[%d] = %g, want %g", i, v, want)
		}
	}
	wantReport(t, h, job(0), "race: buffer(1) differs", "reverse order")
	// One order cannot see it: the option is what catches it.
	one := job(0)
	one.Orders = 1
	if _, err := h.Run(one); err != nil {
		t.Fatalf("one fiber order: %v", err)
	}
}

func TestThreadgroupMemoryTotal(t *testing.T) {
	h := buildChecks(t)
	job := func(dyn int) *Job {
		return &Job{Kernel: "probe_tgmem", Grid: [3]int{1, 1, 1}, Group: [3]int{32, 1, 1}, TGMem: map[int]int{0: dyn},
			Buffers: []Buffer{{Index: 0, Data: F32(make([]float32, 32))}}}
	}
	// 16 KiB in the kernel + 8 KiB in the helper it calls + 8 KiB dynamic: exactly 32 KiB.
	out, err := h.Run(job(8192))
	if err != nil {
		t.Fatalf("32 KiB in all: %v", err)
	}
	var s float32
	for i := 0; i < 32; i++ {
		s += float32(31-i) + 1
	}
	for i, v := range ToF32(out[0]) {
		if v != s {
			t.Fatalf("out[%d] = %g, want %g", i, v, s)
		}
	}
	wantReport(t, h, job(8208), "threadgroup memory 32784 bytes", "declared in the kernel: 24576", "setThreadgroupMemoryLength: 8208")
	wantReport(t, h, &Job{Kernel: "probe_tgmem_static", Grid: [3]int{1, 1, 1}, Group: [3]int{32, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: F32(make([]float32, 32))}}}, "threadgroup memory 36864 bytes")
	for _, k := range h.Kernels {
		if k.Name == "probe_tgmem" && len(k.TGArrays) != 2 {
			t.Errorf("probe_tgmem: threadgroup arrays %q, want big and part", k.TGArrays)
		}
	}
}

// half arithmetic rounds to fp16 after every operation (before: clang kept
// each expression in float and rounded once).
func TestHalfRounding(t *testing.T) {
	h := buildChecks(t)
	in := [][4]float32{{2048, 1, 1, 3}, {1000, 100, 100, 2}, {0.1, 0.2, 0.3, 0.7}, {300, 299.5, 1.001, 65000}}
	rng := rand.New(rand.NewSource(2))
	for range 60 {
		var r [4]float32
		for i := range r {
			r[i] = roundF16(float32(rng.NormFloat64() * 40))
		}
		in = append(in, r)
	}
	for i := range in {
		for k := range in[i] {
			in[i][k] = roundF16(in[i][k]) // what the kernel reads
		}
	}
	var x []uint16
	for _, r := range in {
		for _, v := range r {
			x = append(x, f16bits(v))
		}
	}
	out, err := h.Run(&Job{Kernel: "probe_half", Grid: [3]int{len(in), 1, 1}, Group: [3]int{1, 1, 1},
		Buffers: []Buffer{{Index: 0, Data: u16le(x)}, {Index: 1, Data: make([]byte, 2*len(x))}}})
	if err != nil {
		t.Fatal(err)
	}
	got := out[1]
	excess := 0 // results that rounding once per expression would get wrong
	for i, r := range in {
		a, b, c, d := float64(r[0]), float64(r[1]), float64(r[2]), float64(r[3])
		q := func(v float64) float64 { return float64(roundF16(float32(v))) }
		wx, wy := q(q(a*a)+a), q(q(b*b)+b)
		want := []float64{q(q(a+b) + c), q(q(a*b) / c), q(wx + wy), q(q(a-b) * q(c+d))}
		once := []float64{q(a + b + c), q(a * b / c), q(a*a + a + b*b + b), q((a - b) * (c + d))}
		for k, w := range want {
			g := float64(f16float(binary.LittleEndian.Uint16(got[2*(4*i+k):])))
			if g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
				t.Errorf("input %v op %d = %g, want %g (fp16 after every operation)", r, k, g, w)
			}
			if once[k] != w {
				excess++
			}
		}
	}
	if excess == 0 {
		t.Fatal("no input tells per-operation rounding from rounding once: the test cannot fail")
	}
}

func TestSimdgroupMatrixUniform(t *testing.T) {
	h := buildChecks(t)
	const nsg = 2
	rng := rand.New(rand.NewSource(3))
	a := make([]float32, 64*nsg+8)
	for i := range a {
		a[i] = float32(rng.Intn(9) - 4)
	}
	job := func(m int32) *Job {
		return &Job{Kernel: "probe_mma", Grid: [3]int{1, 1, 1}, Group: [3]int{32 * nsg, 1, 1},
			Buffers: []Buffer{mode(m), {Index: 1, Data: F32(a)}, {Index: 2, Data: F32(make([]float32, 64*nsg+8))}}}
	}
	out, err := h.Run(job(0))
	if err != nil {
		t.Fatalf("uniform addresses: %v", err)
	}
	got := ToF32(out[2])
	for s := 0; s < nsg; s++ {
		for i := 0; i < 8; i++ {
			for j := 0; j < 8; j++ {
				var w float32
				for k := 0; k < 8; k++ {
					w += a[64*s+8*i+k] * a[64*s+8*k+j]
				}
				if g := got[64*s+8*i+j]; g != w {
					t.Fatalf("simdgroup %d: p[%d][%d] = %g, want %g", s, i, j, g, w)
				}
			}
		}
	}
	wantReport(t, h, job(1), "simdgroup_load at checks.metal:", "arguments depend on the lane")
	wantReport(t, h, job(2), "simdgroup_load at checks.metal:", "arguments depend on the lane")
	wantReport(t, h, job(3), "simdgroup_multiply at checks.metal:", "the product differs between lanes")
	wantReport(t, h, job(4), "simdgroup_store at checks.metal:", "arguments depend on the lane")
	wantReport(t, h, job(5), "lane-divergent control flow")
}

// ---- fp16 helpers --------------------------------------------------------------

// f16bits rounds f to the nearest fp16 (ties to even) and returns its bits.
func f16bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 31: // overflow (or infinity)
		return sign | 0x7c00
	case exp <= 0: // subnormal or zero
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		h := man >> shift
		rem, half := man&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, up to infinity: still right
	}
	return sign | uint16(h)
}

// f16float converts fp16 bits to float32 exactly.
func f16float(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, man := int(h>>10&0x1f), float32(h&0x3ff)
	switch exp {
	case 0:
		return sign * man * float32(math.Ldexp(1, -24))
	case 31:
		if man != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * (1 + man/1024) * float32(math.Ldexp(1, exp-15))
}

func roundF16(f float32) float32 { return f16float(f16bits(f)) }

func u16le(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func TestF16Helpers(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00}, {2049, 0x6800}, {2051, 0x6802},
		{float32(math.Ldexp(1, -24)), 0x0001}, {float32(math.Ldexp(1, -25)), 0}, {0.1, 0x2e66}} {
		if g := f16bits(c.in); g != c.want {
			t.Errorf("f16bits(%g) = %#04x, want %#04x", c.in, g, c.want)
		}
	}
	for h := 0; h < 0x7c00; h++ {
		if g := f16bits(f16float(uint16(h))); g != uint16(h) {
			t.Fatalf("round trip of %#04x = %#04x", h, g)
		}
	}
}

// The threadgroup arrays counted for a kernel: its own (adjacent declarations
// included), those of the functions it calls, each function once, and not
// those of functions it does not call or pointers to threadgroup memory.
func TestStaticTGMem(t *testing.T) {
	src := `
struct S { int x; };
static inline float helper(threadgroup float *p) { threadgroup int h[8]; return p[0]; }
static inline float unused() { threadgroup float u[1000]; return 0; }
namespace n { static inline void inner() { threadgroup short q[4][2]; } }
kernel void k(device float *y [[buffer(0)]]) {
  threadgroup float a[64 * 2];threadgroup int b[3]; threadgroup uint c[1];
  threadgroup float *pa = a;
  y[0] = helper(pa) + helper(a);
  inner();
}`
	expr, decls, err := staticTGMem(funcBodies(src), "k")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"float a[64*2] (in k)", "int b[3] (in k)", "uint c[1] (in k)", "int h[8] (in helper)", "short q[4][2] (in inner)"}
	if strings.Join(decls, "; ") != strings.Join(want, "; ") {
		t.Errorf("declarations %q, want %q", decls, want)
	}
	if wantExpr := "0ul + sizeof(float[64*2]) + sizeof(int[3]) + sizeof(uint[1]) + sizeof(int[8]) + sizeof(short[4][2])"; expr != wantExpr {
		t.Errorf("expression %q, want %q", expr, wantExpr)
	}
	if _, _, err := staticTGMem(funcBodies(src), "missing"); err == nil {
		t.Error("a kernel without a body was accepted")
	}
}

// BenchmarkSimdgroupMatrix runs probe_mma (a load, a product and a store per
// simdgroup, each checked across lanes) over 256 threadgroups in one order,
// as the Metal backend's emulated GPU does.
func BenchmarkSimdgroupMatrix(b *testing.B) {
	h := buildChecks(b)
	a := make([]float32, 64*4+8)
	job := &Job{Kernel: "probe_mma", Grid: [3]int{256, 1, 1}, Group: [3]int{128, 1, 1}, Orders: 1,
		Buffers: []Buffer{mode(0), {Index: 1, Data: F32(a)}, {Index: 2, Data: F32(make([]float32, len(a)))}}}
	for b.Loop() {
		if _, err := h.Run(job); err != nil {
			b.Fatal(err)
		}
	}
}
