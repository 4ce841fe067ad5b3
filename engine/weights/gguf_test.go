package weights

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/quant"
)

var ggufFixtures = []string{
	"../../testdata/qwen3moe/tiny64-f32.gguf",
	"../../testdata/qwen3moe/tiny64-q8_0.gguf",
	"../../testdata/qwen3moe/tiny256-q4_k_m.gguf",
}

// Rewriting a fixture with our writer from what our reader parsed gives the
// same bytes: reader and writer agree with llama.cpp's gguf layout.
func TestGGUFRoundTripFixtures(t *testing.T) {
	for _, p := range ggufFixtures {
		f, err := OpenGGUF(p)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := NewGGUFWriter(&buf, f.KV, f.Tensors)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Tensors {
			if err := w.WriteTensor(ti.Name, ti.Data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		orig, _ := os.ReadFile(p)
		if !bytes.Equal(buf.Bytes(), orig) {
			t.Errorf("%s: rewritten file differs (%d vs %d bytes)", p, buf.Len(), len(orig))
		}
		f.Close()
	}
}

func TestGGUFModelNames(t *testing.T) {
	m, err := Open(ggufFixtures[2])
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.(*Set)
	f := s.GGUF[0]
	if a, _ := f.Architecture(); a != "qwen3moe" {
		t.Errorf("architecture %q", a)
	}
	if n, err := f.Uint("qwen3moe.expert_count"); err != nil || n != 8 {
		t.Errorf("expert_count %d %v", n, err)
	}
	if e, err := f.Float("qwen3moe.attention.layer_norm_rms_epsilon"); err != nil || e < 9e-7 || e > 1.1e-6 {
		t.Errorf("eps %v %v", e, err)
	}
	want := map[string][]int{
		"thinker.model.embed_tokens.weight":                      {256, 256},
		"thinker.model.layers.1.self_attn.q_proj.weight":         {256, 256},
		"thinker.model.layers.1.self_attn.k_proj.weight":         {128, 256},
		"thinker.model.layers.0.mlp.gate.weight":                 {8, 256},
		"thinker.model.layers.0.mlp.experts.7.gate_proj.weight":  {256, 256},
		"thinker.model.layers.1.mlp.experts.0.down_proj.weight":  {256, 256},
		"thinker.model.norm.weight":                              {256},
		"thinker.model.layers.0.self_attn.q_norm.weight":         {64},
		"thinker.model.layers.0.post_attention_layernorm.weight": {256},
	}
	for n, sh := range want {
		ten, err := m.Tensor(n)
		if err != nil {
			t.Error(err)
			continue
		}
		if !equalInts(ten.Shape, sh) {
			t.Errorf("%s: shape %v, want %v", n, ten.Shape, sh)
		}
	}
	for _, n := range m.Names() {
		if strings.HasPrefix(n, "blk.") || strings.Contains(n, "_exps") {
			t.Errorf("unmapped name %s", n)
		}
	}
	// Expert views tile the stacked tensor exactly.
	for _, ti := range f.Tensors {
		if ti.Name != "blk.0.ffn_down_exps.weight" {
			continue
		}
		per := len(ti.Data) / 8
		for e := 0; e < 8; e++ {
			ten, _ := m.Tensor("thinker.model.layers.0.mlp.experts." + string(rune('0'+e)) + ".down_proj.weight")
			if &ten.Data[0] != &ti.Data[e*per] || len(ten.Data) != per {
				t.Errorf("expert %d is not a view of its slice of the stacked tensor", e)
			}
		}
	}
}

// The f32 and q8_0 fixtures hold the same weights: dequantized q8_0 stays
// within Q8_0's error of the f32 values, norms and router are identical.
func TestGGUFQ8MatchesF32(t *testing.T) {
	a, err := Open(ggufFixtures[0])
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ggufFixtures[1])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(a.Names()) != len(b.Names()) {
		t.Fatalf("%d vs %d names", len(a.Names()), len(b.Names()))
	}
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
		if tb.Type == quant.F32 {
			if !bytes.Equal(ta.Data, tb.Data) {
				t.Errorf("%s: F32 tensors differ", n)
			}
			continue
		}
		cols := ta.Shape[len(ta.Shape)-1]
		for i := 0; i < len(fa); i += 32 {
			amax := float32(0)
			for _, v := range fa[i : i+32] {
				amax = max(amax, abs32(v))
			}
			for j := i; j < i+32; j++ {
				// q = round(x/d) with d = amax/127, stored as fp16(d): error <= d/2 + 127*(fp16 rounding of d).
				if d := abs32(fa[j] - fb[j]); d > amax/127*(0.5+127.0/2048)+1e-7 {
					t.Fatalf("%s[%d] (cols %d): %v vs %v", n, j, cols, fa[j], fb[j])
				}
			}
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGGUFValidation(t *testing.T) {
	orig, err := os.ReadFile(ggufFixtures[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseGGUF("x.gguf", orig)
	if err != nil {
		t.Fatal(err)
	}
	// Offsets of the fields of the first tensor info.
	info0 := int(f.DataOffset) // upper bound; find the name instead
	info0 = bytes.Index(orig, []byte("token_embd.weight")) - 8
	nameEnd := info0 + 8 + len("token_embd.weight")
	mut := func(fn func(b []byte) []byte) []byte {
		b := append([]byte(nil), orig...)
		return fn(b)
	}
	put64 := func(off int, v uint64) func(b []byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
	}
	put32 := func(off int, v uint32) func(b []byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	}
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "not a GGUF file"},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), "bad magic"},
		{"version", mut(put32(4, 7)), "unsupported GGUF version 7"},
		{"tensor count", mut(put64(8, 1<<40)), "tensor count"},
		{"kv count", mut(put64(16, 1<<40)), "metadata count"},
		{"key length", mut(put64(24, 1<<50)), "absurd"},
		{"truncated header", orig[:200], "truncated"},
		{"truncated data", orig[:len(orig)-10], `tensor "output.weight"`},
		{"dims", mut(put32(nameEnd, 9)), `tensor "token_embd.weight": 9 dimensions`},
		{"type", mut(put32(nameEnd+4+16, 77)), `tensor "token_embd.weight": unsupported ggml type 77`},
		{"misaligned", mut(put64(nameEnd+4+16+4, 3)), `not aligned`},
		{"overlap", mut(put64(nameEnd+4+16+4, 32)), `overlap`},
		{"past end", mut(put64(nameEnd+4+16+4, 1<<40)), `runs past the end`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseGGUF("x.gguf", c.file)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x.gguf") {
				t.Fatalf("error %q does not say %q and name the file", err, c.want)
			}
		})
	}
}

func TestGGUFWriterChecks(t *testing.T) {
	infos := []GGUFTensorInfo{{Name: "a", Type: quant.F32, Dims: []uint64{3}}, {Name: "b", Type: quant.Q8_0, Dims: []uint64{32, 2}}}
	var buf bytes.Buffer
	w, err := NewGGUFWriter(&buf, []GGUFKV{{"general.architecture", "x"}, {"v", []int32{1, 2}}, {"general.alignment", uint32(64)}}, infos)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", make([]byte, 68)); err == nil {
		t.Error("out of order accepted")
	}
	if err := w.WriteTensor("a", make([]byte, 8)); err == nil {
		t.Error("wrong size accepted")
	}
	if err := w.WriteTensor("a", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Error("close with a missing tensor accepted")
	}
	if err := w.WriteTensor("b", make([]byte, 68)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "t.gguf")
	os.WriteFile(p, buf.Bytes(), 0o644)
	f, err := OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Alignment != 64 || f.Tensors[1].Offset != 64 || len(f.Tensors[1].Data) != 68 || f.Tensors[0].Data[11] != 12 {
		t.Errorf("read back: %+v", f.Tensors)
	}
	if v, _ := f.Get("v"); v.([]int32)[1] != 2 {
		t.Errorf("array %v", v)
	}
	if _, err := NewGGUFWriter(&buf, nil, []GGUFTensorInfo{{Name: "c", Type: quant.Q4_K, Dims: []uint64{64}}}); err == nil {
		t.Error("row not fitting the block accepted")
	}
}

// llama.cpp's converter names Qwen3-Omni's text model qwen3vlmoe: the same
// tensors map to the same canonical names.
func TestGGUFQwen3VLMoE(t *testing.T) {
	f, err := OpenGGUF(ggufFixtures[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kv []GGUFKV
	for _, e := range f.KV {
		k := e.Key
		if rest, ok := strings.CutPrefix(k, "qwen3moe."); ok {
			k = "qwen3vlmoe." + rest
		}
		v := e.Value
		if k == "general.architecture" {
			v = "qwen3vlmoe"
		}
		kv = append(kv, GGUFKV{k, v})
	}
	kv = append(kv, GGUFKV{"qwen3vlmoe.rope.dimension_sections", []int32{4, 2, 2, 0}})
	var buf bytes.Buffer
	w, err := NewGGUFWriter(&buf, kv, f.Tensors)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		w.WriteTensor(ti.Name, ti.Data)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "vl.gguf")
	os.WriteFile(p, buf.Bytes(), 0o644)
	a, err := Open(ggufFixtures[0])
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if strings.Join(a.Names(), ",") != strings.Join(b.Names(), ",") {
		t.Fatal("qwen3vlmoe names differ from qwen3moe names")
	}
	for _, n := range a.Names() {
		ta, _ := a.Tensor(n)
		tb, _ := b.Tensor(n)
		if !bytes.Equal(ta.Data, tb.Data) || !equalInts(ta.Shape, tb.Shape) {
			t.Fatalf("%s differs", n)
		}
	}
}

func BenchmarkParseGGUF(b *testing.B) {
	data, err := os.ReadFile(ggufFixtures[2])
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := parseGGUF("x", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenRelease(b *testing.B) {
	for b.Loop() {
		m, err := Open(tinyRelease)
		if err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}

func BenchmarkRowsQ4K(b *testing.B) {
	m, err := Open(ggufFixtures[2])
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	t, _ := m.Tensor("thinker.model.layers.0.mlp.experts.0.up_proj.weight")
	rows := []int{0, 17, 101, 255}
	b.SetBytes(int64(len(rows) * t.Shape[1] * 4))
	for b.Loop() {
		if _, err := Rows(t, rows); err != nil {
			b.Fatal(err)
		}
	}
}
