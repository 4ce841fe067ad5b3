package metal

import (
	"errors"
	"strings"
	"testing"
)

// tensorFake is a fake device with the GPU families, tensor-library
// outcome and pipeline failures a test asks for.
type tensorFake struct {
	*fakeGPU
	families []string
	lib      *bool // nil: the device does not compile a tensor library
	fail     string
}

func (g *tensorFake) Info() DeviceInfo {
	i := g.fakeGPU.Info()
	i.Families = g.families
	return i
}

func (g *tensorFake) Prepare(kernel string, consts []fconst) error {
	if kernel == g.fail {
		return errors.New("no such function in the library")
	}
	return g.fakeGPU.Prepare(kernel, consts)
}

// tensorLibFake adds TensorLibrary to tensorFake.
type tensorLibFake struct{ *tensorFake }

func (g tensorLibFake) TensorLibrary() (bool, string) {
	if !*g.lib {
		return false, "program_source:1: error: 'metal_tensor' file not found"
	}
	return true, ""
}

// TestTensorChoice: the tensor path is taken on a GPU of family Apple10 whose
// tensor library compiled, or when forced; never elsewhere, and a tensor
// pipeline that fails to build leaves the open on the fallback kernels.
func TestTensorChoice(t *testing.T) {
	yes, no := true, false
	m5 := []string{"Apple7", "Apple8", "Apple9", "Apple10", "Metal3", "Metal4"}
	m4 := []string{"Apple7", "Apple8", "Apple9", "Metal3", "Metal4"}
	for _, c := range []struct {
		name     string
		env      string
		families []string
		lib      *bool
		fail     string
		on       bool
		why      string
	}{
		{"M5", "", m5, &yes, "", true, "Apple10"},
		{"M4", "", m4, &yes, "", false, "not of family Apple10"},
		{"M5 without a tensor library", "", m5, nil, "", false, "does not compile the tensor library"},
		{"M5 whose tensor library failed", "", m5, &no, "", false, "did not compile"},
		{"M5, disabled", "0", m5, &yes, "", false, TensorEnv + "=0"},
		{"M4, forced", "1", m4, nil, "", true, TensorEnv + "=1"},
		{"M4 with a tensor library, forced", "1", m4, &yes, "", true, TensorEnv + "=1"},
		{"M5, forced, whose tensor library failed", "1", m5, &no, "", false, "did not compile"},
		{"M5, a pipeline fails", "", m5, &yes, "mul_mm_t_q8_0", false, "failed to build"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(TensorEnv, c.env)
			f := &tensorFake{fakeGPU: newFakeGPU(), families: c.families, lib: c.lib, fail: c.fail}
			var g gpu = f
			if c.lib != nil {
				g = tensorLibFake{f}
			}
			b, err := newBackend(g, "fake")
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer b.Close()
			on, why := b.TensorPath()
			if on != c.on || !strings.Contains(why, c.why) {
				t.Errorf("TensorPath() = %v, %q; want %v, %q", on, why, c.on, c.why)
			}
			tensorPipes, failed := 0, 0
			for _, p := range b.Pipelines() {
				if strings.HasPrefix(p.Name, "mul_mm_t_") {
					tensorPipes++
					if p.Err != nil {
						failed++
					}
				}
			}
			chosen := c.on || c.fail != ""
			if want := map[bool]int{true: len(tensorTypes), false: 0}[chosen]; tensorPipes != want {
				t.Errorf("%d tensor pipelines prepared, want %d", tensorPipes, want)
			}
			if want := map[bool]int{true: 1, false: 0}[c.fail != ""]; failed != want {
				t.Errorf("%d tensor pipelines failed, want %d", failed, want)
			}
		})
	}
}
