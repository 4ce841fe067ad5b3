package weights

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// A GGUF's tensors keep their llama.cpp names; stacked experts stay one
// [E, out, in] tensor whose matrices Part and Slice address.
func TestGGUFStoredNames(t *testing.T) {
	m, err := Open(ggufFixtures[2], Options{})
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
		"token_embd.weight":          {256, 256},
		"blk.1.attn_q.weight":        {256, 256},
		"blk.1.attn_k.weight":        {128, 256},
		"blk.0.ffn_gate_inp.weight":  {8, 256},
		"blk.0.ffn_gate_exps.weight": {8, 256, 256},
		"blk.1.ffn_down_exps.weight": {8, 256, 256},
		"output_norm.weight":         {256},
		"blk.0.attn_q_norm.weight":   {64},
		"blk.0.ffn_norm.weight":      {256},
	}
	for n, sh := range want {
		ten, err := m.Tensor(n)
		if err != nil {
			t.Error(err)
			continue
		}
		if !slices.Equal(ten.Shape, sh) {
			t.Errorf("%s: shape %v, want %v", n, ten.Shape, sh)
		}
	}
	if len(m.Names()) != len(f.Tensors) {
		t.Errorf("%d names for %d stored tensors", len(m.Names()), len(f.Tensors))
	}
	for _, n := range m.Names() {
		if strings.HasPrefix(n, "thinker.") || strings.Contains(n, ".experts.") {
			t.Errorf("renamed tensor %s: weights keeps stored names", n)
		}
	}
	// The stacked tensor is the file's bytes; its matrices tile them
	// exactly (the per-expert views the loader used to make).
	for _, ti := range f.Tensors {
		if ti.Name != "blk.0.ffn_down_exps.weight" {
			continue
		}
		ten, _ := m.Tensor(ti.Name)
		if ten.Parts != nil || &ten.Data[0] != &ti.Data[0] || len(ten.Data) != len(ti.Data) {
			t.Fatal("stacked tensor is not the file's bytes")
		}
		per := len(ti.Data) / 8
		for e := 0; e < 8; e++ {
			p := ten.Part(e)
			if &p[0] != &ti.Data[e*per] || len(p) != per || cap(p) != per {
				t.Errorf("expert %d: Part is not a view of its slice of the stacked tensor", e)
			}
			v := ten.Slice(e)
			if !slices.Equal(v.Shape, []int{256, 256}) || v.Type != ten.Type || !bytes.Equal(v.Data, ti.Data[e*per:(e+1)*per]) || &v.Data[0] != &ti.Data[e*per] {
				t.Errorf("expert %d: Slice is %s %v, not the old per-expert view", e, v.Type, v.Shape)
			}
			// Row r of expert e is row e*256+r of the stack.
			rs, err := Rows(v, []int{3})
			if err != nil {
				t.Fatal(err)
			}
			all, err := Rows(ten, []int{e*256 + 3})
			if err != nil {
				t.Fatal(err)
			}
			for j := range rs[0] {
				if math.Float32bits(rs[0][j]) != math.Float32bits(all[0][j]) {
					t.Fatalf("expert %d row 3 col %d: %v vs %v", e, j, rs[0][j], all[0][j])
				}
			}
		}
	}
}

// The f32 and q8_0 fixtures hold the same weights: dequantized q8_0 stays
// within Q8_0's error of the f32 values, norms and router are identical.
func TestGGUFQ8MatchesF32(t *testing.T) {
	a, err := Open(ggufFixtures[0], Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ggufFixtures[1], Options{})
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
		m, err := Open(tinyRelease, releaseOptions(tinyRelease))
		if err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}

func BenchmarkRowsQ4K(b *testing.B) {
	m, err := Open(ggufFixtures[2], Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	up, err := m.Tensor("blk.0.ffn_up_exps.weight")
	if err != nil {
		b.Fatal(err)
	}
	t := up.Slice(0)
	rows := []int{0, 17, 101, 255}
	b.SetBytes(int64(len(rows) * t.Shape[1] * 4))
	for b.Loop() {
		if _, err := Rows(t, rows); err != nil {
			b.Fatal(err)
		}
	}
}
