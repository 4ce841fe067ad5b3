package shaders_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// The int8 tensor path (tensor_q8.metal): quant_q8k_rows must write quant's
// q8_K bytes exactly, and mul_mm_t8_q4_K and mul_mm_t8_q6_K must give
// quant.VecDot's value of every output (the same integers, the same float
// steps in the same order: the emulator does not contract them into fma).

const q8kBytes = 292 // bytes per q8_K block

// q8kRows returns rows x cols activations with the blocks that decide
// quant's q8_K bytes: a block of zeros (some -0), one whose largest
// magnitude is negative, ties of magnitude (the first wins: within a lane's
// 8 values and across lanes, either sign first), exact halves after scaling
// (round half to even), codes of exactly ±127, the ends of the range (float:
// scales 1e-30 and 1e30; half: its largest finite value and subnormals
// only) and one large value among small ones; the other blocks are random
// normals of scales 1e-3 to 1e3. With half the values are rounded to half
// (quant_q8k_rows_h's inputs: halfBytes gives their bytes). The x_stride
// padding holds the format's largest value, which changes a block's bytes
// if it is ever read.
func q8kRows(rng *rand.Rand, rows, cols, xStride int, half bool) []float32 {
	x := make([]float32, rows*xStride)
	pad := float32(1e30)
	if half {
		pad = 65504
	}
	for i := range x {
		x[i] = pad
	}
	nb := cols / 256
	special := 0
	for r := 0; r < rows; r++ {
		for b := 0; b < nb; b++ {
			v := x[r*xStride+256*b : r*xStride+256*b+256]
			scale := math.Pow(10, float64(rng.Intn(7)-3))
			for i := range v {
				v[i] = float32(rng.NormFloat64() * scale)
			}
			switch special % 10 {
			case 0: // zeros
				for i := range v {
					v[i] = 0
					if i%3 == 0 {
						v[i] = float32(math.Copysign(0, -1))
					}
				}
			case 1: // largest magnitude negative
				v[77] = -9 * float32(scale)
			case 2: // a tie: -a first (lanes 0 and 20), then +a
				v[5], v[163] = -7*float32(scale), 7*float32(scale)
			case 3: // a tie: +a first, -a in the same lane's 8
				v[40], v[43] = 7*float32(scale), -7*float32(scale)
			case 4: // is = 1 exactly: halves round to even
				for i := range v {
					v[i] = float32(rng.Intn(253)-126) + 0.5
				}
				v[0], v[9], v[100] = -127, 127, -0.5
				v[1], v[2], v[3], v[4] = 1.5, 2.5, -1.5, -2.5
			case 5: // is = -1: codes ±127 at ∓127
				for i := range v {
					v[i] = float32(rng.Intn(255) - 127)
				}
				v[200], v[201] = 127, -127
			case 6: // the largest magnitudes
				for i := range v {
					v[i] = float32(rng.NormFloat64() * 1e30)
					if half {
						v[i] = float32(rng.NormFloat64() * 1e4)
					}
				}
				if half {
					v[31] = -65504
				}
			case 7: // the smallest
				for i := range v {
					v[i] = float32(rng.NormFloat64() * 1e-30)
					if half { // subnormal halves only (multiples of 2^-24)
						v[i] = float32(math.Ldexp(float64(rng.Intn(2047)-1023), -24))
					}
				}
			case 8: // one value of the largest magnitude, the rest far smaller
				for i := range v {
					v[i] = float32(rng.NormFloat64() * 1e-3)
				}
				v[255] = 3
			}
			special++
		}
	}
	if half {
		halfBytes(x) // rounds x to half in place
	}
	return x
}

// quantQ8KCase checks quant_q8k_rows byte for byte against quant's q8_K
// quantization, with the bytes between output rows (y_stride padding) and
// after the last row left as they were.
func quantQ8KCase(kernel string, half bool) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range []struct{ rows, cols int }{{1, 256}, {3, 512}, {7, 1280}, {2, 2048}, {5, 768}} {
			if err := checkQuantQ8K(h, rng, kernel, sh.rows, sh.cols, half); err != nil {
				t.Error(err)
			}
		}
	}
}

func checkQuantQ8K(h *mslemu.Harness, rng *rand.Rand, kernel string, rows, cols int, half bool) error {
	nb := cols / 256
	xStride, yStride := cols+5, nb*q8kBytes+12
	x := q8kRows(rng, rows, cols, xStride, half)
	xb := mslemu.F32(x)
	if half {
		xb = halfBytes(x)
	}
	y := bytes.Repeat([]byte{0xa5}, (rows+1)*yStride)
	args := shaders.KargsQ8K{Rows: int32(rows), Cols: int32(cols), XStride: int32(xStride), YStride: int32(yStride)}
	out, err := h.Run(&mslemu.Job{Kernel: kernel, Grid: [3]int{groups(rows*nb, 4), 1, 1}, Group: [3]int{128, 1, 1},
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: xb}, {Index: 2, Data: y}}})
	if err != nil {
		return err
	}
	got := out[2]
	want := bytes.Clone(y)
	for r := 0; r < rows; r++ {
		if err := quant.QuantizeActivations(quant.Q8_K, want[r*yStride:], x[r*xStride:r*xStride+cols]); err != nil {
			return err
		}
	}
	for i := range want {
		if got[i] != want[i] {
			r, o := i/yStride, i%yStride
			return fmt.Errorf("%s %dx%d: row %d byte %d (block %d, offset %d) = %#02x, want %#02x", kernel, rows, cols, r, o,
				o/q8kBytes, o%q8kBytes, got[i], want[i])
		}
	}
	return nil
}

// t8Format is a weight format of the int8 tensor kernels (mul_mm_t8_<name>,
// moe_gu_t8_<name>, moe_down_t8_<name>): every test of those kernels runs
// its one table over each.
type t8Format struct {
	name  string // the kernels' suffix and the fixture's format
	typ   quant.Type
	block int // bytes per super-block of 256
	// extreme sets super-block b of a row (blk, its bytes) to the integer
	// extreme of the kernels' int32 bounds, with the float scales d (and
	// dmin): against x codes of one sign every sub-block's sum takes the
	// largest magnitude its scale multiplies.
	extreme func(blk []byte, b int, d, dmin float32)
}

var t8Formats = []t8Format{
	// q4_K: every scale and minimum 63, every code 15.
	{name: "q4_K", typ: quant.Q4_K, block: 144, extreme: func(blk []byte, b int, d, dmin float32) {
		binary.LittleEndian.PutUint16(blk[0:], quant.Float32ToFloat16(d))
		binary.LittleEndian.PutUint16(blk[2:], quant.Float32ToFloat16(dmin))
		for i := 4; i < 144; i++ {
			blk[i] = 0xff
		}
	}},
	// q6_K: even blocks every code -32 (ql, qh 0) and every scale -128,
	// odd ones every code 31 (ql, qh 0xff) and every scale 127.
	{name: "q6_K", typ: quant.Q6_K, block: 210, extreme: func(blk []byte, b int, d, _ float32) {
		code, scale := byte(0), byte(0x80)
		if b%2 == 1 {
			code, scale = 0xff, 0x7f
		}
		for i := 0; i < 192; i++ {
			blk[i] = code
		}
		for i := 192; i < 208; i++ {
			blk[i] = scale
		}
		binary.LittleEndian.PutUint16(blk[208:], quant.Float32ToFloat16(d))
	}},
}

// t8x holds weights of one t8Format and q8_K activations for mul_mm_t8_*.
type t8x struct {
	f                t8Format
	M, N, K          int
	w                *weights
	xq               []byte // N rows of xStride bytes
	xStride, yStride int
}

// newT8x makes M x K weights of f from llama.cpp's blocks with row 0 at
// the integer extreme (f.extreme), and N rows of activations quantized by
// quant, token 0 a constant row (every code -127), so that row 0 x token 0
// reaches the largest integer sums the kernel's int32 bound allows for; the
// row padding of x holds random bytes.
func newT8x(t *testing.T, rng *rand.Rand, f t8Format, M, N, K int) *t8x {
	c := &t8x{f: f, M: M, N: N, K: K}
	c.w = makeWeights(t, rng, fmtByName(t, f.name), M, K)
	for b := 0; b < K/256; b++ {
		f.extreme(c.w.data[f.block*b:f.block*(b+1)], b, 0.01, 0.02)
	}
	nb := K / 256
	c.xStride = nb*q8kBytes + 8
	c.yStride = M + 3
	c.xq = make([]byte, N*c.xStride)
	rng.Read(c.xq)
	x := randF32(rng, N*K, 1)
	for k := 0; k < K; k++ {
		x[k] = 0.75
	}
	for n := 0; n < N; n++ {
		if err := quant.QuantizeActivations(quant.Q8_K, c.xq[n*c.xStride:], x[n*K:n*K+K]); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *t8x) kernel() string { return "mul_mm_t8_" + c.f.name }

// run launches mul_mm_t8_* over y of N+2 rows of yStride floats, all NaN,
// and returns them.
func (c *t8x) run(t *testing.T, h *mslemu.Harness, orders int) []float32 {
	args := shaders.KargsMatmul{M: int32(c.M), N: int32(c.N), K: int32(c.K), XStride: int32(c.xStride), YStride: int32(c.yStride),
		RowBytes: uint64(c.w.rowBytes)}
	out := runJob(t, h, &mslemu.Job{Kernel: c.kernel(), Grid: [3]int{groups(c.N, 64), groups(c.M, 64), 1},
		Group: [3]int{128, 1, 1}, Orders: orders,
		Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: c.w.data}, {Index: 2, Data: c.xq},
			{Index: 3, Data: mslemu.F32(nanF32((c.N + 2) * c.yStride))}}})
	return mslemu.ToF32(out[3])
}

// check compares y with quant.VecDot bit for bit (and reports the largest
// difference in ulps), and the guard bands (row padding, the rows after N)
// with NaN.
func (c *t8x) check(t *testing.T, got []float32) {
	t.Helper()
	k := c.kernel()
	bad, maxUlp := 0, int64(0)
	for n := 0; n < c.N; n++ {
		xr := c.xq[n*c.xStride:]
		for m := 0; m < c.M; m++ {
			want, err := quant.VecDot(c.f.typ, c.K, c.w.data[m*c.w.rowBytes:], xr)
			if err != nil {
				t.Fatal(err)
			}
			g := got[n*c.yStride+m]
			if math.Float32bits(g) != math.Float32bits(want) {
				u := int64(math.Float32bits(g)) - int64(math.Float32bits(want))
				maxUlp = max(maxUlp, u, -u)
				if bad < 5 {
					t.Errorf("%s %dx%dx%d: y[%d][%d] = %g, want %g (quant.VecDot)", k, c.M, c.N, c.K, n, m, g, want)
				}
				bad++
			}
		}
		for m := c.M; m < c.yStride; m++ {
			if !math.IsNaN(float64(got[n*c.yStride+m])) {
				t.Fatalf("%s %dx%dx%d wrote into the row padding of token %d", k, c.M, c.N, c.K, n)
			}
		}
	}
	for i := c.N * c.yStride; i < len(got); i++ {
		if !math.IsNaN(float64(got[i])) {
			t.Fatalf("%s %dx%dx%d wrote past row %d", k, c.M, c.N, c.K, c.N)
		}
	}
	if bad > 0 {
		t.Errorf("%s %dx%dx%d: %d of %d outputs differ from quant.VecDot, by up to %d ulp", k, c.M, c.N, c.K, bad, c.M*c.N, maxUlp)
	}
}

// mulMmT8Case checks mul_mm_t8_<f> on odd shapes (partial row and token
// tiles, one token) in the race orders and on the thinker's projections
// (hidden 2048: q 4096, kv 512, o 4096 -> 2048) in one order.
func mulMmT8Case(f t8Format) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range []struct{ M, N, K, orders int }{
			{70, 1, 256, 0}, {70, 33, 256, 0}, {70, 130, 256, 0},
			{70, 1, 768, 0}, {70, 33, 768, 0}, {70, 130, 768, 0},
			{4096, 70, 2048, 1}, {512, 70, 2048, 1}, {2048, 70, 4096, 1},
		} {
			c := newT8x(t, rng, f, sh.M, sh.N, sh.K)
			c.check(t, c.run(t, h, sh.orders))
		}
	}
}

func init() {
	register("quant_q8k_rows", quantQ8KCase("quant_q8k_rows", false))
	register("quant_q8k_rows_h", quantQ8KCase("quant_q8k_rows_h", true))
	for _, f := range t8Formats {
		register("mul_mm_t8_"+f.name, mulMmT8Case(f))
	}
}

// TestQuantQ8KCatchesMistakes: the byte comparison of quant_q8k_rows fails
// for kernels with the mistakes a GPU twin of quant's q8_K could make:
// rounding half away from zero, the last (not the first) value of largest
// magnitude, bsums per 32 instead of 16, and d = smax/127 without the sign.
func TestQuantQ8KCatchesMistakes(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found", mslemu.Clang)
	}
	src, err := shaders.Read("tensor_q8.metal")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	// The quantizer is a template (q8k_rows) and its float kernel; the
	// mutants rename both (and the template's call).
	cut := strings.Index(s, "#define T8_BM")
	start := strings.Index(s, "template <typename T>\nstatic inline void q8k_rows(")
	end := strings.Index(s, "// quant_q8k_rows_h is")
	if cut < 0 || start < 0 || end < 0 || !(start < end && end < cut) {
		t.Fatal("tensor_q8.metal: q8k_rows, quant_q8k_rows and quant_q8k_rows_h not found in order before mul_mm_t8_q4_K")
	}
	kern := s[start:end]
	mutants := []struct{ name, from, to string }{
		{"round", "rint(is * v[j])", "round(is * v[j])"},
		{"last", "if (a > amax) {", "if (a >= amax) {"},
		{"bsum32", "simd_shuffle_xor(sum, ushort(1))", "simd_shuffle_xor(sum, ushort(1)) + simd_shuffle_xor(sum, ushort(2))"},
		{"sign", "-127.0f / smax", "127.0f / fabs(smax)"},
	}
	var b strings.Builder
	b.WriteString(s[:cut])
	for _, m := range mutants {
		if !strings.Contains(kern, m.from) {
			t.Fatalf("mutant %s: %q not in quant_q8k_rows", m.name, m.from)
		}
		k := strings.ReplaceAll(kern, "q8k_rows(", "q8k_rows_"+m.name+"(")
		b.WriteString(strings.Replace(k, m.from, m.to, 1))
	}
	dir := t.TempDir()
	if err := shaders.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "q8k_mutants.metal")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := mslemu.Build(dir, file)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rng := rand.New(rand.NewSource(3))
	if err := checkQuantQ8K(h, rng, "quant_q8k_rows", 7, 1280, false); err != nil {
		t.Fatalf("the unchanged kernel: %v", err)
	}
	for _, m := range mutants {
		if err := checkQuantQ8K(h, rng, "quant_q8k_rows_"+m.name, 7, 1280, false); err == nil {
			t.Errorf("mutant %s (%s -> %s) matches quant's bytes", m.name, m.from, m.to)
		} else {
			t.Logf("mutant %s caught: %v", m.name, err)
		}
	}
}

// TestQ8KHalfRowsInputs: the inputs of quant_q8k_rows_h's check are exact
// halves (the reference quantizes the same values the kernel reads), and
// the special blocks give the q8_K blocks they are meant to (not vacuous).
func TestQ8KHalfRowsInputs(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	x := q8kRows(rng, 2, 2560, 2566, true)
	xb := halfBytes(x)
	for i, v := range x {
		if hv := quant.Float16ToFloat32(binary.LittleEndian.Uint16(xb[2*i:])); hv != v || math.IsInf(float64(v), 0) {
			t.Fatalf("value %d: %g, as a half %g", i, v, hv)
		}
	}
	q := make([]byte, 10*q8kBytes)
	if err := quant.QuantizeActivations(quant.Q8_K, q, x[:2560]); err != nil {
		t.Fatal(err)
	}
	d := func(b int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(q[b*q8kBytes:])) }
	if d(0) != 0 || d(4) != 1 || math.Abs(float64(d(5))) != 1 || int8(q[4*q8kBytes+4+2]) != 2 || int8(q[4*q8kBytes+4+1]) != 2 {
		t.Errorf("special blocks: d %g %g %g, codes of 2.5 and 1.5: %d %d", d(0), d(4), d(5), int8(q[4*q8kBytes+4+2]), int8(q[4*q8kBytes+4+1]))
	}
}

// TestT8Extremes: the extreme blocks of t8Formats (row 0 of the int8
// kernels' tests) against x codes of -127 reach, per super-block, within 5%
// of the int32 bound of Σ sc·Σ q·a the kernels' headers prove (q4_K:
// 8·63·(32·15·128); q6_K: 16·128·(16·32·128), both parities of the block),
// so the tests exercise the largest integers the kernels must carry.
func TestT8Extremes(t *testing.T) {
	bounds := map[string]int64{"q4_K": 8 * 63 * 32 * 15 * 128, "q6_K": 16 * 128 * 16 * 32 * 128}
	for _, f := range t8Formats {
		for b := range 2 {
			blk := make([]byte, f.block)
			f.extreme(blk, b, 0.01, 0.02)
			var kb quant.KBlock
			kb.Decode(f.typ, blk)
			var si int64
			for g := 0; g < 16; g++ {
				var s int64
				for l := 0; l < 16; l++ {
					s += int64(kb.Q[16*g+l]) * -127
				}
				si += int64(kb.Scale[g]) * s
			}
			bound := bounds[f.name]
			if si < 0 {
				si = -si
			}
			if si > bound || float64(si) < 0.95*float64(bound) {
				t.Errorf("%s extreme block %d: |Σ sc·Σ q·a| = %d, want within 5%% below the bound %d", f.name, b, si, bound)
			}
		}
	}
}
