package release_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// writeGGUF writes a GGUF file with weights' writer.
func writeGGUF(t testing.TB, path string, kv []weights.GGUFKV, infos []weights.GGUFTensorInfo, data func(weights.GGUFTensorInfo) []byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := weights.NewGGUFWriter(&buf, kv, infos)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range infos {
		if err := w.WriteTensor(ti.Name, data(ti)); err != nil {
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

// ggufDims is a shape in GGUF order (innermost first).
func ggufDims(shape []int) []uint64 {
	d := make([]uint64, len(shape))
	for i, s := range shape {
		d[len(shape)-1-i] = uint64(s)
	}
	return d
}

// joined returns a tensor's bytes, a stack's matrices one after the other.
func joined(w *weights.Tensor) []byte {
	if w.Parts == nil {
		return w.Data
	}
	var b []byte
	for e := range w.Parts {
		b = append(b, w.Part(e)...)
	}
	return b
}

// writeBackbone writes r's decoder as clef quantize lays out a backbone
// (keeping every tensor's type): general.architecture, the metadata of
// Text.GGUFMetadata and the table's tensors under their GGUF names, in
// table order.
func writeBackbone(t testing.TB, path string, r *release.Release, c release.Text) {
	t.Helper()
	kv := append([]weights.GGUFKV{{Key: "general.architecture", Value: release.GGUFArch}}, c.GGUFMetadata(c.Vocab)...)
	var infos []weights.GGUFTensorInfo
	data := map[string][]byte{}
	for _, row := range release.DecoderTensors(c) {
		w, _, err := release.Lookup(r.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, weights.GGUFTensorInfo{Name: row.GGUF, Type: w.Type, Dims: ggufDims(w.Shape)})
		data[row.GGUF] = joined(w)
	}
	writeGGUF(t, path, kv, infos, func(ti weights.GGUFTensorInfo) []byte { return data[ti.Name] })
}

// writeCompanion writes r's head and configuration files as clef quantize
// lays out the companion FILE.head.gguf; files overrides or drops (nil)
// configuration files.
func writeCompanion(t testing.TB, path string, r *release.Release, files map[string][]byte) {
	t.Helper()
	kv := []weights.GGUFKV{{Key: "general.architecture", Value: release.GGUFHeadArch}}
	for _, f := range release.ConfigFiles {
		b, ok := r.Files[f.File]
		if o, over := files[f.File]; over {
			b, ok = o, o != nil
		}
		if ok {
			kv = append(kv, weights.GGUFKV{Key: f.Key, Value: string(b)})
		}
	}
	var infos []weights.GGUFTensorInfo
	data := map[string][]byte{}
	for _, row := range release.HeadTensors(*r.Config.Head) {
		w, _, err := release.Lookup(r.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		dims := ggufDims(w.Shape)
		if len(dims) == 0 {
			// GGUF holds 1 to 4 dimensions: a scalar is stored as [1] with
			// its true shape in the metadata.
			dims = []uint64{1}
			kv = append(kv, weights.GGUFKV{Key: weights.GGUFShapeKey + row.Name, Value: []int64{}})
		}
		infos = append(infos, weights.GGUFTensorInfo{Name: row.Name, Type: w.Type, Dims: dims})
		data[row.Name] = w.Data
	}
	writeGGUF(t, path, kv, infos, func(ti weights.GGUFTensorInfo) []byte { return data[ti.Name] })
}

// A backbone written from the release reads back the same decoder
// configuration from its metadata as config.json gives, and the same
// tensors through the table (the experts now one contiguous stack).
func TestTextFromGGUFMatchesConfig(t *testing.T) {
	r := openTiny(t)
	want, err := release.ParseThinker(r.Files[release.ConfigFile])
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tiny-f32.gguf")
	writeBackbone(t, p, r, want.Text)
	f, err := weights.OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := release.TextFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if got != want.Text || got != tinyText {
		t.Errorf("TextFromGGUF %+v, ParseThinker %+v", got, want.Text)
	}

	g, err := release.Open(p) // no companion: the decoder only
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Config.Thinker.Text != want.Text || g.Config.Head != nil || g.Companion != nil {
		t.Errorf("opened %+v", g.Config)
	}
	for _, row := range release.DecoderTensors(want.Text) {
		a, _, err := release.Lookup(r.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		b, names, err := release.Lookup(g.Weights, row)
		if err != nil {
			t.Fatal(err)
		}
		if names[0] != row.GGUF || !sameBytes(a, b) || row.Stacked() && (b.Parts != nil || a.Parts == nil) {
			t.Errorf("%s: the GGUF's %v differs from the release's", row.Name, names)
		}
	}
}

// The backbone clef quantize writes describes, in its metadata, the decoder
// of the release's config.json.
func TestTextFromGGUFOfQuantize(t *testing.T) {
	want, err := release.ReadConfig(fixtureTiny)
	if err != nil {
		t.Fatal(err)
	}
	ft, err := convert.ParseFileType("bf16")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tiny-bf16.gguf")
	if _, err := convert.Quantize(fixtureTiny, convert.Options{Type: ft, Out: out, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	f, err := weights.OpenGGUF(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := release.TextFromGGUF(f)
	if err != nil || got != want.Thinker.Text {
		t.Errorf("TextFromGGUF %+v (%v), ParseThinker %+v", got, err, want.Thinker.Text)
	}
	r, err := release.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Companion == nil || !reflect.DeepEqual(r.Config, want) {
		t.Errorf("opened with its companion: %+v, want %+v", r.Config, want)
	}
}

// GGUFMetadata writes what TextFromGGUF reads back.
func TestGGUFMetadataRoundTrip(t *testing.T) {
	dir := t.TempDir()
	plain := release.Text{Hidden: 96, Layers: 3, Heads: 6, KVHeads: 3, HeadDim: 32, Experts: 16, TopK: 4, ExpertFFN: 48, Intermediate: 192,
		Vocab: 1000, MaxPositions: 32768, NormEps: 1e-5, RopeTheta: 5e5}
	mrope := tinyText
	mrope.MRoPEInterleaved = false
	for i, c := range []release.Text{tinyText, plain, mrope} {
		p := filepath.Join(dir, "m.gguf")
		kv := append([]weights.GGUFKV{{Key: "general.architecture", Value: release.GGUFArch}}, c.GGUFMetadata(c.Vocab)...)
		writeGGUF(t, p, kv, nil, nil)
		f, err := weights.OpenGGUF(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := release.TextFromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != c {
			t.Errorf("case %d: read back %+v, wrote %+v", i, got, c)
		}
	}

	// What the metadata cannot hold: an absent context length is written as
	// 65536, an absent dense size as the expert size.
	c := plain
	c.MaxPositions, c.Intermediate = 0, 0
	p := filepath.Join(dir, "d.gguf")
	writeGGUF(t, p, append([]weights.GGUFKV{{Key: "general.architecture", Value: release.GGUFArch}}, c.GGUFMetadata(c.Vocab)...), nil, nil)
	f, err := weights.OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := release.TextFromGGUF(f)
	c.MaxPositions, c.Intermediate = 65536, c.ExpertFFN
	if err != nil || got != c {
		t.Errorf("defaults: %+v %v", got, err)
	}
}

func TestTextFromGGUFErrors(t *testing.T) {
	base := append([]weights.GGUFKV{{Key: "general.architecture", Value: release.GGUFArch}}, tinyText.GGUFMetadata(tinyText.Vocab)...)
	without := func(key string) []weights.GGUFKV {
		var kv []weights.GGUFKV
		for _, e := range base {
			if e.Key != key {
				kv = append(kv, e)
			}
		}
		return kv
	}
	with := func(key string, v any) []weights.GGUFKV {
		kv := without(key)
		return append(kv, weights.GGUFKV{Key: key, Value: v})
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		kv   []weights.GGUFKV
		want string
	}{
		"no architecture":  {without("general.architecture"), "general.architecture"},
		"llama":            {with("general.architecture", "llama"), "llama"},
		"no layers":        {without("qwen3moe.block_count"), "qwen3moe.block_count"},
		"no experts":       {without("qwen3moe.expert_count"), "qwen3moe.expert_count"},
		"negative heads":   {with("qwen3moe.attention.head_count", int32(-4)), "head_count"},
		"absurd hidden":    {with("qwen3moe.embedding_length", uint64(1)<<40), "qwen3moe.embedding_length = 1099511627776 is out of range"},
		"gqa":              {with("qwen3moe.attention.head_count_kv", uint32(3)), "kv heads"},
		"norm flag":        {with("qwen3moe.expert_weights_norm", "yes"), "expert_weights_norm"},
		"sections":         {with("qwen3moe.rope.dimension_sections", "4,2,2"), "dimension_sections"},
		"sections sum":     {with("qwen3moe.rope.dimension_sections", []int32{4, 2, 3, 0}), "mrope_section"},
		"interleave flag":  {with("qwen3moe.rope.mrope_interleaved", uint8(1)), "mrope_interleaved"},
		"eps type":         {with("qwen3moe.attention.layer_norm_rms_epsilon", "tiny"), "layer_norm_rms_epsilon"},
		"no vocab, no emb": {without("qwen3moe.vocab_size"), "vocab_size"},
	} {
		p := filepath.Join(dir, "e.gguf")
		writeGGUF(t, p, tc.kv, nil, nil)
		f, err := weights.OpenGGUF(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = release.TextFromGGUF(f)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, tc.want)
		}
	}
}

// A backbone with its companion opens as the whole model: the release's
// configuration files from the companion's metadata, the head's tensors,
// and a check that the backbone is the decoder the configuration describes.
func TestOpenGGUFCompanion(t *testing.T) {
	r := openTiny(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "model-f32.gguf")
	writeBackbone(t, p, r, r.Config.Thinker.Text)
	if got := release.CompanionPath(p); got != filepath.Join(dir, "model-f32.head.gguf") || release.CompanionPath(got) != got {
		t.Fatalf("CompanionPath: %s", got)
	}
	writeCompanion(t, release.CompanionPath(p), r, nil)
	g, err := release.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Format != release.FormatGGUF || g.Backbone == nil || g.Companion == nil || g.Companion.Path != release.CompanionPath(p) {
		t.Fatalf("format %s, backbone %v, companion %v", g.Format, g.Backbone, g.Companion)
	}
	if !reflect.DeepEqual(g.Config, r.Config) {
		t.Errorf("config from the companion %+v, from the directory %+v", g.Config, r.Config)
	}
	if !reflect.DeepEqual(g.Files, r.Files) {
		t.Errorf("files %v, want %v", len(g.Files), len(r.Files))
	}
	for _, row := range release.HeadTensors(*g.Config.Head) {
		a, _, _ := release.Lookup(r.Weights, row)
		b, _, err := release.Lookup(g.Weights, row)
		if err != nil || !sameBytes(a, b) {
			t.Errorf("%s: %v", row.Name, err)
		}
	}
	if c, err := release.ReadConfig(p); err != nil || !reflect.DeepEqual(c, r.Config) {
		t.Errorf("ReadConfig: %v", err)
	}

	// The companion is not a model by itself.
	if _, err := release.Open(release.CompanionPath(p)); err == nil || !strings.Contains(err.Error(), "companion") || !strings.Contains(err.Error(), "model-f32.gguf") {
		t.Errorf("companion opened: %v", err)
	}
	// A companion without the release's config.json (clef quantize of a
	// GGUF source): the decoder's configuration comes from the backbone.
	writeCompanion(t, release.CompanionPath(p), r, map[string][]byte{release.ConfigFile: nil})
	if h, err := release.Open(p); err != nil || h.Companion == nil || h.Config.Thinker.Text != r.Config.Thinker.Text {
		t.Errorf("companion without config: %v", err)
	} else {
		h.Close()
	}
	// A companion whose configuration describes another decoder.
	other := bytes.Replace(r.Files[release.ConfigFile], []byte(`"num_experts": 8`), []byte(`"num_experts": 4`), 1)
	writeCompanion(t, release.CompanionPath(p), r, map[string][]byte{release.ConfigFile: other})
	if _, err := release.Open(p); err == nil || !strings.Contains(err.Error(), "qwen3moe.expert_count is 8 but config.json's num_experts is 4") {
		t.Errorf("mismatched companion: %v", err)
	}
}
