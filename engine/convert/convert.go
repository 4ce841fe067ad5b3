package convert

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Options control Quantize.
type Options struct {
	// Type is the file type of the backbone.
	Type FileType
	// Out is the backbone GGUF path; the companion goes next to it at
	// weights.CompanionPath(Out) (FILE.gguf -> FILE.head.gguf).
	Out string
	// Progress, when not nil, receives a progress line (tensors, bytes, ETA),
	// redrawn in place with \r.
	Progress io.Writer
	// Threads quantizes rows in parallel (default GOMAXPROCS).
	Threads int
	// Name goes to general.name (default: the source's base name).
	Name string
	// TowerType, when Q8_0, stores the audio and vision towers' matrices
	// (2-D, rows a multiple of 32) as Q8_0 in the companion; by default they
	// keep the source precision. The joint head is never quantized.
	TowerType quant.Type
}

// Result describes what Quantize wrote.
type Result struct {
	Backbone, Companion string
	// Tensors counts the GGUF tensors written to each file.
	BackboneTensors, CompanionTensors int
	// Bytes is the size of each file.
	BackboneBytes, CompanionBytes int64
	// Types counts backbone tensors per storage type.
	Types map[quant.Type]int
	// Fallbacks lists tensors whose rows did not fit the wanted type's
	// blocks: "blk.0.ffn_down_exps.weight: q4_K -> q5_0 (rows of 32)".
	Fallbacks []string
}

// item is one GGUF tensor to write: one source tensor, or the experts of a
// layer stacked along the outermost dimension.
type item struct {
	name  string
	typ   quant.Type
	dims  []uint64 // GGUF order
	src   []*weights.Tensor
	shape []int // true shape when GGUF cannot hold its rank (companion)
}

// Quantize converts the model at src (a release or MLX directory, or a
// qwen3moe/qwen3vlmoe GGUF) into a backbone GGUF and its companion.
func Quantize(src string, opts Options) (*Result, error) {
	if opts.Out == "" || !strings.HasSuffix(opts.Out, ".gguf") || strings.HasSuffix(opts.Out, ".head.gguf") {
		return nil, fmt.Errorf("quantize: output %q must be a FILE.gguf path (not .head.gguf)", opts.Out)
	}
	if st, err := os.Stat(filepath.Dir(opts.Out)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("quantize: output directory %s does not exist", filepath.Dir(opts.Out))
	}
	for _, o := range []string{opts.Out, weights.CompanionPath(opts.Out)} {
		if same(o, src) || same(o, weights.CompanionPath(src)) {
			return nil, fmt.Errorf("quantize: output %s would overwrite the source", o)
		}
	}
	if ft, err := ParseFileType(opts.Type.Name); err != nil || ft != opts.Type {
		return nil, fmt.Errorf("quantize: file type %q is not one of FileTypes", opts.Type.Name)
	}
	if opts.TowerType != 0 && opts.TowerType != quant.Q8_0 {
		return nil, fmt.Errorf("quantize: towers can be kept or stored as q8_0, not %v", opts.TowerType)
	}
	if opts.Threads <= 0 {
		opts.Threads = runtime.GOMAXPROCS(0)
	}
	m, err := weights.Open(src)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	set, _ := m.(*weights.Set)
	if set == nil {
		return nil, fmt.Errorf("quantize: %s: unsupported model source", src)
	}
	var cfg *TextConfig
	var srcGGUF *weights.GGUFFile
	if set.Format == "gguf" {
		srcGGUF = set.GGUF[0]
		cfg, err = GGUFTextConfig(srcGGUF)
	} else {
		cfg, err = ReadTextConfig(src)
	}
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	res := &Result{Backbone: opts.Out, Companion: weights.CompanionPath(opts.Out), Types: map[quant.Type]int{}}
	items, used, err := planBackbone(m, cfg, opts.Type, res)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	embed, _ := m.Tensor("thinker.model.embed_tokens.weight")
	var tok []weights.GGUFKV
	if srcGGUF != nil {
		for _, kv := range srcGGUF.KV {
			if strings.HasPrefix(kv.Key, "tokenizer.") {
				tok = append(tok, kv)
			}
		}
	} else if tok, err = tokenizerKV(src, embed.Shape[0]); err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	name := opts.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(filepath.Clean(src)), ".gguf")
	}
	kv := append(backboneKV(cfg, opts.Type, name, embed.Shape[0]), tok...)

	comp, compKV, err := planCompanion(m, set, used, srcGGUF, filepath.Base(opts.Out), name, opts.TowerType)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	prog := newProgress(opts.Progress, append(append([]item(nil), items...), comp...))
	if res.BackboneBytes, err = writeGGUF(opts.Out, kv, items, opts.Threads, prog); err != nil {
		return nil, err
	}
	if res.CompanionBytes, err = writeGGUF(res.Companion, compKV, comp, opts.Threads, prog); err != nil {
		return nil, err
	}
	prog.finish()
	res.BackboneTensors, res.CompanionTensors = len(items), len(comp)
	return res, nil
}

// same reports whether two paths name the same existing file.
func same(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// backbone tensor names per layer, in the order llama.cpp's converter writes.
var layerTensors = []struct {
	gguf, canon string
	role        Role
}{
	{"attn_norm.weight", "input_layernorm.weight", RoleNorm},
	{"attn_q.weight", "self_attn.q_proj.weight", RoleAttnQ},
	{"attn_k.weight", "self_attn.k_proj.weight", RoleAttnK},
	{"attn_v.weight", "self_attn.v_proj.weight", RoleAttnV},
	{"attn_output.weight", "self_attn.o_proj.weight", RoleAttnOut},
	{"attn_q_norm.weight", "self_attn.q_norm.weight", RoleNorm},
	{"attn_k_norm.weight", "self_attn.k_norm.weight", RoleNorm},
	{"ffn_norm.weight", "post_attention_layernorm.weight", RoleNorm},
	{"ffn_gate_inp.weight", "mlp.gate.weight", RoleRouter},
	{"ffn_gate_exps.weight", "gate_proj.weight", RoleFFNGate},
	{"ffn_up_exps.weight", "up_proj.weight", RoleFFNUp},
	{"ffn_down_exps.weight", "down_proj.weight", RoleFFNDown},
}

// planBackbone lists the backbone tensors with their types, checking every
// shape against the config. used collects the canonical names consumed.
func planBackbone(m weights.Model, c *TextConfig, ft FileType, res *Result) ([]item, map[string]bool, error) {
	used := map[string]bool{}
	get := func(name string, shape ...int) (*weights.Tensor, error) {
		t, err := m.Tensor(name)
		if err != nil {
			return nil, err
		}
		if len(t.Shape) != len(shape) {
			return nil, fmt.Errorf("tensor %q has shape %v, want %v", name, t.Shape, shape)
		}
		for i, d := range shape {
			if d >= 0 && t.Shape[i] != d {
				return nil, fmt.Errorf("tensor %q has shape %v, want %v from the config", name, t.Shape, shape)
			}
		}
		used[name] = true
		return t, nil
	}
	var items []item
	add := func(ggufName string, role Role, layer int, src ...*weights.Tensor) {
		s := src[0].Shape
		cols := 1
		if len(s) > 0 {
			cols = s[len(s)-1]
		}
		want := TensorType(ft, role, layer, c.Layers, c.Heads/c.KVHeads)
		typ := Fallback(want, cols)
		if typ != want {
			res.Fallbacks = append(res.Fallbacks, fmt.Sprintf("%s: %v -> %v (rows of %d)", ggufName, want, typ, cols))
		}
		dims := make([]uint64, 0, len(s)+1)
		for i := len(s) - 1; i >= 0; i-- {
			dims = append(dims, uint64(s[i]))
		}
		if len(src) > 1 {
			dims = append(dims, uint64(len(src)))
		}
		res.Types[typ]++
		items = append(items, item{name: ggufName, typ: typ, dims: dims, src: src})
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	embed, err := get("thinker.model.embed_tokens.weight", -1, c.Hidden)
	if err != nil {
		return nil, nil, err
	}
	vocab := embed.Shape[0]
	add("token_embd.weight", RoleEmbed, -1, embed)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("thinker.model.layers.%d.", l)
		for _, lt := range layerTensors {
			g := fmt.Sprintf("blk.%d.%s", l, lt.gguf)
			var shape []int
			switch lt.role {
			case RoleNorm:
				shape = []int{c.Hidden}
				if strings.Contains(lt.canon, "_norm") && strings.HasPrefix(lt.canon, "self_attn") {
					shape = []int{c.HeadDim}
				}
			case RoleAttnQ:
				shape = []int{q, c.Hidden}
			case RoleAttnK, RoleAttnV:
				shape = []int{kv, c.Hidden}
			case RoleAttnOut:
				shape = []int{c.Hidden, q}
			case RoleRouter:
				shape = []int{c.Experts, c.Hidden}
			case RoleFFNGate, RoleFFNUp:
				shape = []int{c.ExpertFF, c.Hidden}
			case RoleFFNDown:
				shape = []int{c.Hidden, c.ExpertFF}
			}
			if lt.role == RoleFFNGate || lt.role == RoleFFNUp || lt.role == RoleFFNDown {
				experts := make([]*weights.Tensor, c.Experts)
				for e := range experts {
					if experts[e], err = get(fmt.Sprintf("%smlp.experts.%d.%s", p, e, lt.canon), shape...); err != nil {
						return nil, nil, err
					}
				}
				add(g, lt.role, l, experts...)
				continue
			}
			t, err := get(p+lt.canon, shape...)
			if err != nil {
				return nil, nil, err
			}
			add(g, lt.role, l, t)
		}
	}
	norm, err := get("thinker.model.norm.weight", c.Hidden)
	if err != nil {
		return nil, nil, err
	}
	add("output_norm.weight", RoleNorm, -1, norm)
	out, err := get("thinker.lm_head.weight", vocab, c.Hidden)
	if err != nil {
		return nil, nil, err
	}
	add("output.weight", RoleOutput, -1, out)
	return items, used, nil
}

// backboneKV is the qwen3moe metadata llama.cpp reads.
func backboneKV(c *TextConfig, ft FileType, name string, vocab int) []weights.GGUFKV {
	a := "qwen3moe."
	ctx := c.MaxPositions
	if ctx <= 0 {
		ctx = 65536
	}
	kv := []weights.GGUFKV{
		{Key: "general.architecture", Value: "qwen3moe"},
		{Key: "general.name", Value: name},
		{Key: "general.file_type", Value: ft.LlamaFtype},
		{Key: "general.quantization_version", Value: uint32(2)},
		{Key: a + "block_count", Value: uint32(c.Layers)},
		{Key: a + "context_length", Value: uint32(ctx)},
		{Key: a + "embedding_length", Value: uint32(c.Hidden)},
		{Key: a + "feed_forward_length", Value: uint32(max(c.Intermediate, c.ExpertFF))},
		{Key: a + "attention.head_count", Value: uint32(c.Heads)},
		{Key: a + "attention.head_count_kv", Value: uint32(c.KVHeads)},
		{Key: a + "attention.key_length", Value: uint32(c.HeadDim)},
		{Key: a + "attention.value_length", Value: uint32(c.HeadDim)},
		{Key: a + "rope.freq_base", Value: float32(c.RopeTheta)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: float32(c.RMSEps)},
		{Key: a + "expert_count", Value: uint32(c.Experts)},
		{Key: a + "expert_used_count", Value: uint32(c.TopK)},
		{Key: a + "expert_feed_forward_length", Value: uint32(c.ExpertFF)},
		{Key: a + "vocab_size", Value: uint32(vocab)},
	}
	if len(c.MRopeSection) > 0 {
		// Not read by llama.cpp's qwen3moe (text positions make M-RoPE plain
		// RoPE); kept so clef can rebuild the thinker's rotary layout.
		s := make([]int32, 4)
		for i, v := range c.MRopeSection {
			if i < 4 {
				s[i] = int32(v)
			}
		}
		kv = append(kv, weights.GGUFKV{Key: a + "rope.dimension_sections", Value: s})
	}
	return append(kv, weights.GGUFKV{Key: "clef.file_type", Value: ft.Name})
}

// planCompanion lists everything the backbone does not hold: the joint head
// (torch names), the audio and vision towers (thinker.audio_tower.*,
// thinker.visual.*). Float tensors keep their type; others are widened
// (F32 for the head, BF16 for the towers); with towers Q8_0, the towers'
// matrices whose rows fit 32-blocks become Q8_0. Config files go in as
// strings.
func planCompanion(m weights.Model, set *weights.Set, used map[string]bool, srcGGUF *weights.GGUFFile, backbone, name string, towers quant.Type) ([]item, []weights.GGUFKV, error) {
	kv := []weights.GGUFKV{
		{Key: "general.architecture", Value: "clef_head"},
		{Key: "general.name", Value: name},
		{Key: "clef.backbone", Value: backbone},
	}
	if srcGGUF != nil {
		if len(set.GGUF) > 1 {
			for _, e := range set.GGUF[1].KV {
				if strings.HasPrefix(e.Key, "clef.") && !strings.HasPrefix(e.Key, weights.GGUFShapeKey) && e.Key != "clef.backbone" {
					kv = append(kv, e)
				}
			}
		}
	} else {
		for _, f := range []struct{ file, key string }{
			{"config.json", "clef.config"},
			{"joint_head_config.json", "clef.head_config"},
			{"processor_config.json", "clef.processor_config"},
			{"preprocessor_config.json", "clef.preprocessor_config"},
		} {
			if b, err := os.ReadFile(filepath.Join(set.Path, f.file)); err == nil {
				kv = append(kv, weights.GGUFKV{Key: f.key, Value: string(b)})
			}
		}
	}
	var items []item
	for _, n := range m.Names() {
		if used[n] {
			continue
		}
		t, _ := m.Tensor(n)
		typ := t.Type
		switch typ {
		case quant.F32, quant.F16, quant.BF16:
		default:
			typ = quant.BF16
			if !strings.HasPrefix(n, "thinker.") {
				typ = quant.F32
			}
		}
		if towers == quant.Q8_0 && strings.HasPrefix(n, "thinker.") && len(t.Shape) == 2 && t.Shape[1]%32 == 0 {
			typ = quant.Q8_0
		}
		it := item{name: n, typ: typ, src: []*weights.Tensor{t}}
		s := t.Shape
		if len(s) == 0 || len(s) > 4 {
			orig := make([]int64, len(s))
			for i, d := range s {
				orig[i] = int64(d)
			}
			kv = append(kv, weights.GGUFKV{Key: weights.GGUFShapeKey + n, Value: orig})
			flat := []int{1}
			if len(s) > 4 {
				// Merge the outermost dimensions; rows are unchanged.
				flat = append([]int{s[0] * s[1]}, s[2:]...)
				for len(flat) > 4 {
					flat = append([]int{flat[0] * flat[1]}, flat[2:]...)
				}
			}
			s = flat
		}
		for i := len(s) - 1; i >= 0; i-- {
			it.dims = append(it.dims, uint64(s[i]))
		}
		items = append(items, it)
	}
	return items, kv, nil
}

// writeGGUF writes one file through a temporary name, renamed on success,
// and checks it by reading it back.
func writeGGUF(path string, kv []weights.GGUFKV, items []item, threads int, prog *progress) (int64, error) {
	tmp := path + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("quantize: %w", err)
	}
	fail := func(err error) (int64, error) {
		f.Close()
		os.Remove(tmp)
		return 0, fmt.Errorf("quantize: %s: %w", path, err)
	}
	infos := make([]weights.GGUFTensorInfo, len(items))
	for i, it := range items {
		infos[i] = weights.GGUFTensorInfo{Name: it.name, Type: it.typ, Dims: it.dims}
	}
	w, err := weights.NewGGUFWriter(f, kv, infos)
	if err != nil {
		return fail(err)
	}
	for _, it := range items {
		prog.start(it.name)
		err := w.WriteTensorFrom(it.name, func(out io.Writer) error {
			for _, t := range it.src {
				if err := streamTensor(out, t, it.typ, threads, prog); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
		prog.tensorDone()
	}
	if err := w.Close(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	g, err := weights.OpenGGUF(tmp)
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("quantize: %s: written file does not read back: %w", path, err)
	}
	g.Close()
	st, err := os.Stat(tmp)
	if err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("quantize: %w", err)
	}
	return st.Size(), nil
}

// chunkValues bounds the values converted per chunk (4M).
const chunkValues = 4 << 20

// streamTensor writes t converted to typ: a plain copy when the type is
// unchanged, otherwise rows dequantized and quantized in parallel chunks.
func streamTensor(w io.Writer, t *weights.Tensor, typ quant.Type, threads int, prog *progress) error {
	if t.Type == typ {
		for off := 0; off < len(t.Data); off += chunkValues {
			end := min(off+chunkValues, len(t.Data))
			if _, err := w.Write(t.Data[off:end]); err != nil {
				return err
			}
			prog.addBytes(int64(end - off))
		}
		return nil
	}
	rows, cols := weights.RowCount(t)
	if len(t.Shape) == 0 {
		rows, cols = 1, 1
	}
	rb, err := quant.RowBytes(typ, cols)
	if err != nil {
		return fmt.Errorf("tensor %q: %v", t.Name, err)
	}
	f, err := quant.FormatOf(typ)
	if err != nil || f.Quantize == nil {
		return fmt.Errorf("tensor %q: cannot quantize to %v", t.Name, typ)
	}
	chunk := max(1, min(rows, chunkValues/max(cols, 1)))
	out := make([]byte, chunk*rb)
	srcBytes := int64(len(t.Data))
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		var wg sync.WaitGroup
		errs := make([]error, threads)
		per := (n + threads - 1) / threads
		for k := 0; k < threads; k++ {
			a, b := k*per, min(n, (k+1)*per)
			if a >= b {
				break
			}
			wg.Add(1)
			go func(k, a, b int) {
				defer wg.Done()
				buf := make([]float32, cols)
				for i := a; i < b; i++ {
					if err := weights.ReadRow(t, r0+i, buf); err != nil {
						errs[k] = err
						return
					}
					if err := quant.Quantize(typ, out[i*rb:(i+1)*rb], buf, nil); err != nil {
						errs[k] = fmt.Errorf("tensor %q row %d: %v", t.Name, r0+i, err)
						return
					}
				}
			}(k, a, b)
		}
		wg.Wait()
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
		if _, err := w.Write(out[:n*rb]); err != nil {
			return err
		}
		if rows > 0 {
			prog.addBytes(srcBytes * int64(n) / int64(rows))
		}
	}
	return nil
}
