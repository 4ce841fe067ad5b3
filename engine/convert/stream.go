package convert

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// Stream converts a bf16 release into the same two files as Quantize, one
// shard at a time, as the shards arrive (clef pull --quantize): the
// conversion is planned from the configuration files and the shards'
// safetensors headers alone, both output files are laid out at once
// (their tensor data left as holes), and each shard's tensors are
// quantized into their places when the shard is added. Once Add returns,
// the shard may be deleted: the release never has to be on disk whole.
// The result is byte for byte what Quantize writes from the whole
// directory.
type Stream struct {
	opts    Options
	res     *Result
	outs    [2]*streamOut
	pending map[string][]target // stored tensor name -> where it goes
	want    map[string]*weights.Tensor
	shardOf map[string]string
	added   map[string]bool
	prog    *progress
	left    map[int]int // per backbone/companion item key: sources not yet written
}

// streamOut is one output file being filled.
type streamOut struct {
	path, tmp string
	f         *os.File
	size      int64
}

// target is where one stored tensor's converted bytes go.
type target struct {
	out  int   // 0 backbone, 1 companion
	off  int64 // file offset
	typ  quant.Type
	item int // item key for progress: out<<24 | index
}

// maxHeader bounds a safetensors header (as the reader does).
const maxHeader = 100 << 20

// SafetensorsHeaderSize reads the first 8 bytes of a safetensors file and
// returns the length of the JSON header that follows them.
func SafetensorsHeaderSize(prefix []byte) (int64, error) {
	if len(prefix) < 8 {
		return 0, fmt.Errorf("safetensors: %d bytes, want at least 8", len(prefix))
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n == 0 || n > maxHeader {
		return 0, fmt.Errorf("safetensors: header length %d out of range", n)
	}
	return int64(n), nil
}

// NewStream plans the conversion of the release whose configuration files
// (config.json, tokenizer, joint_head_config.json, processor_config.json)
// and joint_head.safetensors are in dir, and whose weight shards have the
// given safetensors headers (shard file name -> the JSON header, without
// its 8-byte length). It creates opts.Out and its companion as .partial
// files; Add fills them, Finish completes them.
func NewStream(dir string, headers map[string][]byte, opts Options) (*Stream, error) {
	if opts.Out == "" || !strings.HasSuffix(opts.Out, release.GGUFExt) || strings.HasSuffix(opts.Out, release.CompanionExt) {
		return nil, fmt.Errorf("quantize: output %q must be a FILE.gguf path (not .head.gguf)", opts.Out)
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	cfg, err := release.ReadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	files := map[string][]byte{}
	for _, f := range release.ConfigFiles {
		if b, err := os.ReadFile(filepath.Join(dir, f.File)); err == nil {
			files[f.File] = b
		}
	}
	var top struct {
		Quantization json.RawMessage `json:"quantization"`
	}
	json.Unmarshal(files[release.ConfigFile], &top)
	if len(top.Quantization) > 0 && string(top.Quantization) != "null" {
		return nil, fmt.Errorf("quantize: %s is an MLX quantized checkpoint; it runs as it is", dir)
	}
	hm := &headerModel{tensors: map[string]*weights.Tensor{}, shardOf: map[string]string{}}
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, shard := range names {
		if shard == release.HeadWeightsFile {
			return nil, fmt.Errorf("quantize: %s is read from the directory, not given as a shard", shard)
		}
		if err := hm.add(shard, headers[shard], release.KeepThinker); err != nil {
			return nil, fmt.Errorf("quantize: %s: %v", shard, err)
		}
	}
	headPath := filepath.Join(dir, release.HeadWeightsFile)
	if _, err := os.Stat(headPath); err == nil {
		h, err := readHeader(headPath)
		if err != nil {
			return nil, fmt.Errorf("quantize: %v", err)
		}
		if err := hm.add(release.HeadWeightsFile, h, nil); err != nil {
			return nil, fmt.Errorf("quantize: %s: %v", release.HeadWeightsFile, err)
		}
	}
	r := &release.Release{Path: dir, Format: release.FormatRelease, Config: cfg, Weights: hm, Files: files}
	text := cfg.Thinker.Text
	res := &Result{Backbone: opts.Out, Companion: release.CompanionPath(opts.Out), Types: map[quant.Type]int{}}
	items, used, err := planBackbone(hm, text, opts.Type, res)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	toks, err := tokenizer.GGUFMetadata(dir, text.Vocab)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}
	name := opts.Name
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	kv := []weights.GGUFKV{
		{Key: "general.architecture", Value: release.GGUFArch},
		{Key: "general.name", Value: name},
		{Key: "general.file_type", Value: opts.Type.LlamaFtype},
		{Key: "general.quantization_version", Value: uint32(2)},
	}
	kv = append(kv, text.GGUFMetadata(text.Vocab)...)
	kv = append(kv, weights.GGUFKV{Key: release.GGUFFileTypeKey, Value: opts.Type.Name})
	for _, t := range toks {
		kv = append(kv, weights.GGUFKV(t))
	}
	if len(items) != len(release.DecoderTensors(text)) {
		return nil, fmt.Errorf("quantize: %d backbone tensors planned for %d table rows", len(items), len(release.DecoderTensors(text)))
	}
	comp, compKV, err := planCompanion(r, used, filepath.Base(opts.Out), name, opts.TowerType)
	if err != nil {
		return nil, fmt.Errorf("quantize: %v", err)
	}

	s := &Stream{opts: opts, res: res, pending: map[string][]target{}, want: hm.tensors, shardOf: hm.shardOf,
		added: map[string]bool{}, left: map[int]int{}}
	s.prog = newProgress(opts.Progress, nil)
	s.prog.tensors = len(items) + len(comp)
	for _, t := range hm.tensors {
		s.prog.total += tensorBytes(t)
	}
	ok := false
	defer func() {
		if !ok {
			s.Abort()
		}
	}()
	for i, plan := range []struct {
		path  string
		kv    []weights.GGUFKV
		items []item
	}{{opts.Out, kv, items}, {res.Companion, compKV, comp}} {
		out, infos, err := layOut(plan.path, plan.kv, plan.items)
		if err != nil {
			return nil, err
		}
		s.outs[i] = out
		for j, it := range plan.items {
			key := i<<24 | j
			base := infos[j]
			var srcNames []string
			if i == 0 {
				_, ns, err := release.Lookup(hm, release.DecoderTensors(text)[j])
				if err != nil {
					return nil, fmt.Errorf("quantize: %v", err)
				}
				srcNames = ns
			} else {
				srcNames = []string{it.name}
			}
			var per int64
			if len(srcNames) > 1 {
				t0 := hm.tensors[srcNames[0]]
				rb, err := quant.RowBytes(it.typ, t0.Shape[len(t0.Shape)-1])
				if err != nil {
					return nil, fmt.Errorf("quantize: %s: %v", it.name, err)
				}
				per = int64(rb) * int64(t0.Shape[0])
			}
			for e, n := range srcNames {
				s.pending[n] = append(s.pending[n], target{out: i, off: base + int64(e)*per, typ: it.typ, item: key})
				s.left[key]++
			}
		}
	}
	res.BackboneTensors, res.CompanionTensors = len(items), len(comp)
	ok = true
	return s, nil
}

// Shards lists the shard files whose tensors the conversion needs, sorted.
func (s *Stream) Shards() []string {
	seen := map[string]bool{}
	for n := range s.pending {
		if sh := s.shardOf[n]; sh != release.HeadWeightsFile {
			seen[sh] = true
		}
	}
	out := make([]string, 0, len(seen))
	for sh := range seen {
		out = append(out, sh)
	}
	sort.Strings(out)
	return out
}

// Add converts the tensors of one shard (named as in the headers, read at
// path) into their places. The head (joint_head.safetensors) is added by
// Finish from the directory given to NewStream when nobody added it.
func (s *Stream) Add(shard, path string) error {
	if s.added[shard] {
		return fmt.Errorf("quantize: shard %s added twice", shard)
	}
	m, err := weights.OpenSafetensors(path)
	if err != nil {
		return fmt.Errorf("quantize: %s: %v", shard, err)
	}
	defer m.Close()
	for n, sh := range s.shardOf {
		if sh == shard && !m.Has(n) {
			return fmt.Errorf("quantize: %s: tensor %s of its header is missing from the file", shard, n)
		}
	}
	for _, n := range m.Names() {
		if s.shardOf[n] != shard {
			if keep, _ := release.KeepThinker(n); keep || shard == release.HeadWeightsFile {
				return fmt.Errorf("quantize: %s: tensor %s is not in the shard's header", shard, n)
			}
			continue
		}
		ts := s.pending[n]
		if len(ts) == 0 {
			continue
		}
		t, err := m.Tensor(n)
		if err != nil {
			return err
		}
		w := s.want[n]
		if t.Type != w.Type || fmt.Sprint(t.Shape) != fmt.Sprint(w.Shape) {
			return fmt.Errorf("quantize: %s: tensor %s is %v %v, its header said %v %v", shard, n, t.Type, t.Shape, w.Type, w.Shape)
		}
		for _, tg := range ts {
			s.prog.start(n)
			ow := io.NewOffsetWriter(s.outs[tg.out].f, tg.off)
			if err := streamTensor(ow, t, tg.typ, s.opts.Threads, s.prog); err != nil {
				return fmt.Errorf("quantize: %s: %v", n, err)
			}
			if s.left[tg.item]--; s.left[tg.item] == 0 {
				s.prog.tensorDone()
			}
		}
		delete(s.pending, n)
	}
	s.added[shard] = true
	return nil
}

// Finish adds the head from the directory, checks every tensor was
// written, reads both files back and renames them into place.
func (s *Stream) Finish(dir string) (*Result, error) {
	if !s.added[release.HeadWeightsFile] {
		if hp := filepath.Join(dir, release.HeadWeightsFile); fileExists(hp) {
			if err := s.Add(release.HeadWeightsFile, hp); err != nil {
				return nil, err
			}
		}
	}
	if len(s.pending) > 0 {
		var miss []string
		for n := range s.pending {
			miss = append(miss, s.shardOf[n])
		}
		sort.Strings(miss)
		return nil, fmt.Errorf("quantize: %d tensors not converted yet (shards %s not added)", len(s.pending), strings.Join(uniq(miss), ", "))
	}
	for i, o := range s.outs {
		if err := o.f.Sync(); err != nil {
			return nil, err
		}
		if err := o.f.Close(); err != nil {
			return nil, err
		}
		o.f = nil
		g, err := weights.OpenGGUF(o.tmp)
		if err != nil {
			return nil, fmt.Errorf("quantize: %s: written file does not read back: %w", o.path, err)
		}
		g.Close()
		if err := os.Rename(o.tmp, o.path); err != nil {
			return nil, err
		}
		if i == 0 {
			s.res.BackboneBytes = o.size
		} else {
			s.res.CompanionBytes = o.size
		}
	}
	s.prog.finish()
	return s.res, nil
}

// Abort removes the partial output files.
func (s *Stream) Abort() {
	for _, o := range s.outs {
		if o != nil {
			if o.f != nil {
				o.f.Close()
			}
			os.Remove(o.tmp)
		}
	}
}

func uniq(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// layOut writes the GGUF header of path (as path.partial) with every
// tensor's data left as a hole of its size, and returns the file offset of
// each item's data.
func layOut(path string, kv []weights.GGUFKV, items []item) (*streamOut, []int64, error) {
	o := &streamOut{path: path, tmp: path + ".partial"}
	f, err := os.OpenFile(o.tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("quantize: %w", err)
	}
	o.f = f
	hw := &holeWriter{f: f}
	infos := make([]weights.GGUFTensorInfo, len(items))
	for i, it := range items {
		infos[i] = weights.GGUFTensorInfo{Name: it.name, Type: it.typ, Dims: it.dims}
	}
	w, err := weights.NewGGUFWriter(hw, kv, infos)
	if err == nil {
		for _, it := range items {
			size, serr := itemBytes(it)
			if serr != nil {
				err = serr
				break
			}
			if err = w.WriteTensorFrom(it.name, func(w io.Writer) error { return zeroFill(w, size) }); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = f.Truncate(hw.pos)
	}
	if err != nil {
		f.Close()
		os.Remove(o.tmp)
		return nil, nil, fmt.Errorf("quantize: %s: %w", path, err)
	}
	o.size = hw.pos
	g, err := weights.OpenGGUF(o.tmp)
	if err != nil {
		f.Close()
		os.Remove(o.tmp)
		return nil, nil, fmt.Errorf("quantize: %s: %w", path, err)
	}
	defer g.Close()
	offs := make([]int64, len(items))
	for i, ti := range g.Tensors {
		if ti.Name != items[i].name {
			return nil, nil, fmt.Errorf("quantize: %s: tensor %d is %s, want %s", path, i, ti.Name, items[i].name)
		}
		offs[i] = g.DataOffset + int64(ti.Offset)
	}
	return o, offs, nil
}

// zeros is what zeroFill writes; holeWriter leaves it as holes.
var zeros = make([]byte, 1<<20)

// zeroFill writes n zeros (left as holes by holeWriter).
func zeroFill(w io.Writer, n int64) error {
	for ; n > 0; n -= int64(len(zeros)) {
		if _, err := w.Write(zeros[:min(n, int64(len(zeros)))]); err != nil {
			return err
		}
	}
	return nil
}

// itemBytes is the size of an item's data in its GGUF type.
func itemBytes(it item) (int64, error) {
	if len(it.dims) == 0 {
		return 0, fmt.Errorf("tensor %s has no dimensions", it.name)
	}
	rb, err := quant.RowBytes(it.typ, int(it.dims[0]))
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %v", it.name, err)
	}
	n := int64(rb)
	for _, d := range it.dims[1:] {
		n *= int64(d)
	}
	return n, nil
}

// tensorBytes is the stored size of a tensor known by its header.
func tensorBytes(t *weights.Tensor) int64 {
	if len(t.Shape) == 0 {
		rb, _ := quant.RowBytes(t.Type, 1)
		return int64(rb)
	}
	rb, err := quant.RowBytes(t.Type, t.Shape[len(t.Shape)-1])
	if err != nil {
		return 0
	}
	n := int64(rb)
	for _, d := range t.Shape[:len(t.Shape)-1] {
		n *= int64(d)
	}
	return n
}

// holeWriter writes to a file at a running position, leaving blocks of
// zeros unwritten (holes read back as zeros).
type holeWriter struct {
	f   *os.File
	pos int64
}

func (h *holeWriter) Write(p []byte) (int, error) {
	const block = 64 << 10
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), block)
		if !bytes.Equal(p[:k], zeros[:k]) {
			if _, err := h.f.WriteAt(p[:k], h.pos); err != nil {
				return n - len(p), err
			}
		}
		h.pos += int64(k)
		p = p[k:]
	}
	return n, nil
}

// headerModel is a weights.Model of tensors known from safetensors
// headers only (no data): enough to plan a conversion.
type headerModel struct {
	tensors map[string]*weights.Tensor
	shardOf map[string]string
}

var stDTypes = map[string]quant.Type{
	"F64": quant.F64, "F32": quant.F32, "F16": quant.F16, "BF16": quant.BF16,
	"I64": quant.I64, "I32": quant.I32, "I16": quant.I16, "I8": quant.I8,
	"U64": quant.U64, "U32": quant.U32, "U16": quant.U16, "U8": quant.U8,
}

func (m *headerModel) add(shard string, header []byte, keep func(string) (bool, error)) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return fmt.Errorf("safetensors header: %v", err)
	}
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		if keep != nil {
			k, err := keep(name)
			if err != nil {
				return fmt.Errorf("tensor %q: %v", name, err)
			}
			if !k {
				continue
			}
		}
		var e struct {
			DType string  `json:"dtype"`
			Shape []int64 `json:"shape"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("tensor %q: %v", name, err)
		}
		typ, ok := stDTypes[e.DType]
		if !ok {
			return fmt.Errorf("tensor %q: dtype %q not supported", name, e.DType)
		}
		shape := make([]int, len(e.Shape))
		for i, d := range e.Shape {
			if d < 0 || d > 1<<40 {
				return fmt.Errorf("tensor %q: bad shape %v", name, e.Shape)
			}
			shape[i] = int(d)
		}
		if prev, ok := m.shardOf[name]; ok {
			return fmt.Errorf("tensor %q is also in %s", name, prev)
		}
		m.tensors[name] = &weights.Tensor{Name: name, Type: typ, Shape: shape}
		m.shardOf[name] = shard
	}
	return nil
}

func (m *headerModel) Tensor(name string) (*weights.Tensor, error) {
	if t, ok := m.tensors[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("no tensor %q in the shard headers", name)
}

func (m *headerModel) Has(name string) bool { _, ok := m.tensors[name]; return ok }

func (m *headerModel) Names() []string {
	out := make([]string, 0, len(m.tensors))
	for n := range m.tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (m *headerModel) Close() error { return nil }

// readHeader reads the JSON header of a safetensors file.
func readHeader(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pre [8]byte
	if _, err := io.ReadFull(f, pre[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	n, err := SafetensorsHeaderSize(pre[:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
