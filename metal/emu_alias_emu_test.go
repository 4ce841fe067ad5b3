//go:build mslemu

package metal

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
)

// aliasProbe is a kernel that writes through two bindings: x[i*s] = a and
// y[i*s] = b for i < n. Bound to one buffer at two offsets, the two sets of
// stores land in one memory, as on a GPU.
const aliasProbe = `#include <metal_stdlib>
using namespace metal;

struct alias_args {
  uint n;
  uint s;
  float a;
  float b;
};

kernel void alias_write2(constant alias_args &p [[buffer(0)]],
                         device float *x [[buffer(1)]],
                         device float *y [[buffer(2)]],
                         uint i [[thread_position_in_grid]]) {
  if (i < p.n) {
    x[i * p.s] = p.a;
    y[i * p.s] = p.b;
  }
}
`

// aliasGPU opens an emulated device whose library is the alias probe alone,
// built the way emuKernels builds the shader library.
func aliasGPU(t *testing.T) *emuGPU {
	t.Helper()
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "alias_probe.metal")
	if err := os.WriteFile(src, []byte(aliasProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := mslemu.Build(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return newEmuGPUWith(map[string]*mslemu.Harness{"alias_write2": h})
}

// aliasLaunch runs alias_write2 once on a fresh zeroed buffer of size floats,
// x bound at float offset xo and y at yo, and returns the buffer after it
// (or the launch's error).
func aliasLaunch(t *testing.T, g *emuGPU, size, xo, yo, n, s int, a, b float32, yOut bool) ([]float32, error) {
	t.Helper()
	buf, err := g.NewBuffer(4 * size)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free(buf)
	args := make([]byte, 16)
	binary.LittleEndian.PutUint32(args[0:], uint32(n))
	binary.LittleEndian.PutUint32(args[4:], uint32(s))
	binary.LittleEndian.PutUint32(args[8:], math.Float32bits(a))
	binary.LittleEndian.PutUint32(args[12:], math.Float32bits(b))
	d := &dispatch{Kernel: "alias_write2", Grid: [3]int{1, 1, 1}, Group: [3]int{n, 1, 1}, Args: args,
		Bufs: []arg{{Index: 1, Buf: buf, Off: 4 * xo, Out: true}, {Index: 2, Buf: buf, Off: 4 * yo, Out: yOut}}}
	if err := g.Dispatch(d); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background()); err != nil {
		return nil, err
	}
	out := make([]byte, 4*size)
	if err := g.Read(buf, 0, out); err != nil {
		t.Fatal(err)
	}
	return mslemu.ToF32(out), nil
}

// TestEmuAliasedBindings launches a kernel that writes through two bindings
// of one buffer (one harness build for the subtests). Before the emulated device wrote back only the bytes each
// binding changed, each binding's region (from its offset to the buffer's
// end) was copied back whole, in map order: the region of x also held the
// bytes the kernel wrote through y, unchanged, so the y stores were lost
// whenever x was copied last (about every other launch in "disjoint"), and
// in "interleaved" every order lost one binding's stores. Each case runs
// several launches, so an order-dependent write-back fails.
func TestEmuAliasedBindings(t *testing.T) {
	g := aliasGPU(t)
	t.Run("race", func(t *testing.T) { testEmuAliasedRace(t, g) })
	t.Run("undeclared", func(t *testing.T) { testEmuUndeclaredWrite(t, g) })
	const n, launches = 8, 12
	cases := []struct {
		name            string
		size, xo, yo, s int
		want            func(i int) float32
	}{
		// y's range follows x's: [1 x8, 2 x8].
		{"disjoint", 2 * n, 0, n, 1, func(i int) float32 {
			if i < n {
				return 1
			}
			return 2
		}},
		// y is x shifted by one float, every other element written
		// through each: the regions overlap, the bytes written do not.
		{"interleaved", 2 * n, 0, 1, 2, func(i int) float32 { return float32(1 + i%2) }},
		// y at a later offset past a gap that neither writes.
		{"gap", 3 * n, 0, 2 * n, 1, func(i int) float32 {
			switch {
			case i < n:
				return 1
			case i < 2*n:
				return 0
			}
			return 2
		}},
		// The same offset twice is one binding of one memory: each
		// thread's second store (through y) wins.
		{"same range", n, 0, 0, 1, func(int) float32 { return 2 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for l := range launches {
				got, err := aliasLaunch(t, g, c.size, c.xo, c.yo, n, c.s, 1, 2, true)
				if err != nil {
					t.Fatalf("launch %d: %v", l, err)
				}
				for i, v := range got {
					if v != c.want(i) {
						t.Fatalf("launch %d: element %d is %v, want %v (buffer %v)", l, i, v, c.want(i), got)
					}
				}
			}
		})
	}
}

// testEmuAliasedRace checks that two bindings of one buffer storing
// different values to the same bytes fail the launch, naming the kernel and
// both bindings (a data race on a GPU too), and that storing the same value
// there is not reported.
func testEmuAliasedRace(t *testing.T, g *emuGPU) {
	const n = 8
	// y starts at x's last element: x[n-1] and y[0] are one float.
	_, err := aliasLaunch(t, g, 2*n, 0, n-1, n, 1, 1, 2, true)
	if err == nil {
		t.Fatal("two bindings storing 1 and 2 to one float: no error")
	}
	// The float is bytes 28..31. Over zeros, 1.0 (0x3f800000) and 2.0
	// (0x40000000) both leave bytes 28 and 29 zero, only 1.0 stores byte
	// 30, and they store different values to byte 31.
	for _, want := range []string{"alias_write2", "buffers 1 and 2", "byte 31", "data race"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	got, err := aliasLaunch(t, g, 2*n, 0, n-1, n, 1, 3, 3, true)
	if err != nil {
		t.Fatalf("both bindings storing 3: %v", err)
	}
	for i, v := range got {
		want := float32(3)
		if i >= 2*n-1 {
			want = 0
		}
		if v != want {
			t.Fatalf("element %d is %v, want %v (buffer %v)", i, v, want, got)
		}
	}
}

// testEmuUndeclaredWrite checks that a kernel storing through a binding the
// launch did not mark as written fails the launch rather than losing the
// stores silently (as the emulated device did before), naming the binding.
func testEmuUndeclaredWrite(t *testing.T, g *emuGPU) {
	const n = 8
	_, err := aliasLaunch(t, g, 2*n, 0, n, n, 1, 1, 2, false)
	if err == nil {
		t.Fatal("stores through a binding not marked Out: no error")
	}
	for _, want := range []string{"alias_write2", "buffer 2", "not marked"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
