package convert

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Options control Quantize.
type Options struct {
	// Type is the file type of the backbone.
	Type FileType
	// Out is the backbone GGUF path; the companion goes next to it at
	// release.CompanionPath(Out) (FILE.gguf -> FILE.head.gguf).
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
	row   string // the checkpoint name of its table row (backbone), for errors
	typ   quant.Type
	dims  []uint64 // GGUF order
	src   []*weights.Tensor
	shape []int // true shape when GGUF cannot hold its rank (companion)
}

// Quantize converts the model at src (a release or MLX directory, or a
// qwen3moe/qwen3vlmoe GGUF) into a backbone GGUF and its companion.
func Quantize(src string, opts Options) (*Result, error) {
	if opts.Out == "" || !strings.HasSuffix(opts.Out, release.GGUFExt) || strings.HasSuffix(opts.Out, release.CompanionExt) {
		return nil, fmt.Errorf("quantize: output %q must be a FILE.gguf path (not .head.gguf)", opts.Out)
	}
	if st, err := os.Stat(filepath.Dir(opts.Out)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("quantize: output directory %s does not exist", filepath.Dir(opts.Out))
	}
	for _, o := range []string{opts.Out, release.CompanionPath(opts.Out)} {
		if same(o, src) || same(o, release.CompanionPath(src)) {
			return nil, fmt.Errorf("quantize: output %s would overwrite the source", o)
		}
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	r, err := release.Open(src)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	defer r.Close()
	if r.Format == release.FormatSafetensors {
		return nil, fmt.Errorf("quantize: %s: give the model's directory, not one safetensors file", src)
	}
	cfg := r.Config.Thinker.Text
	res := &Result{Backbone: opts.Out, Companion: release.CompanionPath(opts.Out), Types: map[quant.Type]int{}}
	items, used, err := planBackbone(r.Weights, cfg, opts.Type, res)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	vocab := cfg.Vocab
	var tok []weights.GGUFKV
	if r.Backbone != nil {
		for _, kv := range r.Backbone.KV {
			if strings.HasPrefix(kv.Key, "tokenizer.") {
				tok = append(tok, kv)
			}
		}
	} else {
		kvs, err := tokenizer.GGUFMetadata(src, vocab)
		if err != nil {
			return nil, fmt.Errorf("quantize: %v", err)
		}
		for _, kv := range kvs {
			tok = append(tok, weights.GGUFKV(kv))
		}
	}
	name := opts.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(filepath.Clean(src)), release.GGUFExt)
	}
	kv := []weights.GGUFKV{
		{Key: "general.architecture", Value: release.GGUFArch},
		{Key: "general.name", Value: name},
		{Key: "general.file_type", Value: opts.Type.LlamaFtype},
		{Key: "general.quantization_version", Value: uint32(2)},
	}
	kv = append(kv, cfg.GGUFMetadata(vocab)...)
	kv = append(kv, weights.GGUFKV{Key: release.GGUFFileTypeKey, Value: opts.Type.Name})
	kv = append(kv, tok...)

	comp, compKV, err := planCompanion(r, used, filepath.Base(opts.Out), name, opts.TowerType)
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

// planBackbone lists the backbone tensors, one per row of the decoder's
// tensor table under its GGUF name, with the type the row's role gets.
// used collects the stored names consumed.
func planBackbone(m weights.Model, c release.Text, ft FileType, res *Result) ([]item, map[string]bool, error) {
	used := map[string]bool{}
	var items []item
	for _, row := range release.DecoderTensors(c) {
		t, names, err := release.Lookup(m, row)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			used[n] = true
		}
		s := t.Shape
		want := TensorType(ft, row.Role, row.Layer, c.Layers, c.Heads/c.KVHeads)
		typ := Fallback(want, s[len(s)-1])
		if typ != want {
			res.Fallbacks = append(res.Fallbacks, fmt.Sprintf("%s: %v -> %v (rows of %d)", row.GGUF, want, typ, s[len(s)-1]))
		}
		dims := make([]uint64, 0, len(s))
		for i := len(s) - 1; i >= 0; i-- {
			dims = append(dims, uint64(s[i]))
		}
		res.Types[typ]++
		items = append(items, item{name: row.GGUF, row: row.Name, typ: typ, dims: dims, src: []*weights.Tensor{t}})
	}
	return items, used, nil
}

// planCompanion lists everything the backbone does not hold: the joint head
// (torch names), the audio and vision towers (thinker.audio_tower.*,
// thinker.visual.*), under their stored names. Float tensors keep their
// type; others are widened (F32 for the head, BF16 for the towers); with
// towers Q8_0, the towers' matrices whose rows fit 32-blocks become Q8_0.
// The release's configuration files go in as strings.
func planCompanion(r *release.Release, used map[string]bool, backbone, name string, towers quant.Type) ([]item, []weights.GGUFKV, error) {
	kv := []weights.GGUFKV{
		{Key: "general.architecture", Value: release.GGUFHeadArch},
		{Key: "general.name", Value: name},
		{Key: release.GGUFBackboneKey, Value: backbone},
	}
	for _, f := range release.ConfigFiles {
		if b, ok := r.Files[f.File]; ok {
			kv = append(kv, weights.GGUFKV{Key: f.Key, Value: string(b)})
		}
	}
	head := map[string]bool{}
	if h := r.Config.Head; h != nil {
		for _, row := range release.HeadTensors(*h) {
			head[row.Name] = true
		}
	}
	// Tables read by rows (the vision tower's position embedding: GatherBlend
	// reads float rows) stay float with --towers q8_0.
	gathered := map[string]bool{}
	if v := r.Config.Thinker.Vision; v != nil {
		for _, row := range release.VisionTensors(*v) {
			if row.Role == release.RoleEmbed {
				gathered[row.Name] = true
			}
		}
	}
	m := r.Weights
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
			if head[n] {
				typ = quant.F32
			}
		}
		if towers == quant.Q8_0 && !head[n] && !gathered[n] && len(t.Shape) == 2 && t.Shape[1]%32 == 0 {
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
		if err != nil && it.row != "" {
			err = fmt.Errorf("%s: %w", it.row, err)
		}
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
// unchanged, otherwise rows dequantized and quantized in parallel chunks. A
// stacked tensor [E, out, in] is written expert after expert.
func streamTensor(w io.Writer, t *weights.Tensor, typ quant.Type, threads int, prog *progress) error {
	if len(t.Shape) == 3 {
		for e := 0; e < t.Shape[0]; e++ {
			if err := streamTensor(w, t.Slice(e), typ, threads, prog); err != nil {
				return err
			}
		}
		return nil
	}
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

// check refuses a file type that is not one of FileTypes and a tower type
// other than q8_0, and sets the default thread count.
func (opts *Options) check() error {
	if ft, err := ParseFileType(opts.Type.Name); err != nil || ft != opts.Type {
		return fmt.Errorf("quantize: file type %q is not one of FileTypes", opts.Type.Name)
	}
	if opts.TowerType != 0 && opts.TowerType != quant.Q8_0 {
		return fmt.Errorf("quantize: towers can be kept or stored as q8_0, not %v", opts.TowerType)
	}
	if opts.Threads <= 0 {
		opts.Threads = runtime.GOMAXPROCS(0)
	}
	return nil
}
