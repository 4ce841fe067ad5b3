package release_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// openTiny opens the clef-tiny release.
func openTiny(t testing.TB) *release.Release {
	t.Helper()
	r, err := release.Open(fixtureTiny)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// The decoder's table names exactly the tensors the release stores for the
// text decoder (thinker.model.* and the lm_head), with their shapes; a
// stacked row stands for the release's per-expert tensors.
func TestDecoderTableMatchesTinyRelease(t *testing.T) {
	r := openTiny(t)
	c := r.Config.Thinker.Text
	rows := release.DecoderTensors(c)
	if len(rows) != 1+12*c.Layers+2 {
		t.Fatalf("%d rows for %d layers", len(rows), c.Layers)
	}
	stored := map[string]bool{}
	for _, n := range r.Weights.Names() {
		if strings.HasPrefix(n, release.DecoderPrefix) || n == release.LMHead {
			stored[n] = false
		}
	}
	if len(stored) != 3+c.Layers*(9+3*c.Experts) {
		t.Fatalf("the tiny release stores %d decoder tensors", len(stored))
	}
	names, ggufs := map[string]bool{}, map[string]bool{}
	cover := func(name string, shape []int) {
		covered, ok := stored[name]
		if !ok {
			t.Errorf("%s: in the table, not in the release", name)
			return
		}
		if covered {
			t.Errorf("%s: covered twice", name)
		}
		stored[name] = true
		w, _ := r.Weights.Tensor(name)
		if !reflect.DeepEqual(w.Shape, shape) {
			t.Errorf("%s: stored shape %v, the table says %v", name, w.Shape, shape)
		}
	}
	for i, row := range rows {
		if names[row.Name] || row.GGUF == "" || ggufs[row.GGUF] {
			t.Errorf("row %d: name %s / GGUF %q repeated or empty", i, row.Name, row.GGUF)
		}
		names[row.Name], ggufs[row.GGUF] = true, true
		prefix := release.DecoderPrefix
		if row.Layer >= 0 {
			prefix = fmt.Sprintf("%slayers.%d.", release.DecoderPrefix, row.Layer)
			if !strings.HasPrefix(row.GGUF, fmt.Sprintf("blk.%d.", row.Layer)) {
				t.Errorf("%s: GGUF name %s is not in block %d", row.Name, row.GGUF, row.Layer)
			}
		}
		if row.Name != release.LMHead && row.Name != prefix+row.Key {
			t.Errorf("%s: key %q layer %d", row.Name, row.Key, row.Layer)
		}
		if row.Stacked() != (row.Role == release.RoleFFNGate || row.Role == release.RoleFFNUp || row.Role == release.RoleFFNDown) ||
			(row.Role == release.RoleNorm) != (len(row.Shape) == 1) || row.Optional {
			t.Errorf("%s: role %s, shape %v, optional %v", row.Name, row.Role, row.Shape, row.Optional)
		}
		if !row.Stacked() {
			cover(row.Name, row.Shape)
			continue
		}
		if len(row.Shape) != 3 || row.Shape[0] != c.Experts || !strings.HasSuffix(row.GGUF, "_exps.weight") {
			t.Errorf("%s: stacked shape %v, GGUF %s", row.Name, row.Shape, row.GGUF)
			continue
		}
		for e := 0; e < row.Shape[0]; e++ {
			n := row.ExpertName(e)
			if want := strings.Replace(row.Name, "*", fmt.Sprint(e), 1); n != want || strings.Contains(n, "*") {
				t.Errorf("ExpertName(%d) = %s", e, n)
			}
			cover(n, row.Shape[1:])
		}
	}
	for n, covered := range stored {
		if !covered {
			t.Errorf("%s: stored in the release, in no table row", n)
		}
	}
	if rows[0].Role != release.RoleEmbed || rows[len(rows)-1].Name != release.LMHead || rows[len(rows)-1].Role != release.RoleOutput {
		t.Errorf("table order: %s first, %s last", rows[0].Name, rows[len(rows)-1].Name)
	}
}

// The table's GGUF names and shapes are llama.cpp's, in the order its
// converter writes them (the tiny64 fixture), and cover every tensor of the
// other fixture too.
func TestDecoderTableMatchesLlamaCppGGUF(t *testing.T) {
	for _, p := range []string{"tiny64-f32.gguf", "tiny256-q4_k_m.gguf"} {
		f, err := weights.OpenGGUF(fixtureGGUFDir + p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := release.TextFromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		rows := release.DecoderTensors(c)
		if len(rows) != len(f.Tensors) {
			t.Fatalf("%s: %d rows, %d tensors", p, len(rows), len(f.Tensors))
		}
		byName := map[string]int{}
		for i, ti := range f.Tensors {
			byName[ti.Name] = i
		}
		for i, row := range rows {
			j, ok := byName[row.GGUF]
			if !ok {
				t.Errorf("%s: no tensor %s", p, row.GGUF)
				continue
			}
			if sh := f.Tensors[j].Shape(); !reflect.DeepEqual(sh, row.Shape) {
				t.Errorf("%s: %s has shape %v, the table says %v", p, row.GGUF, sh, row.Shape)
			}
			if p == "tiny64-f32.gguf" && i != j {
				t.Errorf("%s: %s is tensor %d, row %d", p, row.GGUF, j, i)
			}
		}
		f.Close()
	}
}

// The head's table is exactly joint_head.safetensors: every stored tensor
// is a row with its shape, and every row is stored.
func TestHeadTableMatchesTinyRelease(t *testing.T) {
	r := openTiny(t)
	if r.Config.Head == nil {
		t.Fatal("no head config")
	}
	rows := release.HeadTensors(*r.Config.Head)
	m, err := weights.OpenSafetensors(filepath.Join(fixtureTiny, release.HeadWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(rows) != 86 || len(m.Names()) != 86 {
		t.Fatalf("%d rows, %d stored head tensors", len(rows), len(m.Names()))
	}
	seen := map[string]bool{}
	for _, row := range rows {
		if seen[row.Name] {
			t.Errorf("%s: two rows", row.Name)
		}
		seen[row.Name] = true
		if row.Role != release.RoleHead || row.GGUF != "" || row.Stacked() || row.Optional {
			t.Errorf("%s: role %s, GGUF %q", row.Name, row.Role, row.GGUF)
		}
		if row.Layer >= 0 {
			if !strings.HasSuffix(row.Name, "."+row.Key) || !strings.Contains(row.Name, fmt.Sprintf("layers.%d.", row.Layer)) {
				t.Errorf("%s: key %q layer %d", row.Name, row.Key, row.Layer)
			}
		} else if row.Key != row.Name {
			t.Errorf("%s: key %q outside the layers", row.Name, row.Key)
		}
		w, err := m.Tensor(row.Name)
		if err != nil {
			t.Errorf("row %s is not stored: %v", row.Name, err)
			continue
		}
		if !reflect.DeepEqual(w.Shape, row.Shape) && !(len(w.Shape) == 0 && len(row.Shape) == 0) {
			t.Errorf("%s: stored shape %v, the table says %v", row.Name, w.Shape, row.Shape)
		}
		// Every head tensor is found by Lookup in the opened release.
		if got, names, err := release.Lookup(r.Weights, row); err != nil || got != w && !sameBytes(got, w) || len(names) != 1 || names[0] != row.Name {
			t.Errorf("Lookup %s: %v %v", row.Name, names, err)
		}
	}
	for _, n := range m.Names() {
		if !seen[n] {
			t.Errorf("%s: stored, in no row", n)
		}
	}
}

// Sizes of the tables for other configurations follow the configuration.
func TestTableSizes(t *testing.T) {
	c := tinyText
	c.Layers, c.Experts, c.Hidden, c.HeadDim, c.Heads, c.KVHeads = 5, 3, 128, 32, 8, 1
	var n, experts int
	for _, r := range release.DecoderTensors(c) {
		n++
		if r.Stacked() {
			experts += r.Shape[0]
		}
		if r.Key == "self_attn.q_proj.weight" && !reflect.DeepEqual(r.Shape, []int{256, 128}) ||
			r.Key == "self_attn.k_proj.weight" && !reflect.DeepEqual(r.Shape, []int{32, 128}) ||
			r.Key == "self_attn.o_proj.weight" && !reflect.DeepEqual(r.Shape, []int{128, 256}) ||
			r.Key == "mlp.experts.*.down_proj.weight" && !reflect.DeepEqual(r.Shape, []int{3, 128, 32}) {
			t.Errorf("%s: shape %v", r.Name, r.Shape)
		}
	}
	if n != 3+12*5 || experts != 5*3*3 {
		t.Errorf("%d rows, %d experts", n, experts)
	}
	h := release.Head{HiddenSize: 2048, Width: 1024, RoutingLayers: 3, Layers: 5, Heads: 16, Feedforward: 4096}
	rows := release.HeadTensors(h)
	// hidden norm 2, 6 projections, type embedding; per routing layer 14; option
	// summary norm 2; per decoder layer 18; 4 final norms, 4 scorer, 3 scalars.
	if want := 2 + 6 + 1 + 3*14 + 2 + 5*18 + 4 + 4 + 3; len(rows) != want {
		t.Errorf("%d head rows, want %d", len(rows), want)
	}
	for _, r := range rows {
		if r.Name == "layers.4.linear1.weight" && !reflect.DeepEqual(r.Shape, []int{4096, 1024}) ||
			r.Name == "evidence_layers.2.attention.in_proj_weight" && !reflect.DeepEqual(r.Shape, []int{3072, 1024}) ||
			r.Name == "memory_projection.weight" && !reflect.DeepEqual(r.Shape, []int{1024, 2048}) ||
			r.Name == "residual_gate" && len(r.Shape) != 0 {
			t.Errorf("%s: shape %v", r.Name, r.Shape)
		}
	}
	if len(release.HeadTensors(release.Head{HiddenSize: 8, Width: 4, Heads: 1, Feedforward: 4})) != 2+6+1+2+4+4+3 {
		t.Error("a head without layers")
	}
}

// sameBytes reports whether two tensors hold the same type, shape and bytes.
func sameBytes(a, b *weights.Tensor) bool {
	if a == nil || b == nil || a.Type != b.Type || !reflect.DeepEqual(a.Shape, b.Shape) {
		return false
	}
	if len(a.Shape) == 3 {
		for e := 0; e < a.Shape[0]; e++ {
			if string(a.Part(e)) != string(b.Part(e)) {
				return false
			}
		}
		return true
	}
	return string(a.Data) == string(b.Data)
}
