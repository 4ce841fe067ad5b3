package convert

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

const (
	tinyRelease = "../../testdata/clef-tiny/release"
	tinyBF16    = "../../testdata/clef-tiny/release-bf16"
)

// relRMSE is the error of got against want relative to want's RMS.
func relRMSE(want, got []float32) float64 {
	var e, s float64
	for i := range want {
		d := float64(want[i]) - float64(got[i])
		e += d * d
		s += float64(want[i]) * float64(want[i])
	}
	if s == 0 {
		return math.Sqrt(e)
	}
	return math.Sqrt(e / s)
}

// maxRel bounds the relative RMSE of one tensor quantized to typ from
// Gaussian-like weights (a broken layout or scale gives errors near 1).
var maxRel = map[quant.Type]float64{
	quant.F32: 0, quant.BF16: 0.005, quant.F16: 0.001, quant.Q8_0: 0.01,
	quant.Q6_K: 0.03, quant.Q5_K: 0.06, quant.Q5_0: 0.06, quant.Q5_1: 0.06,
	quant.Q4_K: 0.12, quant.Q4_0: 0.15, quant.Q3_K: 0.25, quant.Q2_K: 0.5,
}

// logical opens the model at path as the engine does and returns its
// tensors by checkpoint name: every row of the decoder's table (stacked
// experts one matrix per expert) and every other stored tensor under its
// own name.
func logical(t *testing.T, path string) map[string]*weights.Tensor {
	t.Helper()
	r, err := release.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	out := map[string]*weights.Tensor{}
	used := map[string]bool{}
	for _, row := range release.DecoderTensors(r.Config.Thinker.Text) {
		w, names, err := release.Lookup(r.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			used[n] = true
		}
		if !row.Stacked() {
			out[row.Name] = w
			continue
		}
		for e := 0; e < w.Shape[0]; e++ {
			out[row.ExpertName(e)] = w.Slice(e)
		}
	}
	for _, n := range r.Weights.Names() {
		if !used[n] {
			out[n], _ = r.Weights.Tensor(n)
		}
	}
	return out
}

func sortedNames(m map[string]*weights.Tensor) []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// checkQuantized opens the written backbone+companion and compares every
// tensor with the source's, by checkpoint name.
func checkQuantized(t *testing.T, srcPath string, out string, res *Result) {
	t.Helper()
	src, m := logical(t, srcPath), logical(t, out)
	want := sortedNames(src)
	got := sortedNames(m)
	if strings.Join(want, ",") != strings.Join(got, ",") {
		t.Fatalf("names differ: %d written vs %d in the source", len(got), len(want))
	}
	for _, n := range want {
		a, b := src[n], m[n]
		if len(a.Shape) != len(b.Shape) {
			t.Fatalf("%s: shape %v vs %v", n, b.Shape, a.Shape)
		}
		for i := range a.Shape {
			if a.Shape[i] != b.Shape[i] {
				t.Fatalf("%s: shape %v vs %v", n, b.Shape, a.Shape)
			}
		}
		fa, err := weights.Float32(a)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := weights.Float32(b)
		if err != nil {
			t.Fatal(err)
		}
		if b.Type == a.Type || (b.Type == quant.F32 && (a.Type == quant.BF16 || a.Type == quant.F16)) {
			for i := range fa {
				if math.Float32bits(fa[i]) != math.Float32bits(fb[i]) {
					t.Fatalf("%s: %s kept as %s is not exact at %d", n, a.Type, b.Type, i)
				}
			}
			continue
		}
		lim, ok := maxRel[b.Type]
		if !ok {
			t.Fatalf("%s: unexpected type %v", n, b.Type)
		}
		if e := relRMSE(fa, fb); e > lim {
			t.Errorf("%s as %v: relative RMSE %.4f > %.4f", n, b.Type, e, lim)
		}
	}
}

func TestQuantizeTinyEveryType(t *testing.T) {
	relDesc, err := Describe(tinyRelease, 1000)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, ft := range FileTypes {
		t.Run(ft.Name, func(t *testing.T) {
			out := filepath.Join(dir, "tiny-"+ft.Name+".gguf")
			res, err := Quantize(tinyRelease, Options{Type: ft, Out: out, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			checkQuantized(t, tinyRelease, out, res)
			checkDescribe(t, relDesc, out, ft, res)
			// hidden 64 and expert ffn 32: no K-quant fits, every K type
			// must have fallen back and said so.
			if ft.Base != quant.BF16 && ft.Base != quant.Q8_0 && len(res.Fallbacks) == 0 {
				t.Error("no fallbacks reported")
			}
			g, err := weights.OpenGGUF(out)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			for _, ti := range g.Tensors {
				if strings.Contains(ti.Name, "norm") || strings.Contains(ti.Name, "gate_inp") {
					if ti.Type != quant.F32 {
						t.Errorf("%s is %v, want f32", ti.Name, ti.Type)
					}
				}
			}
			if got, _ := g.Uint("general.file_type"); got != uint64(ft.LlamaFtype) {
				t.Errorf("file_type %d", got)
			}
			toks, _ := g.Get("tokenizer.ggml.tokens")
			if len(toks.([]string)) != 512 {
				t.Errorf("%d tokens", len(toks.([]string)))
			}
			if eos, _ := g.Uint("tokenizer.ggml.eos_token_id"); eos != 501 {
				t.Errorf("eos %d", eos)
			}
		})
	}
}

// The bf16 release converts to a bf16 GGUF by copying bytes: the matrices
// are bit-identical to the source.
func TestQuantizeBF16IsACopy(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b.gguf")
	ft, _ := ParseFileType("bf16")
	var prog bytes.Buffer
	res, err := Quantize(tinyBF16, Options{Type: ft, Out: out, Progress: &prog, TowerType: quant.Q8_0})
	if err != nil {
		t.Fatal(err)
	}
	if p := prog.String(); !strings.Contains(p, "203/203 tensors") || !strings.Contains(p, "ETA 0s") || !strings.Contains(p, "\r[") {
		t.Errorf("progress: %q", p)
	}
	c, err := weights.OpenGGUF(res.Companion)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var q8 int
	for _, ti := range c.Tensors {
		if ti.Type == quant.Q8_0 {
			q8++
			if !strings.HasPrefix(ti.Name, "thinker.audio_tower.") && !strings.HasPrefix(ti.Name, "thinker.visual.") {
				t.Errorf("%s quantized", ti.Name)
			}
		}
	}
	if q8 == 0 {
		t.Error("no tower matrix stored as q8_0")
	}
	checkQuantized(t, tinyBF16, out, res)
	src, m := logical(t, tinyBF16), logical(t, out)
	a := src["thinker.model.layers.1.mlp.experts.5.up_proj.weight"]
	b := m["thinker.model.layers.1.mlp.experts.5.up_proj.weight"]
	if !bytes.Equal(a.Data, b.Data) {
		t.Error("bf16 expert not copied byte for byte")
	}
}

// writeSynthetic writes a small random F32 qwen3moe GGUF whose rows are 256
// wide, so that the K-quants themselves (not their fallbacks) are used.
func writeSynthetic(t *testing.T, path string) {
	t.Helper()
	const hidden, heads, kvHeads, hd, experts, ff, vocab = 256, 4, 1, 64, 2, 256, 16
	a := "qwen3moe."
	kv := []weights.GGUFKV{
		{Key: "general.architecture", Value: "qwen3moe"},
		{Key: a + "block_count", Value: uint32(1)},
		{Key: a + "context_length", Value: uint32(4096)},
		{Key: a + "embedding_length", Value: uint32(hidden)},
		{Key: a + "feed_forward_length", Value: uint32(ff)},
		{Key: a + "attention.head_count", Value: uint32(heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(kvHeads)},
		{Key: a + "attention.key_length", Value: uint32(hd)},
		{Key: a + "attention.value_length", Value: uint32(hd)},
		{Key: a + "rope.freq_base", Value: float32(1e6)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: float32(1e-6)},
		{Key: a + "expert_count", Value: uint32(experts)},
		{Key: a + "expert_used_count", Value: uint32(1)},
		{Key: a + "expert_feed_forward_length", Value: uint32(ff)},
		{Key: "tokenizer.ggml.model", Value: "none"},
	}
	infos := []weights.GGUFTensorInfo{
		{Name: "token_embd.weight", Dims: []uint64{hidden, vocab}},
		{Name: "blk.0.attn_norm.weight", Dims: []uint64{hidden}},
		{Name: "blk.0.attn_q.weight", Dims: []uint64{hidden, heads * hd}},
		{Name: "blk.0.attn_k.weight", Dims: []uint64{hidden, kvHeads * hd}},
		{Name: "blk.0.attn_v.weight", Dims: []uint64{hidden, kvHeads * hd}},
		{Name: "blk.0.attn_output.weight", Dims: []uint64{heads * hd, hidden}},
		{Name: "blk.0.attn_q_norm.weight", Dims: []uint64{hd}},
		{Name: "blk.0.attn_k_norm.weight", Dims: []uint64{hd}},
		{Name: "blk.0.ffn_norm.weight", Dims: []uint64{hidden}},
		{Name: "blk.0.ffn_gate_inp.weight", Dims: []uint64{hidden, experts}},
		{Name: "blk.0.ffn_gate_exps.weight", Dims: []uint64{hidden, ff, experts}},
		{Name: "blk.0.ffn_up_exps.weight", Dims: []uint64{hidden, ff, experts}},
		{Name: "blk.0.ffn_down_exps.weight", Dims: []uint64{ff, hidden, experts}},
		{Name: "output_norm.weight", Dims: []uint64{hidden}},
		{Name: "output.weight", Dims: []uint64{hidden, vocab}},
	}
	var buf bytes.Buffer
	w, err := weights.NewGGUFWriter(&buf, kv, infos)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ti := range infos {
		n := 1
		for _, d := range ti.Dims {
			n *= int(d)
		}
		data := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
		}
		if err := w.WriteTensor(ti.Name, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestQuantizeGGUFSourceKQuants(t *testing.T) {
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "synthetic.gguf")
	writeSynthetic(t, srcPath)
	for _, name := range []string{"q4_k_m"} {
		ft, _ := ParseFileType(name)
		out := filepath.Join(dir, name+".gguf")
		res, err := Quantize(srcPath, Options{Type: ft, Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Fallbacks) != 0 {
			t.Errorf("unexpected fallbacks %v", res.Fallbacks)
		}
		if res.Types[ft.Base] == 0 || res.Types[quant.Q6_K] == 0 {
			t.Errorf("types %v", res.Types)
		}
		checkQuantized(t, srcPath, out, res)
	}
}

func TestPolicy(t *testing.T) {
	q4, _ := ParseFileType("q4_k_m")
	more := 0
	for l := 0; l < 48; l++ {
		if TensorType(q4, release.RoleFFNDown, l, 48, 8) == quant.Q6_K {
			more++
		}
		if TensorType(q4, release.RoleRouter, l, 48, 8) != quant.F32 || TensorType(q4, release.RoleNorm, l, 48, 8) != quant.F32 {
			t.Fatal("router or norm quantized")
		}
		if TensorType(q4, release.RoleFFNGate, l, 48, 8) != quant.Q4_K {
			t.Fatal("ffn_gate not q4_K")
		}
	}
	// Layers 0-5 and 42-47, and 12 of the 36 between.
	if more != 24 {
		t.Errorf("%d of 48 ffn_down layers get q6_K, want 24 (llama.cpp's use_more_bits)", more)
	}
	for _, c := range []struct {
		want quant.Type
		cols int
		got  quant.Type
	}{{quant.Q4_K, 64, quant.Q5_0}, {quant.Q6_K, 96, quant.Q8_0}, {quant.Q2_K, 32, quant.Q4_0}, {quant.Q5_K, 48, quant.F16}, {quant.Q4_K, 512, quant.Q4_K}, {quant.BF16, 7, quant.BF16}} {
		if g := Fallback(c.want, c.cols); g != c.got {
			t.Errorf("Fallback(%v, %d) = %v, want %v", c.want, c.cols, g, c.got)
		}
	}
	if _, err := ParseFileType("q4_k_s"); err == nil || !strings.Contains(err.Error(), "q4_k_m") {
		t.Errorf("unknown type error: %v", err)
	}
}

// checkDescribe compares what inspect says about a written file with the
// source's description and with the GGUF tensor infos read directly.
func checkDescribe(t *testing.T, rel *Description, out string, ft FileType, res *Result) {
	t.Helper()
	d, err := Describe(out, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if d.Params != rel.Params || d.Tensors != rel.Tensors {
		t.Errorf("params %+v (%d tensors), source %+v (%d)", d.Params, d.Tensors, rel.Params, rel.Tensors)
	}
	if d.Config == nil || d.Config.Layers != rel.Config.Layers || d.Config.Hidden != rel.Config.Hidden || d.Config.Experts != rel.Config.Experts || d.Config.ExpertFFN != rel.Config.ExpertFFN {
		t.Errorf("config %+v, source %+v", d.Config, rel.Config)
	}
	if !strings.Contains(d.Architecture, "qwen3moe") || !strings.Contains(d.Architecture, ft.Name) || !strings.Contains(d.Architecture, "companion") {
		t.Errorf("architecture %q", d.Architecture)
	}
	if d.Memory.Weights != d.WeightBytes || d.Memory.KV != 4*2*1000*int64(rel.Config.KVHeads*rel.Config.HeadDim) || d.Memory.Total != d.Memory.Weights+d.Memory.Activations+d.Memory.KV {
		t.Errorf("memory %+v", d.Memory)
	}
	// Per type, params and bytes as the GGUF tensor infos give them.
	want := map[quant.Type][2]int64{}
	var files int64
	for _, p := range []string{out, res.Companion} {
		g, err := weights.OpenGGUF(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range g.Tensors {
			n := int64(1)
			for _, x := range ti.Dims {
				n *= int64(x)
			}
			w := want[ti.Type]
			want[ti.Type] = [2]int64{w[0] + n, w[1] + int64(len(ti.Data))}
		}
		st, _ := os.Stat(p)
		files += st.Size()
		g.Close()
	}
	var bytes int64
	for _, s := range d.Types {
		if w := want[s.Type]; w[0] != s.Params || w[1] != s.Bytes {
			t.Errorf("%v: %d params %d bytes, files hold %d and %d", s.Type, s.Params, s.Bytes, w[0], w[1])
		}
		delete(want, s.Type)
		bytes += s.Bytes
	}
	if len(want) != 0 || bytes != d.WeightBytes || len(d.Files) != 2 || d.Files[0].Bytes+d.Files[1].Bytes != files {
		t.Errorf("types missing %v, bytes %d vs %d, files %+v", want, bytes, d.WeightBytes, d.Files)
	}
}

func TestQuantizeErrors(t *testing.T) {
	dir := t.TempDir()
	q8, _ := ParseFileType("q8_0")
	src := filepath.Join(dir, "s.gguf")
	writeSynthetic(t, src)
	if _, err := Quantize(tinyRelease, Options{Out: filepath.Join(dir, "z.gguf")}); err == nil || !strings.Contains(err.Error(), "file type") {
		t.Errorf("zero file type: %v", err)
	}
	for _, c := range []struct {
		src, out, want string
	}{
		{tinyRelease, filepath.Join(dir, "missing", "x.gguf"), "does not exist"},
		{tinyRelease, filepath.Join(dir, "x.head.gguf"), "FILE.gguf"},
		{src, src, "overwrite the source"},
		{"../../testdata/omni", filepath.Join(dir, "o.gguf"), "tokenizer.json"},
	} {
		_, err := Quantize(c.src, Options{Type: q8, Out: c.out})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: %v, want %q", c.src, c.out, err, c.want)
		}
	}
}

// A NaN in a source weight is a clear error naming the tensor and row, never a
// silently garbage block.
func TestQuantizeRejectsNaN(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "nan.gguf")
	writeSynthetic(t, src)
	g, err := weights.OpenGGUF(src)
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for _, ti := range g.Tensors {
		if ti.Name == "blk.0.attn_q.weight" {
			off = g.DataOffset + int64(ti.Offset) + 4*(3*256+5) // row 3, column 5
		}
	}
	g.Close()
	if off < 0 {
		t.Fatal("attn_q not found")
	}
	f, err := os.OpenFile(src, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var nan [4]byte
	binary.LittleEndian.PutUint32(nan[:], math.Float32bits(float32(math.NaN())))
	if _, err := f.WriteAt(nan[:], off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, name := range []string{"q8_0", "q4_k_m"} {
		ft, _ := ParseFileType(name)
		_, err := Quantize(src, Options{Type: ft, Out: filepath.Join(dir, name+".gguf"), Threads: 2})
		if err == nil || !strings.Contains(err.Error(), "self_attn.q_proj") || !strings.Contains(err.Error(), "row 3") {
			t.Errorf("%s: got %v, want an error naming the tensor and row 3", name, err)
		}
	}
}
