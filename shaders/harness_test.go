package shaders_test

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// A kernelCase checks one kernel on the emulator against a Go reference.
type kernelCase func(t *testing.T, h *mslemu.Harness, rng *rand.Rand)

// cases maps each kernel name to its checks; every kernel in shaders/ must
// have at least one (TestKernels fails otherwise).
var cases = map[string][]kernelCase{}

func register(name string, c kernelCase) { cases[name] = append(cases[name], c) }

var (
	buildOnce sync.Once
	harnesses map[string]*mslemu.Harness // by kernel name
	buildErr  error
	workDir   string
)

func buildAll(t *testing.T) {
	buildOnce.Do(func() {
		workDir, buildErr = os.MkdirTemp("", "clef-shader-test")
		if buildErr != nil {
			return
		}
		harnesses = map[string]*mslemu.Harness{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 2)
		var errs []string
		for _, f := range shaders.Files() {
			wg.Add(1)
			go func(f string) {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				h, err := mslemu.Build(workDir, f)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err.Error())
					return
				}
				// Every kernel case runs each dispatch in several fiber
				// orders: a read of another thread's write without a barrier
				// is reported as a race.
				h.Orders = mslemu.RaceOrders
				for _, k := range h.Kernels {
					harnesses[k.Name] = h
				}
			}(f)
		}
		wg.Wait()
		if len(errs) > 0 {
			sort.Strings(errs)
			buildErr = fmt.Errorf("%s", strings.Join(errs, "\n"))
		}
	})
	if buildErr != nil {
		t.Fatalf("building the emulation harness: %v", buildErr)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	seen := map[*mslemu.Harness]bool{}
	for _, h := range harnesses {
		if !seen[h] {
			seen[h] = true
			h.Close()
		}
	}
	if workDir != "" && os.Getenv("CLEF_EMU_KEEP") == "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

// TestLint rejects the MSL constructs the shim cannot emulate faithfully.
func TestLint(t *testing.T) {
	for _, f := range shaders.Files() {
		src, err := shaders.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range mslemu.Lint(f, src) {
			t.Error(e)
		}
	}
	src, _ := shaders.Read("kargs.h")
	for _, e := range mslemu.Lint("kargs.h", src) {
		t.Error(e)
	}
}

// TestLintCatches proves the lint rejects what it must.
func TestLintCatches(t *testing.T) {
	bad := []string{
		"float4 y = (float4)x;",
		"half h = 1.0h;",
		"template [[host_name(\"k\")]] kernel k_t k<float>;",
		"half4x4 m;",
		"  threadgroup float total;",
		"  threadgroup int n = 0;",
	}
	for _, s := range bad {
		if len(mslemu.Lint("x.metal", []byte(s))) == 0 {
			t.Errorf("lint accepted %q", s)
		}
	}
	good := []string{"float4 y = float4(x);", "  threadgroup float partial[32];", "half h = half(1.0f);",
		"  threadgroup float *sa = shmem;", "f(threadgroup float *p, threadgroup int *q)",
		"float2 e = m.thread_elements();"}
	for _, s := range good {
		if errs := mslemu.Lint("x.metal", []byte(s)); len(errs) != 0 {
			t.Errorf("lint rejected %q: %v", s, errs)
		}
	}
}

// TestKernels runs every kernel's cases on the emulator and writes the
// summary line "shaders: N kernels, M verified" to $SHADER_TEST_SUMMARY.
func TestKernels(t *testing.T) {
	names := shaders.KernelNames()
	summary := func(verified int) {
		line := fmt.Sprintf("shaders: %d kernels, %d verified", len(names), verified)
		t.Log(line)
		if p := os.Getenv("SHADER_TEST_SUMMARY"); p != "" {
			os.WriteFile(p, []byte(line+"\n"), 0o644)
		}
	}
	if !mslemu.Available() {
		summary(0)
		t.Skipf("%s not found: install clang-19 to run the MSL emulation harness", mslemu.Clang)
	}
	buildAll(t)
	seen := map[string]bool{}
	verified := 0
	for _, name := range names {
		if seen[name] {
			t.Errorf("kernel %s defined twice", name)
			continue
		}
		seen[name] = true
		if verifyKernel(t, name, cases[name], harnesses[name]) {
			verified++
		}
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("test case for unknown kernel %s", name)
		}
	}
	summary(verified)
}

// verifyKernel runs a kernel's cases as a subtest of t and reports whether
// they verified it: they ran to the end and passed. A subtest filtered out
// by -run, or one that skipped (t.Skip in a case), verified nothing.
func verifyKernel(t *testing.T, name string, cs []kernelCase, h *mslemu.Harness) bool {
	verified := false
	t.Run(name, func(t *testing.T) {
		if len(cs) == 0 {
			t.Fatalf("kernel %s has no emulation test case", name)
		}
		if h == nil {
			t.Fatalf("kernel %s not found in the compiled harnesses", name)
		}
		for i, c := range cs {
			rng := rand.New(rand.NewSource(int64(1000*i + len(name))))
			c(t, h, rng)
		}
		verified = !t.Failed() && !t.Skipped()
	})
	return verified
}

// A case that skips never counts as verifying its kernel; one that runs
// and passes does.
func TestVerifyKernelAccounting(t *testing.T) {
	h := &mslemu.Harness{}
	pass := func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {}
	skip := func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) { t.Skip("no device for this case") }
	if !verifyKernel(t, "passes", []kernelCase{pass}, h) {
		t.Error("a passing case did not verify its kernel")
	}
	if verifyKernel(t, "skips", []kernelCase{skip}, h) {
		t.Error("a skipped case verified its kernel")
	}
	if verifyKernel(t, "passes-then-skips", []kernelCase{pass, skip, pass}, h) {
		t.Error("a kernel with a skipped case was verified")
	}
}

// ---- helpers ----------------------------------------------------------------

func randF32(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func runJob(t *testing.T, h *mslemu.Harness, job *mslemu.Job) [][]byte {
	t.Helper()
	out, err := h.Run(job)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkClose compares got with want element by element:
// |got-want| <= atol + rtol*|want|, and no NaN where want is finite.
func checkClose(t *testing.T, what string, got []float32, want []float64, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	maxErr := 0.0
	for i := range got {
		g := float64(got[i])
		d := math.Abs(g - want[i])
		if math.IsNaN(g) || d > atol+rtol*math.Abs(want[i]) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", what, i, g, want[i])
			}
			bad++
		}
		if d > maxErr {
			maxErr = d
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off (max abs error %g)", what, bad, len(got), maxErr)
	}
}

// checkNMSE compares with a normalised mean squared error bound.
func checkNMSE(t *testing.T, what string, got []float32, want []float64, limit float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var num, den float64
	for i := range got {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, g, want[i])
		}
		num += (g - want[i]) * (g - want[i])
		den += want[i] * want[i]
	}
	if den == 0 {
		den = 1
	}
	if nmse := num / den; nmse > limit || math.IsNaN(nmse) {
		t.Errorf("%s: NMSE %.3g > %.3g", what, nmse, limit)
	}
}

func groups(n, per int) int { return (n + per - 1) / per }

var _ = filepath.Join
