package shaders_test

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// tensorFormats are the weight formats of the M5 path (tensor.metal).
var tensorFormats = []string{"f16", "q8_0", "q5_K", "mlx4", "mlx8"}

// Weights are staged as half: a value is within 2^-11 of itself relative,
// or 2^-25 absolute below half's normal range (f16 weights are exact), and
// the products are summed in f32 (the 2e-6 of the other matmul tests).
const (
	halfRel = 1.0 / 2048
	halfAbs = 1.0 / (1 << 25)
	sumRel  = 2e-6
)

func fmtByName(t *testing.T, name string) fmtInfo {
	for _, f := range formats {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no format %s", name)
	return fmtInfo{}
}

// mulMmTCase checks mul_mm_t_<f> against the float64 product of the exact
// dequantization, on shapes that are not tile multiples (rows, tokens and,
// for f16, K) and on the model's shapes (hidden 2048, expert FFN 768).
func mulMmTCase(name string) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		f := fmtByName(t, name)
		shapes := []struct{ M, N, K int }{
			{70, 37, 256},   // one partial row tile and token tile
			{64, 133, 512},  // whole row tile, a second token tile of 5
			{130, 128, 256}, // three row tiles (the last of 2), one full token tile
		}
		switch name {
		case "q5_K":
			shapes = append(shapes, struct{ M, N, K int }{768, 133, 2048}) // an expert's gate/up
		case "q8_0":
			shapes = append(shapes, struct{ M, N, K int }{2048, 130, 768}) // an expert's down
		case "f16":
			shapes = append(shapes, struct{ M, N, K int }{67, 41, 101}, struct{ M, N, K int }{64, 40, 2048})
		}
		for _, sh := range shapes {
			M, N, K := sh.M, sh.N, sh.K
			w := makeWeights(t, rng, f, M, K)
			xStride, yStride := K+3, M+1
			x := randF32(rng, N*xStride, 1)
			y := nanF32(N * yStride)
			args := matmulArgs(w, N, xStride, yStride)
			kname := "mul_mm_t_" + name
			out := runJob(t, h, &mslemu.Job{Kernel: kname, Grid: [3]int{groups(N, 128), groups(M, 64), 1}, Group: [3]int{128, 1, 1},
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: w.data}, {Index: 2, Data: w.sc},
					{Index: 3, Data: w.bi}, {Index: 4, Data: mslemu.F32(x)}, {Index: 5, Data: mslemu.F32(y)}}})
			got := mslemu.ToF32(out[5])
			want, abs := matmulRef(w, x, xStride, func(n int) int { return n }, N)
			rel := sumRel
			if name != "f16" {
				rel += halfRel
			}
			bad := 0
			for n := 0; n < N; n++ {
				var sx float64
				for k := 0; k < K; k++ {
					sx += math.Abs(float64(x[n*xStride+k]))
				}
				for m := 0; m < M; m++ {
					g, wv := float64(got[n*yStride+m]), want[n*M+m]
					bound := rel*abs[n*M+m] + halfAbs*sx
					if name == "f16" {
						bound = rel*abs[n*M+m] + 1e-30
					}
					if d := math.Abs(g - wv); !(d <= bound) {
						if bad < 5 {
							t.Errorf("%s %dx%dx%d: y[%d][%d] = %g, want %g (bound %g)", kname, M, N, K, n, m, g, wv, bound)
						}
						bad++
					}
				}
				if !math.IsNaN(float64(got[n*yStride+M])) {
					t.Fatalf("%s %dx%dx%d wrote into the row padding of token %d", kname, M, N, K, n)
				}
			}
			if bad > 0 {
				t.Errorf("%s %dx%dx%d: %d of %d outputs off", kname, M, N, K, bad, M*N)
			}
		}
	}
}

// tensorMoEFormats are the expert formats of the tensor path's MoE
// (tensor_moe.metal): every format whose shader MoE kernels stage half
// tiles (all but f32 and bf16).
var tensorMoEFormats = []string{"f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "q6_K", "q5_K", "q4_K", "q3_K", "q2_K", "mlx4", "mlx8"}

// realShapeT is the thinker's MoE (hidden 2048, 128 experts top-8, expert
// FFN 768) at T tokens, each routed to a random top-8 of the first 16
// experts (so only 16 need bytes and every expert gets ~T/2 entries: full
// and partial 64-token tiles), two row tiles launched, one fiber order,
// checked against the reference and, with twin, against the shader kernel.
func realShapeT(gu bool, T int, twin string) moeShape {
	s := realShape(gu)
	s.T, s.twin = T, twin
	s.ids = func(rng *rand.Rand) []int32 {
		ids := make([]int32, T*8)
		for t := 0; t < T; t++ {
			for j, e := range rng.Perm(16)[:8] {
				ids[t*8+j] = int32(e)
			}
		}
		return ids
	}
	return s
}

func init() {
	for _, f := range tensorFormats {
		register("mul_mm_t_"+f, mulMmTCase(f))
	}
	for _, f := range formats {
		if !slices.Contains(tensorMoEFormats, f.name) {
			continue
		}
		gu, down := moeShapes(f, 45), moeShapes(f, 70)
		if f.name == "q4_K" {
			gu = append(gu, realShape(true), realShapeT(true, 1, ""), realShapeT(true, 65, "moe_gu_q4_K"), realShapeT(true, 600, "moe_gu_q4_K"))
			down = append(down, realShape(false), realShapeT(false, 1, ""), realShapeT(false, 65, "moe_down_q4_K"),
				realShapeT(false, 600, "moe_down_q4_K"))
		}
		register("moe_gu_t_"+f.name, moeGuCase("moe_gu_t_", f, gu))
		register("moe_down_t_"+f.name, moeDownCase("moe_down_t_", f, down))
	}
}

// TestTensorLibrary: the tensor kernels make a library of their own, kept
// out of the one compiled on every Mac (which must not need MSL 4).
func TestTensorLibrary(t *testing.T) {
	lib, err := shaders.Library()
	if err != nil {
		t.Fatal(err)
	}
	tl, err := shaders.TensorLibrary()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"metal_tensor", "MetalPerformancePrimitives", "mul_mm_t_", "mul_mm_t8_", "kernel void quant_q8k_rows", "moe_gu_t_", "moe_down_t_", "flash_attn_t_", "kernel void attn_limbs_"} {
		if strings.Contains(lib, bad) {
			t.Errorf("Library() holds %q: it would not compile before MSL 4", bad)
		}
	}
	for _, f := range tensorFormats {
		if !strings.Contains(tl, "kernel void mul_mm_t_"+f+"(") {
			t.Errorf("TensorLibrary() lacks mul_mm_t_%s", f)
		}
	}
	for _, k := range []string{"mul_mm_t8_q4_K", "mul_mm_t8_q6_K", "moe_gu_t8_q4_K", "moe_down_t8_q4_K", "moe_gu_t8_q6_K", "moe_down_t8_q6_K",
		"quant_q8k_rows", "quant_q8k_rows_h"} {
		if !strings.Contains(tl, "kernel void "+k+"(") {
			t.Errorf("TensorLibrary() lacks %s", k)
		}
	}
	if strings.Contains(tl, `#include "`) || !strings.Contains(tl, "struct fmt_q4_K") {
		t.Error("TensorLibrary() does not inline its local includes")
	}
	for _, f := range tensorMoEFormats {
		for _, k := range []string{"moe_gu_t_", "moe_down_t_"} {
			if !strings.Contains(tl, "kernel void "+k+f+"(") {
				t.Errorf("TensorLibrary() lacks %s%s", k, f)
			}
		}
	}
	for _, k := range []string{"attn_limbs_qk", "attn_limbs_v"} {
		if !strings.Contains(tl, "kernel void "+k+"(") {
			t.Errorf("TensorLibrary() lacks %s", k)
		}
	}
	if !strings.Contains(tl, "kernel void flash_attn_t_d128(") {
		t.Error("TensorLibrary() lacks flash_attn_t_d128")
	}
	if got := shaders.TensorFiles(); !slices.Equal(got, []string{"tensor.metal", "tensor_attn.metal", "tensor_moe.metal", "tensor_q8.metal"}) {
		t.Errorf("TensorFiles() = %v", got)
	}
}

// tensorProbes exercise the emulated tensor operations themselves (the
// shim's MetalPerformancePrimitives.h): a correct kernel and kernels with
// the mistakes the emulation must not let through.
const tensorProbes = `#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;

// y [n][m] = x [n][k] * w [m][k]^T through threadgroup memory, 20 x 24 x 40.
#define PM 20
#define PN 24
#define PK 40
static inline void probe(device const float *x, device const float *w, device float *y, threadgroup half *sw,
                         threadgroup float *sx, ushort tid, bool barrier, bool zero) {
  for (int i = tid; i < PM * PK; i += 128) {
    sw[i] = half(w[i]);
  }
  for (int i = tid; i < PN * PK; i += 128) {
    sx[i] = x[i];
  }
  if (barrier) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(32, 32, static_cast<int>(dynamic_extent), false, true,
                                                             false, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
  mpp::tensor_ops::matmul2d<desc, execution_simdgroups<4>> mm;
  auto tx = tensor(sx, dextents<int32_t, 2>(PK, PN));
  auto tw = tensor(sw, dextents<int32_t, 2>(PK, PM));
  auto c = mm.get_destination_cooperative_tensor<decltype(tx), decltype(tw), float>();
  if (zero) {
    for (ushort i = 0; i < c.get_capacity(); i++) {
      if (c.is_valid_element(i)) {
        c[i] = 0.0f;
      }
    }
  }
  mm.run(tx, tw, c);
  c.store(tensor(y, dextents<int32_t, 2>(PM, PN)));
}

// The same product in two k halves staged through the same buffers: the
// second staging must wait until every thread's run() has read the first.
static inline void probe2(device const float *x, device const float *w, device float *y, threadgroup half *sw,
                          threadgroup float *sx, ushort tid, bool after) {
  constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(32, 32, static_cast<int>(dynamic_extent), false, true,
                                                             false, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
  mpp::tensor_ops::matmul2d<desc, execution_simdgroups<4>> mm;
  auto tx = tensor(sx, dextents<int32_t, 2>(PK / 2, PN));
  auto tw = tensor(sw, dextents<int32_t, 2>(PK / 2, PM));
  auto c = mm.get_destination_cooperative_tensor<decltype(tx), decltype(tw), float>();
  for (ushort i = 0; i < c.get_capacity(); i++) {
    if (c.is_valid_element(i)) {
      c[i] = 0.0f;
    }
  }
  for (int h = 0; h < 2; h++) {
    for (int i = tid; i < PM * PK / 2; i += 128) {
      sw[i] = half(w[(i / (PK / 2)) * PK + h * (PK / 2) + i % (PK / 2)]);
    }
    for (int i = tid; i < PN * PK / 2; i += 128) {
      sx[i] = x[(i / (PK / 2)) * PK + h * (PK / 2) + i % (PK / 2)];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    mm.run(tx, tw, c);
    if (after) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  c.store(tensor(y, dextents<int32_t, 2>(PM, PN)));
}

// yi [n][m] (+)= xi [n][k] * wi [m][k]^T in int8 x int8 -> int32, operands
// read straight from device memory.
static inline void probe_i8(device const int8_t *xi, device const int8_t *wi, device int32_t *yi, bool accumulate) {
  constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(32, 32, static_cast<int>(dynamic_extent), false, true,
                                                             false, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
  mpp::tensor_ops::matmul2d<desc, execution_simdgroups<4>> mm;
  auto tx = tensor((device int8_t *)xi, dextents<int32_t, 2>(PK, PN));
  auto tw = tensor((device int8_t *)wi, dextents<int32_t, 2>(PK, PM));
  auto ty = tensor(yi, dextents<int32_t, 2>(PM, PN));
  auto c = mm.get_destination_cooperative_tensor<decltype(tx), decltype(tw), int32_t>();
  if (accumulate) {
    c.load(ty);
  } else {
    for (ushort i = 0; i < c.get_capacity(); i++) {
      if (c.is_valid_element(i)) {
        c[i] = 0;
      }
    }
  }
  mm.run(tx, tw, c);
  c.store(ty);
}
kernel void tensor_i8(device const int8_t *xi [[buffer(0)]], device const int8_t *wi [[buffer(1)]], device int32_t *yi [[buffer(2)]]) {
  probe_i8(xi, wi, yi, false);
}
kernel void tensor_i8_acc(device const int8_t *xi [[buffer(0)]], device const int8_t *wi [[buffer(1)]], device int32_t *yi [[buffer(2)]]) {
  probe_i8(xi, wi, yi, true);
}

#define PROBE_PARAMS device const float *x [[buffer(0)]], device const float *w [[buffer(1)]], device float *y [[buffer(2)]], \
  ushort tid [[thread_index_in_threadgroup]]
kernel void tensor_ok(PROBE_PARAMS) {
  threadgroup half sw[PM * PK];
  threadgroup float sx[PN * PK];
  probe(x, w, y, sw, sx, tid, true, true);
}
kernel void tensor_no_barrier(PROBE_PARAMS) {
  threadgroup half sw[PM * PK];
  threadgroup float sx[PN * PK];
  probe(x, w, y, sw, sx, tid, false, true);
}
kernel void tensor_halves(PROBE_PARAMS) {
  threadgroup half sw[PM * PK / 2];
  threadgroup float sx[PN * PK / 2];
  probe2(x, w, y, sw, sx, tid, true);
}
kernel void tensor_halves_no_barrier_after(PROBE_PARAMS) {
  threadgroup half sw[PM * PK / 2];
  threadgroup float sx[PN * PK / 2];
  probe2(x, w, y, sw, sx, tid, false);
}
kernel void tensor_no_zero(PROBE_PARAMS) {
  threadgroup half sw[PM * PK];
  threadgroup float sx[PN * PK];
  probe(x, w, y, sw, sx, tid, true, false);
}
`

// tensorProbeHarness builds tensorProbes for the emulator, closed when the
// test ends; it skips where clang is missing.
func tensorProbeHarness(t *testing.T) *mslemu.Harness {
	t.Helper()
	if !mslemu.Available() {
		t.Skipf("%s not found", mslemu.Clang)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "tensor_probes.metal")
	if err := os.WriteFile(src, []byte(tensorProbes), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := mslemu.Build(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestTensorOpsEmulation: the emulated matmul2d computes the product (each
// thread its own elements), and a missing barrier before run(), an
// accumulator never zeroed and a scope of the wrong size are caught.
func TestTensorOpsEmulation(t *testing.T) {
	h := tensorProbeHarness(t)
	const pm, pn, pk = 20, 24, 40
	rng := rand.New(rand.NewSource(7))
	x, w := randF32(rng, pn*pk, 1), randF32(rng, pm*pk, 1)
	job := func(kernel string, threads int) *mslemu.Job {
		return &mslemu.Job{Kernel: kernel, Grid: [3]int{1, 1, 1}, Group: [3]int{threads, 1, 1}, Orders: mslemu.RaceOrders,
			Buffers: []mslemu.Buffer{{Index: 0, Data: mslemu.F32(x)}, {Index: 1, Data: mslemu.F32(w)}, {Index: 2, Data: mslemu.F32(nanF32(pm * pn))}}}
	}
	for _, k := range []string{"tensor_ok", "tensor_halves"} {
		out, err := h.Run(job(k, 128))
		if err != nil {
			t.Fatal(err)
		}
		got := mslemu.ToF32(out[2])
		for n := 0; n < pn; n++ {
			for m := 0; m < pm; m++ {
				var s, a float64
				for k := 0; k < pk; k++ {
					p := float64(x[n*pk+k]) * float64(float16(w[m*pk+k]))
					s += p
					a += math.Abs(p)
				}
				if d := math.Abs(float64(got[n*pm+m]) - s); !(d <= 2e-6*a) {
					t.Fatalf("%s: y[%d][%d] = %g, want %g", k, n, m, got[n*pm+m], s)
				}
			}
		}
	}
	for _, c := range []struct {
		kernel  string
		threads int
		want    string
	}{
		{"tensor_no_barrier", 128, "race"},
		{"tensor_halves_no_barrier_after", 128, "race"},
		{"tensor_ok", 64, "execution_simdgroups<4> in a threadgroup of 64 threads"},
	} {
		if _, err := h.Run(job(c.kernel, c.threads)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %d threads: got %v, want an error with %q", c.kernel, c.threads, err, c.want)
		}
	}
	// Accumulating into a cooperative tensor never set gives NaN (a new one
	// is not zero).
	out, err := h.Run(job("tensor_no_zero", 128))
	if err != nil {
		t.Fatal(err)
	}
	nan := 0
	for _, v := range mslemu.ToF32(out[2]) {
		if math.IsNaN(float64(v)) {
			nan++
		}
	}
	if nan != pm*pn {
		t.Errorf("tensor_no_zero: %d of %d outputs NaN, want all", nan, pm*pn)
	}
}

// TestTensorOpsInt8: int8_t x int8_t -> int32_t matmul2d sums exactly
// (extreme codes -128 and 127 included, and in multiply_accumulate on top of
// the destination's value), and a sum outside int32 stops the run.
func TestTensorOpsInt8(t *testing.T) {
	h := tensorProbeHarness(t)
	const pm, pn, pk = 20, 24, 40
	rng := rand.New(rand.NewSource(8))
	codes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			switch rng.Intn(4) {
			case 0:
				b[i] = 0x80 // -128
			case 1:
				b[i] = 127
			default:
				b[i] = byte(rng.Intn(256))
			}
		}
		return b
	}
	x, w := codes(pn*pk), codes(pm*pk)
	init := make([]int32, pm*pn)
	for i := range init {
		init[i] = int32(rng.Intn(1<<20)) - 1<<19
	}
	run := func(kernel string, y0 []int32) ([]int32, error) {
		out, err := h.Run(&mslemu.Job{Kernel: kernel, Grid: [3]int{1, 1, 1}, Group: [3]int{128, 1, 1}, Orders: mslemu.RaceOrders,
			Buffers: []mslemu.Buffer{{Index: 0, Data: x}, {Index: 1, Data: w}, {Index: 2, Data: mslemu.I32(y0)}}})
		if err != nil {
			return nil, err
		}
		return mslemu.ToI32(out[2]), nil
	}
	for _, c := range []struct {
		kernel string
		acc    bool
	}{{"tensor_i8", false}, {"tensor_i8_acc", true}} {
		got, err := run(c.kernel, init)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < pn; n++ {
			for m := 0; m < pm; m++ {
				var s int64
				if c.acc {
					s = int64(init[n*pm+m])
				}
				for k := 0; k < pk; k++ {
					s += int64(int8(x[n*pk+k])) * int64(int8(w[m*pk+k]))
				}
				if int64(got[n*pm+m]) != s {
					t.Fatalf("%s: y[%d][%d] = %d, want %d", c.kernel, n, m, got[n*pm+m], s)
				}
			}
		}
	}
	// 40 products of (-128)(-128) on top of 2^31 - 2^16 leave int32.
	for i := range x {
		x[i] = 0x80
	}
	for i := range w {
		w[i] = 0x80
	}
	big := make([]int32, pm*pn)
	for i := range big {
		big[i] = 1<<31 - 1<<16
	}
	if _, err := run("tensor_i8_acc", big); err == nil || !strings.Contains(err.Error(), "overflows") {
		t.Errorf("an int32 sum past 2^31: got %v, want an error naming the overflow", err)
	}
}

// float16 rounds v to the nearest half (ties to even), as half(v) does.
func float16(v float32) float32 {
	if v == 0 || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return v
	}
	e := math.Floor(math.Log2(math.Abs(float64(v))))
	if e < -14 {
		e = -14 // subnormal spacing 2^-24
	}
	ulp := math.Ldexp(1, int(e)-10)
	return float32(math.RoundToEven(float64(v)/ulp) * ulp)
}

var _ = fmt.Sprint
