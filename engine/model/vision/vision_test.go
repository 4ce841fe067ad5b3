package vision

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/golden"

	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu" // registers the cpu backend
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/npy"
	"github.com/clefrt/clef/quant"
)

const (
	omniDir  = "../../../testdata/omni/"
	videoDir = "../../../testdata/omni-video/"
	bf16Dir  = "../../../testdata/clef-tiny/release-bf16"
	// tol is the agreement asked of the float32 tower with transformers'
	// float32 goldens (an independent float64 recomputation agrees with
	// them to ~3e-6).
	tol = 1e-4
)

// openBackend opens the CPU backend in the precise mode the references are
// matched in.
func openBackend(t testing.TB, threads int) backend.Backend { return golden.CPU(t, threads) }

// omniConfig reads the vision_config of testdata/omni/config.json.
func omniConfig(t testing.TB) release.Vision {
	t.Helper()
	th := golden.Thinker(t, omniDir)
	if th.Vision == nil {
		t.Fatal("no vision_config")
	}
	return *th.Vision
}

// openOmni loads the tiny Qwen3-Omni's vision tower on the CPU backend.
func openOmni(t testing.TB, threads int) *Model {
	t.Helper()
	m, err := Load(golden.Weights(t, omniDir+"model.safetensors"), omniConfig(t), openBackend(t, threads))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func loadNpy(t testing.TB, name string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// grids reads an image_grid_thw file.
func grids(t testing.TB, name string) [][3]int {
	t.Helper()
	a := loadNpy(t, name)
	if len(a.Shape) != 2 || a.Shape[1] != 3 {
		t.Fatalf("%s: shape %v", name, a.Shape)
	}
	g := make([][3]int, a.Shape[0])
	for i := range g {
		for j := range 3 {
			g[i][j] = int(a.I[3*i+j])
		}
	}
	return g
}

// read reads t back from the backend.
func read(t testing.TB, b backend.Backend, x *backend.Tensor) []float32 {
	t.Helper()
	v, err := b.Read(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// maxDiff returns max |got - want| (+Inf for a NaN or a length mismatch).
// check compares got with the golden file name to tol.
func check(t *testing.T, what string, got []float32, name string) {
	t.Helper()
	want := loadNpy(t, name)
	d := maxDiff(got, want.F)
	t.Logf("%s: max |diff| %.3g over %v", what, d, want.Shape)
	if d > tol {
		t.Errorf("%s: max |diff| %.3g > %g (%d values, want %d)", what, d, tol, len(got), len(want.F))
	}
}

// run runs the tower and reads back block 0's input, the embeddings and
// the deepstack features.
func run(t *testing.T, m *Model, pixels []float32, g [][3]int) (in, out []float32, deep [][]float32) {
	t.Helper()
	o, err := m.forward(context.Background(), pixels, g, func(x *backend.Tensor) error {
		in = read(t, m.b, x)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Free(m.b)
	out = read(t, m.b, o.Embeds)
	for _, d := range o.Deepstack {
		deep = append(deep, read(t, m.b, d))
	}
	return in, out, deep
}

// TestOmniVision runs the processor's patches of the two image cases and
// the video case through the tower and compares block 0's input (patch
// embedding plus the interpolated position table), the merged embeddings
// and both deepstack features with transformers 4.57 (float32). The image
// case's 4×4 grid reads the 4×4 table at whole rows; the mixed case's 4×6
// grid blends columns, so the bilinear weights matter; the video's 4
// temporal patches attend frame by frame.
func TestOmniVision(t *testing.T) {
	cases := []struct{ name, prefix, grid string }{
		{"image", omniDir + "image_", omniDir + "image_image_grid_thw.npy"},
		{"mixed", omniDir + "mixed_", omniDir + "mixed_image_grid_thw.npy"},
		{"video", videoDir + "video_", videoDir + "video_video_grid_thw.npy"},
	}
	for _, run1 := range []struct{ threads, chunk int }{{1, 0}, {4, 0}, {2, 5}} {
		m := openOmni(t, run1.threads)
		m.Chunk = run1.chunk
		for _, cs := range cases {
			t.Run(fmt.Sprintf("%s/threads=%d/chunk=%d", cs.name, run1.threads, run1.chunk), func(t *testing.T) {
				pixels := cs.prefix + "pixel_values.npy"
				if cs.name == "video" {
					pixels = cs.prefix + "pixel_values_videos.npy"
				}
				in, out, deep := run(t, m, loadNpy(t, pixels).F, grids(t, cs.grid))
				check(t, "block0_in", in, cs.prefix+"visual_block0_in.npy")
				check(t, "out", out, cs.prefix+"visual_out.npy")
				if len(deep) != 2 {
					t.Fatalf("%d deepstack features, want 2", len(deep))
				}
				for k, d := range deep {
					check(t, fmt.Sprintf("deepstack%d", k), d, fmt.Sprintf("%svisual_deepstack%d.npy", cs.prefix, k))
				}
			})
		}
	}
}

// Two images in one call attend only within themselves: the batch gives
// each image's goldens, concatenated in image order.
func TestOmniVisionBatch(t *testing.T) {
	m := openOmni(t, 2)
	var px []float32
	var g [][3]int
	var wantIn, wantOut []float32
	wantDeep := make([][]float32, 2)
	for _, cs := range []string{"mixed", "image"} {
		px = append(px, loadNpy(t, omniDir+cs+"_pixel_values.npy").F...)
		g = append(g, grids(t, omniDir+cs+"_image_grid_thw.npy")...)
		wantIn = append(wantIn, loadNpy(t, omniDir+cs+"_visual_block0_in.npy").F...)
		wantOut = append(wantOut, loadNpy(t, omniDir+cs+"_visual_out.npy").F...)
		for k := range wantDeep {
			wantDeep[k] = append(wantDeep[k], loadNpy(t, fmt.Sprintf("%s%s_visual_deepstack%d.npy", omniDir, cs, k)).F...)
		}
	}
	in, out, deep := run(t, m, px, g)
	for _, c := range []struct {
		what      string
		got, want []float32
	}{{"block0_in", in, wantIn}, {"out", out, wantOut}, {"deepstack0", deep[0], wantDeep[0]}, {"deepstack1", deep[1], wantDeep[1]}} {
		d := maxDiff(c.got, c.want)
		t.Logf("%s: max |diff| %.3g", c.what, d)
		if d > tol {
			t.Errorf("%s: max |diff| %.3g > %g", c.what, d, tol)
		}
	}
}

// A video's frames attend only within themselves and share the positions
// and the position table's taps: a clip of two temporal patches holding
// the same patches twice gives the image's goldens twice.
func TestOmniVisionFramesIndependent(t *testing.T) {
	m := openOmni(t, 2)
	px := loadNpy(t, omniDir+"image_pixel_values.npy").F
	g := grids(t, omniDir+"image_image_grid_thw.npy")
	g[0][0] = 2
	_, out, deep := run(t, m, slices.Concat(px, px), g)
	want := loadNpy(t, omniDir+"image_visual_out.npy").F
	if d := maxDiff(out, slices.Concat(want, want)); d > tol {
		t.Errorf("out: max |diff| %.3g > %g", d, tol)
	}
	want = loadNpy(t, omniDir+"image_visual_deepstack1.npy").F
	if d := maxDiff(deep[1], slices.Concat(want, want)); d > tol {
		t.Errorf("deepstack1: max |diff| %.3g > %g", d, tol)
	}
}

// The bf16 clef-tiny release holds the same tower rounded to bf16: it
// binds (the Conv3d kernel, the qkv thirds and the position table in bf16)
// and stays near the float32 goldens. This is a binding check, not an
// exactness one: the bound is bf16 rounding of the weights (2^-9
// relative), which moves outputs of std ~1 by a few 1e-3.
func TestBF16ReleaseVision(t *testing.T) {
	r, err := release.Open(bf16Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Config.Thinker.Vision == nil {
		t.Fatal("no vision_config")
	}
	m, err := Load(r.Weights, *r.Config.Thinker.Vision, openBackend(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if m.patch.Type != quant.BF16 || m.blocks[0].q.Type != quant.BF16 || m.pos.Type != quant.BF16 {
		t.Fatalf("bound %v, %v, %v; want bf16", m.patch.Type, m.blocks[0].q.Type, m.pos.Type)
	}
	px := loadNpy(t, omniDir+"mixed_pixel_values.npy").F
	_, out, _ := run(t, m, px, grids(t, omniDir+"mixed_image_grid_thw.npy"))
	d := maxDiff(out, loadNpy(t, omniDir+"mixed_visual_out.npy").F)
	t.Logf("bf16 weights: max |diff| %.3g from the float32 goldens", d)
	if d > 0.05 || d == 0 {
		t.Errorf("bf16 weights: max |diff| %.3g from the float32 goldens (want bf16-sized, nonzero)", d)
	}
}

// The bilinear taps of a 4×6 grid over a 4×4 table: columns at
// linspace(0, 3, 6) = 0, 0.6, 1.2, 1.8, 2.4, 3 in merge-block order; the
// last column clamps its upper tap.
func TestLayoutTaps(t *testing.T) {
	m := &Model{Config: release.Vision{SpatialMergeSize: 2, InChannels: 1, TemporalPatchSize: 1, PatchSize: 1}, side: 4, patchIn: 1}
	lay, err := m.layout(make([]float32, 2*4*6), [][3]int{{2, 4, 6}})
	if err != nil {
		t.Fatal(err)
	}
	if lay.rows != 48 || !slices.Equal(lay.segments, []int{0, 24, 48}) {
		t.Fatalf("rows %d, segments %v", lay.rows, lay.segments)
	}
	// Patch 5 is block (0, 1), in-block (0, 1): row 0, column 3 (x = 1.8).
	if lay.pos[5] != [3]int{0, 0, 3} || !slices.Equal(lay.taps[20:24], []int{1, 2, 5, 6}) {
		t.Errorf("patch 5: position %v, taps %v", lay.pos[5], lay.taps[20:24])
	}
	dx := float32(3) - float32(float32(0.6)*2) - 1 // 3 − step·2, minus the floor
	if w := lay.weights[20:24]; w[0] != 1-dx || w[1] != dx || w[2] != 0 || w[3] != 0 {
		t.Errorf("patch 5: weights %v, want [%v %v 0 0]", w, 1-dx, dx)
	}
	// Patch 23 is the last: row 3, column 5, the table's corner 15 four times.
	if lay.pos[23] != [3]int{0, 3, 5} || !slices.Equal(lay.taps[92:96], []int{15, 15, 15, 15}) || lay.weights[92] != 1 {
		t.Errorf("patch 23: position %v, taps %v, weights %v", lay.pos[23], lay.taps[92:96], lay.weights[92:96])
	}
	// The second frame repeats the first.
	if !slices.Equal(lay.pos[24:], lay.pos[:24]) || !slices.Equal(lay.taps[96:], lay.taps[:96]) || !slices.Equal(lay.weights[96:], lay.weights[:96]) {
		t.Error("frame 2 differs from frame 1")
	}
	for i, w := range lay.weights {
		if i%4 == 0 {
			if s := w + lay.weights[i+1] + lay.weights[i+2] + lay.weights[i+3]; math.Abs(float64(s)-1) > 1e-6 {
				t.Errorf("patch %d: weights sum to %v", i/4, s)
			}
		}
	}
}

// torch.linspace(0, 47, n) in float32: exact ends, the first half counted
// from 0 and the second from the end.
func TestLinspace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 48, 100, 224} {
		v := linspace(47, n)
		if len(v) != n || v[0] != 0 || (n > 1 && v[n-1] != 47) {
			t.Errorf("linspace(47, %d): ends %v", n, v)
		}
		for i := 1; i < n; i++ {
			if !(v[i] > v[i-1]) {
				t.Errorf("linspace(47, %d): %v then %v", n, v[i-1], v[i])
			}
			if d := math.Abs(float64(v[i]) - 47*float64(i)/float64(n-1)); d > 1e-5 {
				t.Errorf("linspace(47, %d)[%d] = %v, off by %g", n, i, v[i], d)
			}
		}
	}
}

// The 2-D rotary table of 72-wide heads: 18 frequencies 10000^(-j/18) for
// the row, the same 18 for the column.
func TestRoPE2D(t *testing.T) {
	r := rope2D(72)
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	for j := range 18 {
		want := math.Pow(10000, -float64(j)/18)
		if r.InvFreq[j] != r.InvFreq[18+j] || math.Abs(float64(r.InvFreq[j])-want) > 1e-6*want || r.Streams[j] != 1 || r.Streams[18+j] != 2 {
			t.Errorf("frequency %d: %v/%v streams %d/%d, want %v", j, r.InvFreq[j], r.InvFreq[18+j], r.Streams[j], r.Streams[18+j], want)
		}
	}
}

// Bad input is an error naming what is wrong, never a panic.
func TestForwardRejects(t *testing.T) {
	m := openOmni(t, 1)
	px := loadNpy(t, omniDir+"image_pixel_values.npy").F
	for _, c := range []struct {
		name   string
		pixels []float32
		grids  [][3]int
		want   string
	}{
		{"no images", px, nil, "no images"},
		{"zero t", px, [][3]int{{0, 4, 4}}, "positive"},
		{"negative h", px, [][3]int{{1, -4, 4}}, "positive"},
		{"huge", px, [][3]int{{1, 1 << 21, 2}}, "positive and at most"},
		{"odd w", px, [][3]int{{1, 4, 3}}, "multiples of spatial_merge_size"},
		{"too few rows", px, [][3]int{{1, 4, 6}}, "more patch rows"},
		{"too many rows", px, [][3]int{{1, 2, 2}}, "want 4 patch rows"},
		{"overflow", px, [][3]int{{1 << 20, 1 << 20, 1 << 20}}, "more patch rows"},
		{"short row", px[:len(px)-1], [][3]int{{1, 4, 4}}, "values"},
		{"no pixels", nil, [][3]int{{1, 2, 2}}, "more patch rows"},
	} {
		_, err := m.Forward(context.Background(), c.pixels, c.grids)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, px, [][3]int{{1, 4, 4}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: error %v", err)
	}
}

// Load refuses configurations the tower cannot run and checkpoints that
// lack a tensor or hold one of another shape.
func TestLoadRejects(t *testing.T) {
	w, err := weights.Open(omniDir+"model.safetensors", weights.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	b := openBackend(t, 1)
	good := omniConfig(t)
	for _, c := range []struct {
		name string
		edit func(*release.Vision)
		want string
	}{
		{"act", func(c *release.Vision) { c.HiddenAct = "relu" }, "hidden_act"},
		{"grid", func(c *release.Vision) { c.NumPositionEmbeddings = 15 }, "square"},
		{"no table", func(c *release.Vision) { c.NumPositionEmbeddings = 0 }, "num_position_embeddings"},
		{"head", func(c *release.Vision) { c.Heads = 16 }, "multiple of 4"},
		{"deepstack twice", func(c *release.Vision) { c.DeepstackVisualIndexes = []int{1, 1} }, "twice"},
		{"deepstack outside", func(c *release.Vision) { c.DeepstackVisualIndexes = []int{2} }, "outside"},
		{"shape", func(c *release.Vision) { c.Intermediate = 48 }, "shape"},
		{"missing", func(c *release.Vision) { c.Depth = 3 }, "no tensor thinker.visual.blocks.2."},
	} {
		cfg := good
		cfg.DeepstackVisualIndexes = slices.Clone(good.DeepstackVisualIndexes)
		c.edit(&cfg)
		if _, err := Load(w, cfg, b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// split3 cuts the qkv rows and an MLX weight's scales and biases alike,
// over the same bytes; flatten refuses a parted kernel.
func TestSplitAndFlatten(t *testing.T) {
	data := make([]byte, 6*8)
	for i := range data {
		data[i] = byte(i)
	}
	sc := &weights.Tensor{Name: "s", Type: quant.F16, Shape: []int{6, 2}, Data: make([]byte, 6*4)}
	w := &weights.Tensor{Name: "w", Type: quant.MLXAffine4, Shape: []int{6, 16}, Data: data, Scales: sc, Biases: sc, GroupSize: 8}
	parts, err := split3(w)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		if !slices.Equal(p.Shape, []int{2, 16}) || &p.Data[0] != &data[16*i] || len(p.Data) != 16 || cap(p.Data) != 16 ||
			len(p.Scales.Data) != 8 || &p.Scales.Data[0] != &sc.Data[8*i] || p.GroupSize != 8 || p.Name == w.Name {
			t.Errorf("part %d: %+v", i, p)
		}
	}
	if !slices.Equal(w.Shape, []int{6, 16}) {
		t.Errorf("split3 changed its input's shape to %v", w.Shape)
	}
	for _, bad := range []*weights.Tensor{
		{Shape: []int{4, 16}, Data: make([]byte, 64)},
		{Shape: []int{6}, Data: make([]byte, 7)},
		{Shape: []int{3, 2, 2}, Data: make([]byte, 12)},
	} {
		if _, err := split3(bad); err == nil {
			t.Errorf("split3 %v: no error", bad.Shape)
		}
	}
	k := &weights.Tensor{Shape: []int{4, 3, 2, 2, 2}, Data: make([]byte, 4*24*4), Type: quant.F32}
	f, err := flatten(k)
	if err != nil || !slices.Equal(f.Shape, []int{4, 24}) || &f.Data[0] != &k.Data[0] || !slices.Equal(k.Shape, []int{4, 3, 2, 2, 2}) {
		t.Errorf("flatten: %v %v", f, err)
	}
	if _, err := flatten(&weights.Tensor{Shape: []int{4, 3, 2, 2, 2}, Parts: [][]byte{nil}}); err == nil {
		t.Error("flatten of a parted tensor: no error")
	}
}

// memModel is a weights.Model over float32 tensors held in memory.
type memModel map[string]*weights.Tensor

func (m memModel) Tensor(n string) (*weights.Tensor, error) {
	if t, ok := m[n]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("mem: no tensor %q", n)
}

func (m memModel) Has(n string) bool { _, ok := m[n]; return ok }

func (m memModel) Names() []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func (m memModel) Close() error { return nil }

// randomModel makes float32 weights for every row of cfg's table: matrices
// N(0, 1/fan_in), vectors near 1 (norm weights) or near 0 (biases).
func randomModel(cfg release.Vision, seed uint64) memModel {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := memModel{}
	for _, row := range release.VisionTensors(cfg) {
		n := 1
		for _, d := range row.Shape {
			n *= d
		}
		scale, base := 0.1, 0.0
		if len(row.Shape) > 1 {
			scale = 1 / math.Sqrt(float64(n/row.Shape[0]))
		} else if strings.HasSuffix(row.Name, "norm1.weight") || strings.HasSuffix(row.Name, "norm2.weight") || strings.HasSuffix(row.Name, "ln_q.weight") {
			base = 1
		}
		data := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(base+scale*rng.NormFloat64())))
		}
		m[row.Name] = &weights.Tensor{Name: row.Name, Type: quant.F32, Shape: slices.Clone(row.Shape), Data: data}
	}
	return m
}

// BenchmarkVisionTower runs a tower of the real width (hidden 1152, 16
// heads, intermediate 4304, out 2048, 48×48 position table) with 2 blocks
// and one deepstack merger on one 512×512 image (32×32 = 1024 patches)
// and reports the time per patch token.
func BenchmarkVisionTower(b *testing.B) {
	cfg := release.Vision{Depth: 2, Hidden: 1152, Heads: 16, Intermediate: 4304, HiddenAct: "gelu_pytorch_tanh", InChannels: 3,
		PatchSize: 16, TemporalPatchSize: 2, SpatialMergeSize: 2, OutHidden: 2048, NumPositionEmbeddings: 2304,
		DeepstackVisualIndexes: []int{0}}
	m, err := Load(randomModel(cfg, 7), cfg, openBackend(b, 0))
	if err != nil {
		b.Fatal(err)
	}
	g := [][3]int{{1, 32, 32}}
	rng := rand.New(rand.NewPCG(3, 4))
	px := make([]float32, 1024*m.patchIn)
	for i := range px {
		px[i] = float32(2*rng.Float64() - 1)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		o, err := m.Forward(ctx, px, g)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.b.Read(ctx, o.Embeds); err != nil {
			b.Fatal(err)
		}
		o.Free(m.b)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1024, "ns/patch")
}

var maxDiff = golden.MaxDiff
