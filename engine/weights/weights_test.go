package weights

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/clefrt/clef/quant"
)

// The release stores experts one by one: Stack makes them one [E, out, in]
// tensor without copying, and Part/Slice give each expert back.
func TestStackParts(t *testing.T) {
	m, err := Open(tinyRelease, releaseOptions(tinyRelease))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var experts []*Tensor
	for e := 0; e < 8; e++ {
		x, err := m.Tensor(fmt.Sprintf("thinker.model.layers.1.mlp.experts.%d.down_proj.weight", e))
		if err != nil {
			t.Fatal(err)
		}
		experts = append(experts, x)
	}
	st, err := Stack("thinker.model.layers.1.mlp.experts.down_proj.weight", experts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Data != nil || len(st.Parts) != 8 || st.Type != quant.F32 || !slices.Equal(st.Shape, []int{8, 64, 32}) || st.Elements() != 8*64*32 {
		t.Fatalf("stack: %s %v, %d parts, data %d bytes", st.Type, st.Shape, len(st.Parts), len(st.Data))
	}
	for e, x := range experts {
		p := st.Part(e)
		if &p[0] != &x.Data[0] || len(p) != len(x.Data) {
			t.Errorf("expert %d: Part is not the stored tensor's bytes", e)
		}
		v := st.Slice(e)
		if !slices.Equal(v.Shape, x.Shape) || v.Type != x.Type || &v.Data[0] != &x.Data[0] || v.Parts != nil {
			t.Errorf("expert %d: Slice %s %v", e, v.Type, v.Shape)
		}
		a, _ := Float32(v)
		b, _ := Float32(x)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("expert %d [%d]: %v vs %v", e, i, a[i], b[i])
			}
		}
	}

	// A 2-D tensor is its own only matrix.
	x := experts[0]
	if x.Slice(0) != x || &x.Part(0)[0] != &x.Data[0] || len(x.Part(0)) != len(x.Data) {
		t.Error("Part/Slice of a 2-D tensor")
	}

	for _, c := range []struct {
		name string
		ts   []*Tensor
		want string
	}{
		{"none", nil, "nothing to stack"},
		{"3-D", []*Tensor{st}, "want 2-D"},
		{"shape", []*Tensor{x, {Name: "y", Type: quant.F32, Shape: []int{32, 64}, Data: x.Data}}, "y is f32 [32 64]"},
		{"type", []*Tensor{x, {Name: "y", Type: quant.BF16, Shape: x.Shape, Data: x.Data[:len(x.Data)/2]}}, "y is bf16"},
		{"mlx", []*Tensor{x, {Name: "y", Type: quant.F32, Shape: x.Shape, Data: x.Data, Scales: x}}, "group-quantized"},
		{"parted", []*Tensor{x, {Name: "y", Type: quant.F32, Shape: x.Shape, Parts: [][]byte{x.Data}}}, "already stacked"},
	} {
		if _, err := Stack("s", c.ts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// A contiguous stack (a GGUF *_exps tensor) and the parted stack of its own
// slices address the same bytes expert by expert.
func TestStackContiguousMatchesParted(t *testing.T) {
	m, err := Open(ggufFixtures[1], Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, n := range []string{"blk.0.ffn_gate_exps.weight", "blk.1.ffn_down_exps.weight"} {
		c, err := m.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		var parts []*Tensor
		for e := 0; e < c.Shape[0]; e++ {
			parts = append(parts, c.Slice(e))
		}
		p, err := Stack(n, parts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Shape, c.Shape) || p.Type != c.Type || p.Type != quant.Q8_0 {
			t.Fatalf("%s: %s %v vs %s %v", n, p.Type, p.Shape, c.Type, c.Shape)
		}
		var joined []byte
		for e := 0; e < c.Shape[0]; e++ {
			if !bytes.Equal(p.Part(e), c.Part(e)) || &p.Part(e)[0] != &c.Part(e)[0] {
				t.Errorf("%s expert %d differs", n, e)
			}
			joined = append(joined, p.Part(e)...)
		}
		if !bytes.Equal(joined, c.Data) {
			t.Errorf("%s: parts do not tile the stack", n)
		}
	}
}
