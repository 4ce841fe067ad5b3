package audio

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/golden"

	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/npy"
)

const (
	omniDir  = "../../../testdata/omni/"       // the tiny Qwen3-Omni and its audio goldens
	videoDir = "../../../testdata/omni-video/" // the long-audio goldens of the same model
	tol      = 1e-4                            // absolute, float32 against float32 torch / float64 numpy
)

func loadNpy(t testing.TB, name string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func openOmni(t testing.TB, b backend.Backend) *Model {
	t.Helper()
	m, err := Load(omniWeights(t), omniConfig(t), b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// clipMel returns the valid frames of a processor output: features
// [1, bins, T] and its mask [1, T] (right-padded) as mel [bins, frames].
func clipMel(t testing.TB, features, mask *npy.Array) ([]float32, int) {
	t.Helper()
	if len(features.Shape) != 3 || features.Shape[0] != 1 || len(mask.Shape) != 2 || mask.Shape[1] != features.Shape[2] {
		t.Fatalf("features %v, mask %v", features.Shape, mask.Shape)
	}
	bins, T := features.Shape[1], features.Shape[2]
	frames := 0
	for _, v := range mask.I {
		frames += int(v)
	}
	mel := make([]float32, 0, bins*frames)
	for f := range bins {
		mel = append(mel, features.F[f*T:f*T+frames]...)
	}
	return mel, frames
}

// read runs Forward and reads the result.
func read(t testing.TB, m *Model, mel []float32, frames int, o Options) []float32 {
	t.Helper()
	ctx := context.Background()
	out, err := m.Forward(ctx, mel, frames, o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.b.Free(out)
	if want := []int{Tokens(frames), m.Config.OutputDim}; !slices.Equal(out.Shape, want) {
		t.Fatalf("output shape %v, want %v", out.Shape, want)
	}
	v, err := m.b.Read(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readEmbed runs steps 1-5 (the input of encoder layer 0) and reads them.
func readEmbed(t testing.TB, m *Model, mel []float32, frames int) []float32 {
	t.Helper()
	ctx := context.Background()
	x, err := m.embed(ctx, mel, newClip(frames))
	if err != nil {
		t.Fatal(err)
	}
	defer m.b.Free(x)
	v, err := m.b.Read(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTokens(t *testing.T) {
	// Spec §5.4's examples, the fixtures' clips, and the chunk edges.
	for frames, want := range map[int]int{0: 0, -5: 0, 1: 1, 8: 1, 9: 2, 99: 13, 100: 13, 101: 14, 130: 17, 150: 20, 400: 52,
		1000: 130, 1270: 165, 3000: 390} {
		if got := Tokens(frames); got != want {
			t.Errorf("Tokens(%d) = %d, want %d", frames, got, want)
		}
	}
	// HF's _get_feat_extract_output_lengths, with Python's floor division.
	floor := func(a, b int) int {
		q := a / b
		if a%b != 0 && a < 0 {
			q--
		}
		return q
	}
	for T := 1; T < 2000; T++ {
		feat := floor(T%100-1, 2) + 1
		want := floor(floor(feat-1, 2)+1-1, 2) + 1 + T/100*13
		if got := Tokens(T); got != want {
			t.Fatalf("Tokens(%d) = %d, want %d", T, got, want)
		}
	}
}

// The attention windows are HF's cu_seqlens: the long clip's fixture, one
// window for a clip shorter than 104 tokens, and exact multiples.
func TestWindows(t *testing.T) {
	m := &Model{Config: omniConfig(t)}
	cu := loadNpy(t, videoDir+"long_audio_cu_seqlens.npy")
	want := make([]int, len(cu.I))
	for i, v := range cu.I {
		want[i] = int(v)
	}
	if got := m.windows(newClip(1270)); !slices.Equal(got, want) {
		t.Errorf("windows of 1270 frames %v, HF %v", got, want)
	}
	for frames, want := range map[int][]int{
		1:    {0, 1},
		70:   {0, 9},        // one short chunk: window 9*8 = 72 tokens
		130:  {0, 17},       // the 1.3 s clip
		800:  {0, 104},      // exactly one window
		801:  {0, 104, 105}, // and one token more
		1600: {0, 104, 208}, // two
		2050: {0, 104, 208, 267},
	} {
		if got := m.windows(newClip(frames)); !slices.Equal(got, want) {
			t.Errorf("windows of %d frames %v, want %v", frames, got, want)
		}
	}
	// n_window_infer 400 (an older default): windows of 13*4 = 52 tokens.
	m.Config.NWindowInfer = 400
	if got, want := m.windows(newClip(1270)), []int{0, 52, 104, 156, 165}; !slices.Equal(got, want) {
		t.Errorf("n_window_infer 400: windows %v, want %v", got, want)
	}
}

// The sinusoid table is HF's SinusoidsPositionEmbedding (float32).
func TestSinusoids(t *testing.T) {
	const d = 1280
	s := sinusoids(13, d)
	for _, p := range []int{0, 1, 12} {
		for _, k := range []int{0, 1, 300, 639} {
			ts := math.Exp(-math.Log(10000) / 639 * float64(k))
			if got, want := s[p*d+k], math.Sin(float64(p)*ts); math.Abs(float64(got)-want) > 1e-6 {
				t.Errorf("sin(pos %d, k %d) = %v, want %v", p, k, got, want)
			}
			if got, want := s[p*d+640+k], math.Cos(float64(p)*ts); math.Abs(float64(got)-want) > 1e-6 {
				t.Errorf("cos(pos %d, k %d) = %v, want %v", p, k, got, want)
			}
		}
	}
}

// The 1.3 s clip (one full chunk and a 30-frame tail padded to 100)
// against transformers 4.57 (float32): the input of encoder layer 0 and
// the tower's output. 17 tokens are one window, so both attentions agree.
func TestOmniAudio(t *testing.T) {
	m := openOmni(t, openCPU(t))
	mel, frames := clipMel(t, loadNpy(t, omniDir+"audio_input_features.npy"), loadNpy(t, omniDir+"audio_feature_attention_mask.npy"))
	if frames != 130 {
		t.Fatalf("%d frames", frames)
	}
	if d := maxDiff(readEmbed(t, m, mel, frames), loadNpy(t, omniDir+"audio_tower_layer0_in.npy").F); d > tol {
		t.Errorf("layer 0 input: max diff %.3g", d)
	} else {
		t.Logf("layer 0 input: max diff %.3g", d)
	}
	want := loadNpy(t, omniDir+"audio_tower_out.npy").F
	for _, o := range []Options{{}, {FullAttention: true}} {
		if d := maxDiff(read(t, m, mel, frames, o), want); d > tol {
			t.Errorf("%+v: output max diff %.3g", o, d)
		} else {
			t.Logf("%+v: output max diff %.3g", o, d)
		}
	}
}

// The 12.7 s clip (12 full chunks and a 70-frame tail, 165 tokens in
// windows [0, 104) and [104, 165)): windowed against the float64 numpy
// reference, whole-clip against transformers 4.57 eager (which ignores the
// windows), the two differing by far more than the tolerance. The result
// does not depend on how the convolutions are batched, nor on whether the
// backend can concatenate rows itself.
func TestLongAudio(t *testing.T) {
	cpu := openCPU(t)
	mel, frames := clipMel(t, loadNpy(t, videoDir+"long_audio_input_features.npy"), loadNpy(t, videoDir+"long_audio_feature_attention_mask.npy"))
	if frames != 1270 || Tokens(frames) != 165 {
		t.Fatalf("%d frames, %d tokens", frames, Tokens(frames))
	}
	layer0 := loadNpy(t, videoDir+"long_audio_tower_layer0_in.npy").F
	windowed := loadNpy(t, videoDir+"long_audio_tower_out_np64_windowed.npy").F
	full := loadNpy(t, videoDir+"long_audio_tower_out_hf_eager.npy").F
	if d := maxDiff(windowed, full); d < 100*tol {
		t.Fatalf("the fixtures' windowed and whole-clip outputs differ by only %.3g", d)
	}
	for _, run := range []struct {
		name  string
		b     backend.Backend
		batch int
	}{{"cpu", cpu, 0}, {"cpu/batch=1", cpu, 1}, {"cpu/batch=5", cpu, 5}, {"no-concat/batch=4", plain{cpu}, 4}} {
		t.Run(run.name, func(t *testing.T) {
			m := openOmni(t, run.b)
			m.ConvBatch = run.batch
			if d := maxDiff(readEmbed(t, m, mel, frames), layer0); d > tol {
				t.Errorf("layer 0 input: max diff %.3g", d)
			} else {
				t.Logf("layer 0 input: max diff %.3g", d)
			}
			if d := maxDiff(read(t, m, mel, frames, Options{}), windowed); d > tol {
				t.Errorf("windowed: max diff %.3g against numpy float64", d)
			} else {
				t.Logf("windowed: max diff %.3g against numpy float64", d)
			}
			if d := maxDiff(read(t, m, mel, frames, Options{FullAttention: true}), full); d > tol {
				t.Errorf("full attention: max diff %.3g against HF eager", d)
			} else {
				t.Logf("full attention: max diff %.3g against HF eager", d)
			}
		})
	}
}

// plain hides every optional extension of a backend (RowChunker).
type plain struct{ backend.Backend }

// A clip shorter than one chunk is not padded (its chunk is the longest),
// and each chunk's tokens depend only on its own frames: a clip's first
// chunk gives the same layer-0 input alone as within a longer clip.
func TestChunkIndependence(t *testing.T) {
	m := openOmni(t, openCPU(t))
	mel, frames := clipMel(t, loadNpy(t, videoDir+"long_audio_input_features.npy"), loadNpy(t, videoDir+"long_audio_feature_attention_mask.npy"))
	long := readEmbed(t, m, mel, frames)
	bins, d := m.Config.MelBins, m.Config.DModel
	head := func(n int) []float32 {
		out := make([]float32, 0, bins*n)
		for f := range bins {
			out = append(out, mel[f*frames:f*frames+n]...)
		}
		return out
	}
	if got := readEmbed(t, m, head(100), 100); maxDiff(got, long[:13*d]) > 1e-6 {
		t.Errorf("chunk 0 alone differs from chunk 0 of the clip by %.3g", maxDiff(got, long[:13*d]))
	}
	// Five frames alone: one 5-frame chunk, no padding, one token.
	if got := read(t, m, head(5), 5, Options{}); len(got) != m.Config.OutputDim {
		t.Errorf("5 frames: %d values", len(got))
	}
}

func TestForwardErrors(t *testing.T) {
	m := openOmni(t, openCPU(t))
	ctx := context.Background()
	bins := m.Config.MelBins
	for _, c := range []struct {
		mel    []float32
		frames int
		want   string
	}{
		{make([]float32, bins*10), 0, "0 mel frames"},
		{make([]float32, bins*10), -1, "-1 mel frames"},
		{nil, 1, "0 mel values"},
		{make([]float32, bins*10), 11, "not 128 bins x 11 frames"},
		{make([]float32, bins*10+1), 10, "not 128 bins x 10 frames"},
	} {
		out, err := m.Forward(ctx, c.mel, c.frames, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d values, %d frames: %v, %v (want %q)", len(c.mel), c.frames, out, err, c.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Forward(cctx, make([]float32, bins*300), 300, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// hidden is a weights.Model without one tensor.
type hidden struct {
	weights.Model
	name string
}

func (h hidden) Has(name string) bool { return name != h.name && h.Model.Has(name) }

func TestLoadErrors(t *testing.T) {
	b := openCPU(t)
	w := omniWeights(t)
	good := omniConfig(t)
	for _, c := range []struct {
		edit func(*release.Audio)
		want string
	}{
		{func(c *release.Audio) { c.NWindow = 100 }, "n_window 100"},
		{func(c *release.Audio) { c.NWindowInfer = 50 }, "n_window_infer 50"},
		{func(c *release.Audio) { c.Activation = "relu" }, `activation_function "relu"`},
		{func(c *release.Audio) { c.Heads = 3 }, "not a multiple of encoder_attention_heads 3"},
		{func(c *release.Audio) { c.DownsampleHidden = 0 }, "downsample_hidden_size = 0"},
		{func(c *release.Audio) { c.DownsampleHidden = 8 }, "conv2d1.weight has shape [16 1 3 3], the configuration wants [8 1 3 3]"},
		{func(c *release.Audio) { c.MelBins = 80 }, "conv_out.weight has shape [32 256], the configuration wants [32 160]"},
		{func(c *release.Audio) { c.Layers = 3 }, "no tensor thinker.audio_tower.layers.2."},
	} {
		cfg := good
		c.edit(&cfg)
		if _, err := Load(w, cfg, b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v (want %q)", cfg, err, c.want)
		}
	}
	const gone = "thinker.audio_tower.layers.1.self_attn.k_proj.bias"
	if _, err := Load(hidden{w, gone}, good, b); err == nil || !strings.Contains(err.Error(), "no tensor "+gone) {
		t.Errorf("missing k bias: %v", err)
	}
}

// omniConfig is the audio_config of the tiny Qwen3-Omni.
func omniConfig(t testing.TB) release.Audio {
	t.Helper()
	th := golden.Thinker(t, omniDir)
	if th.Audio == nil {
		t.Fatal("no audio_config")
	}
	return *th.Audio
}

func omniWeights(t testing.TB) weights.Model { return golden.Weights(t, omniDir+"model.safetensors") }

func openCPU(t testing.TB) backend.Backend { return golden.CPU(t, 0) }

var maxDiff = golden.MaxDiff
