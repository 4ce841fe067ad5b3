package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clefrt/clef/quant"
)

const (
	tinyRelease = "../../testdata/clef-tiny/release"
	tinyBF16    = "../../testdata/clef-tiny/release-bf16"
	omniFile    = "../../testdata/omni/model.safetensors"
	headFile    = "joint_head.safetensors"
)

// keepThinker is the release's loading rule (engine/release.KeepThinker,
// which this package cannot import): thinker.* is used, talker.* and
// code2wav.* are skipped, any other prefix is an error.
func keepThinker(name string) (bool, error) {
	switch {
	case strings.HasPrefix(name, "thinker."):
		return true, nil
	case strings.HasPrefix(name, "talker."), strings.HasPrefix(name, "code2wav."):
		return false, nil
	}
	return false, fmt.Errorf("unexpected tensor outside thinker.*, talker.* and code2wav.*")
}

// releaseOptions opens a release directory as engine/release does: the
// thinker's shards under keepThinker and the head's weights alongside.
func releaseOptions(dir string) Options {
	o := Options{Keep: keepThinker}
	if hp := filepath.Join(dir, headFile); fileExists(hp) {
		o.Extra = []string{hp}
	}
	return o
}

// A release directory opened with its loading rule: the thinker's shards
// (talker and code2wav skipped) and the head file alongside, every tensor
// under its stored name.
func TestOpenRelease(t *testing.T) {
	m, err := Open(tinyRelease, releaseOptions(tinyRelease))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if s := m.(*Set); s.File("residual_gate") != filepath.Join(tinyRelease, headFile) {
		t.Errorf("residual_gate read from %q", s.File("residual_gate"))
	}
	var thinker, head int
	for _, n := range m.Names() {
		switch {
		case strings.HasPrefix(n, "thinker."):
			thinker++
		case strings.HasPrefix(n, "talker."), strings.HasPrefix(n, "code2wav."):
			t.Errorf("skipped prefix loaded: %s", n)
		default:
			head++
		}
	}
	if thinker != 159 || head != 86 {
		t.Errorf("got %d thinker and %d head tensors, want 159 and 86", thinker, head)
	}
	emb, err := m.Tensor("thinker.model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	if emb.Type != quant.F32 || len(emb.Shape) != 2 || emb.Shape[1] != 64 {
		t.Errorf("embed_tokens: %v %v", typeName(emb.Type), emb.Shape)
	}
	sc, err := m.Tensor("residual_gate")
	if err != nil {
		t.Fatal(err)
	}
	v, err := Float32(sc)
	if err != nil || len(v) != 1 || math.Abs(float64(v[0])-0.6) > 1e-6 {
		t.Errorf("residual_gate = %v, %v; want [0.6]", v, err)
	}
	if !m.Has("thinker.model.layers.1.mlp.experts.3.down_proj.weight") || m.Has("talker.codec_head.weight") {
		t.Error("Has")
	}
	if _, err := m.Tensor("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing tensor error: %v", err)
	}

	// Without options every stored tensor is kept, the placeholders of the
	// speech-output modules too, and the head file is not part of a
	// directory with a shard index.
	all, err := Open(tinyRelease, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if len(all.Names()) != 161 || !all.Has("talker.codec_head.weight") || !all.Has("code2wav.code_embedding.weight") || all.Has("residual_gate") {
		t.Errorf("no options: %d tensors", len(all.Names()))
	}
}

// The bf16 release holds the float32 release rounded to nearest even: widening
// it back must give exactly the rounded float32 values; the thinker weights
// are also those of the omni fixture.
func TestReleaseBF16MatchesF32(t *testing.T) {
	a, err := Open(tinyRelease, releaseOptions(tinyRelease))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(tinyBF16, releaseOptions(tinyBF16))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o, err := OpenSafetensors(omniFile)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if len(a.Names()) != len(b.Names()) {
		t.Fatalf("%d vs %d tensors", len(a.Names()), len(b.Names()))
	}
	checked := 0
	for _, n := range a.Names() {
		ta, _ := a.Tensor(n)
		tb, err := b.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		fa, err := Float32(ta)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := Float32(tb)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(n, "thinker.") {
			continue
		}
		if tb.Type != quant.BF16 {
			t.Fatalf("%s: %s", n, typeName(tb.Type))
		}
		for i := range fa {
			if want := rneBF16(fa[i]); math.Float32bits(fb[i]) != math.Float32bits(want) {
				t.Fatalf("%s[%d]: bf16 %v, want %v (from %v)", n, i, fb[i], want, fa[i])
			}
		}
		to, err := o.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(to.Data, ta.Data) {
			t.Errorf("%s differs from the omni fixture", n)
		}
		checked++
	}
	if checked != 159 {
		t.Errorf("checked %d thinker tensors", checked)
	}
}

func rneBF16(f float32) float32 {
	u := math.Float32bits(f)
	u += 0x7fff + (u>>16)&1
	return math.Float32frombits(u &^ 0xffff)
}

func TestRows(t *testing.T) {
	m, err := Open(tinyBF16, releaseOptions(tinyBF16))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	lm, err := m.Tensor("thinker.lm_head.weight")
	if err != nil {
		t.Fatal(err)
	}
	all, err := Float32(lm)
	if err != nil {
		t.Fatal(err)
	}
	cols := lm.Shape[1]
	sel := []int{0, 7, lm.Shape[0] - 1, 7}
	rows, err := Rows(lm, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range sel {
		for j := 0; j < cols; j++ {
			if rows[i][j] != all[r*cols+j] {
				t.Fatalf("row %d col %d", r, j)
			}
		}
	}
	if _, err := Rows(lm, []int{lm.Shape[0]}); err == nil {
		t.Error("out-of-range row accepted")
	}
	if _, err := Rows(lm, []int{-1}); err == nil {
		t.Error("negative row accepted")
	}
}

// stFile builds a safetensors file from a header value and a data buffer.
func stFile(header any, data []byte) []byte {
	h, _ := json.Marshal(header)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(data)
	return b.Bytes()
}

func TestSafetensorsValidation(t *testing.T) {
	ent := func(dt string, shape []int, b, e int) map[string]any {
		return map[string]any{"dtype": dt, "shape": shape, "data_offsets": []int{b, e}}
	}
	hugeLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(hugeLen, 1<<40)
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "shorter than"},
		{"absurd header", hugeLen, "absurd"},
		{"truncated header", append([]byte{100, 0, 0, 0, 0, 0, 0, 0}, "{}"...), "truncated"},
		{"not json", append([]byte{2, 0, 0, 0, 0, 0, 0, 0}, "xx"...), "not a JSON object"},
		{"bad json", append([]byte{5, 0, 0, 0, 0, 0, 0, 0}, `{"a":`...), "invalid"},
		{"unknown dtype", stFile(map[string]any{"w": ent("Q9", []int{2}, 0, 8)}, make([]byte, 8)), `tensor "w": unknown or unsupported dtype`},
		{"size mismatch", stFile(map[string]any{"w": ent("F32", []int{3}, 0, 8)}, make([]byte, 8)), `tensor "w": F32 [3] needs 12 bytes`},
		{"out of bounds", stFile(map[string]any{"w": ent("F32", []int{4}, 0, 16)}, make([]byte, 8)), `past the end`},
		{"reversed", stFile(map[string]any{"w": ent("F32", []int{0}, 8, 4)}, make([]byte, 8)), `bad data_offsets`},
		{"negative dim", stFile(map[string]any{"w": ent("F32", []int{-1}, 0, 0)}, nil), `bad dimension`},
		{"absurd shape", stFile(map[string]any{"w": ent("F32", []int{1 << 30, 1 << 30, 1 << 30}, 0, 0)}, nil), `absurd`},
		{"overlap", stFile(map[string]any{"a": ent("F32", []int{2}, 0, 8), "b": ent("F32", []int{2}, 4, 12)}, make([]byte, 12)), `overlap`},
		{"bad metadata", stFile(map[string]any{"__metadata__": map[string]any{"x": 1}}, nil), `__metadata__`},
		{"offsets count", stFile(map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0}}}, make([]byte, 4)), `data_offsets must hold 2`},
		{"duplicate", append([]byte{35, 0, 0, 0, 0, 0, 0, 0}, `{"__metadata__":{},"__metadata__":{}}`[:35]...), `twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := parseSafetensors("x.safetensors", c.file)
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x.safetensors") {
				t.Fatalf("error %q does not say %q and name the file", err, c.want)
			}
		})
	}
	ok := stFile(map[string]any{"a": ent("F32", []int{2}, 0, 8), "b": ent("BF16", []int{2, 2}, 8, 16), "__metadata__": map[string]string{"format": "pt"}}, make([]byte, 16))
	ts, meta, err := parseSafetensors("ok", ok)
	if err != nil || len(ts) != 2 || meta["format"] != "pt" {
		t.Fatalf("valid file: %v %v %v", ts, meta, err)
	}
}

// copyDir copies a fixture directory into a temp dir so a test can damage it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestReleaseDirErrors(t *testing.T) {
	t.Run("missing shard", func(t *testing.T) {
		d := copyDir(t, tinyRelease)
		os.Remove(filepath.Join(d, "model-00002-of-00002.safetensors"))
		if _, err := Open(d, releaseOptions(d)); err == nil || !strings.Contains(err.Error(), `"model-00002-of-00002.safetensors" is missing`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("index disagrees", func(t *testing.T) {
		d := copyDir(t, tinyRelease)
		p := filepath.Join(d, indexFile)
		b, _ := os.ReadFile(p)
		var idx shardIndex
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatal(err)
		}
		if idx.WeightMap["thinker.model.norm.weight"] == "model-00001-of-00002.safetensors" {
			idx.WeightMap["thinker.model.norm.weight"] = "model-00002-of-00002.safetensors"
		} else {
			idx.WeightMap["thinker.model.norm.weight"] = "model-00001-of-00002.safetensors"
		}
		b, _ = json.Marshal(idx)
		os.WriteFile(p, b, 0o644)
		if _, err := Open(d, releaseOptions(d)); err == nil || !strings.Contains(err.Error(), "thinker.model.norm.weight") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("total size", func(t *testing.T) {
		d := copyDir(t, tinyRelease)
		p := filepath.Join(d, indexFile)
		b, _ := os.ReadFile(p)
		b = bytes.Replace(b, []byte(`"total_size": 1460224`), []byte(`"total_size": 1460220`), 1)
		os.WriteFile(p, b, 0o644)
		if _, err := Open(d, releaseOptions(d)); err == nil || !strings.Contains(err.Error(), "total_size is 1460220 but the shards hold 1460224") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("escaping shard name", func(t *testing.T) {
		d := copyDir(t, tinyRelease)
		p := filepath.Join(d, indexFile)
		b, _ := os.ReadFile(p)
		b = bytes.Replace(b, []byte(`"thinker.model.norm.weight": "model-`), []byte(`"thinker.model.norm.weight": "../model-`), 1)
		os.WriteFile(p, b, 0o644)
		if _, err := Open(d, releaseOptions(d)); err == nil || !strings.Contains(err.Error(), "not a .safetensors file name") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("foreign prefix", func(t *testing.T) {
		d := t.TempDir()
		f := stFile(map[string]any{"vision.w": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4}}}, make([]byte, 4))
		os.WriteFile(filepath.Join(d, singleFile), f, 0o644)
		if _, err := Open(d, releaseOptions(d)); err == nil || !strings.Contains(err.Error(), `"vision.w"`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("truncated shard", func(t *testing.T) {
		d := copyDir(t, tinyRelease)
		p := filepath.Join(d, "model-00001-of-00002.safetensors")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, b[:len(b)-100], 0o644)
		if _, err := Open(d, releaseOptions(d)); err == nil || !strings.Contains(err.Error(), "model-00001-of-00002.safetensors: tensor") {
			t.Fatalf("got %v", err)
		}
	})
}

// Writing the release's tensors back gives files our reader maps to the same
// tensors, byte for byte.
func TestWriteSafetensorsRoundTrip(t *testing.T) {
	m, err := Open(tinyRelease, releaseOptions(tinyRelease))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var ts []*Tensor
	for _, n := range m.Names() {
		x, _ := m.Tensor(n)
		ts = append(ts, x)
	}
	p := filepath.Join(t.TempDir(), "all.safetensors")
	if err := WriteSafetensors(p, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.Names()) != len(ts) {
		t.Fatalf("%d tensors back, wrote %d", len(r.Names()), len(ts))
	}
	for _, x := range ts {
		y, err := r.Tensor(x.Name)
		if err != nil || !bytes.Equal(x.Data, y.Data) || !slices.Equal(x.Shape, y.Shape) || x.Type != y.Type {
			t.Fatalf("%s differs: %v", x.Name, err)
		}
	}
	if err := WriteSafetensors(p, []*Tensor{{Name: "q", Type: quant.Q4_0, Shape: []int{32}, Data: make([]byte, 18)}}, nil); err == nil {
		t.Error("q4_0 written to safetensors")
	}
}
