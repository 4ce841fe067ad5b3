package omni

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/weights"
)

// openOmni loads ../omni's tiny thinker decoder on the CPU backend in its
// precise mode, as qwen3moe's own tests do.
func openOmni(t testing.TB) *qwen3moe.Model {
	t.Helper()
	th := thinker(t, omniDir)
	w, err := weights.OpenSafetensors(omniDir + "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	m, err := qwen3moe.Load(w, th.Text, cpu.New(backend.Options{Threads: 2, Precise: true}))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// goldenTowers uploads a golden case's tower outputs: the vision tower's
// rows and DeepStack levels, the audio tower's rows.
func goldenTowers(t testing.TB, b backend.Backend, cs, dir string, hidden int) Towers {
	t.Helper()
	up := func(name string) *backend.Tensor {
		v := loadNpy(t, dir+name).F
		x, err := b.Upload(v, len(v)/hidden, hidden)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Free(x) })
		return x
	}
	visual := func(prefix string) Visual {
		v := Visual{Rows: up(prefix + "_visual_out.npy")}
		for l := 0; ; l++ {
			name := fmt.Sprintf("%s_visual_deepstack%d.npy", prefix, l)
			if _, err := os.Stat(dir + name); err != nil {
				break
			}
			v.Deepstack = append(v.Deepstack, up(name))
		}
		return v
	}
	var tw Towers
	switch cs {
	case "image", "mixed":
		tw.Images = []Visual{visual(cs)}
	case "video", "av":
		tw.Videos = []Visual{visual("video")} // av's patches are video's
	}
	switch cs {
	case "audio", "mixed":
		tw.Audio = []*backend.Tensor{up("audio_tower_out.npy")} // mixed holds the same clip
	case "av":
		tw.Audio = []*backend.Tensor{up("av_audio_tower_out.npy")}
	}
	return tw
}

// relErr returns max|a-b| / max|b| and ‖a-b‖₂ / ‖b‖₂.
func relErr(a, b []float32) (float64, float64) {
	var maxd, maxb, d2, b2 float64
	for i := range b {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(float64(a[i])) {
			d = math.Inf(1)
		}
		maxd = max(maxd, d)
		maxb = max(maxb, math.Abs(float64(b[i])))
		d2 += d * d
		b2 += float64(b[i]) * float64(b[i])
	}
	return maxd / maxb, math.Sqrt(d2 / b2)
}

// TestComposeGolden composes every golden media prompt from its ids and
// transformers' tower outputs: the merged input must equal transformers'
// inputs_embeds bit for bit, and the decoder on it (with Positions' ids and
// the DeepStack rows) its final hidden states to 1e-4 relative.
func TestComposeGolden(t *testing.T) {
	m := openOmni(t)
	b := m.Backend()
	th := thinker(t, omniDir)
	hidden := m.Config.Hidden
	for _, cs := range []string{"image", "mixed", "audio", "video", "av"} {
		t.Run(cs, func(t *testing.T) {
			ids, media, dir := goldenMedia(t, cs)
			tw := goldenTowers(t, b, cs, dir, hidden)
			in, err := Compose(context.Background(), m, ids, th.Tokens, tw)
			if err != nil {
				t.Fatal(err)
			}
			want := loadNpy(t, dir+cs+"_inputs_embeds.npy").F
			if len(in.Embeds) != len(want) {
				t.Fatalf("%d embedding values, want %d", len(in.Embeds), len(want))
			}
			for i := range want {
				if math.Float32bits(in.Embeds[i]) != math.Float32bits(want[i]) {
					t.Fatalf("inputs_embeds[%d][%d] = %v, want %v", i/hidden, i%hidden, in.Embeds[i], want[i])
				}
			}
			nv := 0
			for _, id := range ids {
				if id == th.Tokens.Image || id == th.Tokens.Video {
					nv++
				}
			}
			if len(in.VisualRows) != nv || (nv > 0) != (len(in.Deepstack) == 2) {
				t.Fatalf("%d visual rows (want %d), %d DeepStack levels", len(in.VisualRows), nv, len(in.Deepstack))
			}
			if in.Positions, err = Positions(ids, th.Tokens, media, th.Vision.SpatialMergeSize, th.PositionIDPerSeconds); err != nil {
				t.Fatal(err)
			}
			out, err := m.Forward(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(out)
			got, err := b.Read(context.Background(), out)
			if err != nil {
				t.Fatal(err)
			}
			mx, l2 := relErr(got, loadNpy(t, dir+cs+"_last_hidden_state.npy").F)
			t.Logf("last_hidden_state: max %.3g l2 %.3g", mx, l2)
			if mx > 1e-4 || l2 > 1e-4 {
				t.Errorf("last_hidden_state: relative error max %.3g, l2 %.3g > 1e-4", mx, l2)
			}
		})
	}
}

// TestComposePrefixResume runs a media record with a stored prefix the way
// the engine's prefix cache would: the prefix (through the media and past
// them) kept from the full composed run, then the rest resumed from it with
// its own ids and positions. Both must give the full run's hidden rows.
func TestComposePrefixResume(t *testing.T) {
	m := openOmni(t)
	m.Chunk = 5
	b := m.Backend()
	th := thinker(t, omniDir)
	ids, media, dir := goldenMedia(t, "mixed")
	in, err := Compose(context.Background(), m, ids, th.Tokens, goldenTowers(t, b, "mixed", dir, m.Config.Hidden))
	if err != nil {
		t.Fatal(err)
	}
	if in.Positions, err = Positions(ids, th.Tokens, media, th.Vision.SpatialMergeSize, th.PositionIDPerSeconds); err != nil {
		t.Fatal(err)
	}
	const P = 34 // past the audio, before the last text
	full, pre, err := m.HiddenPrefix(context.Background(), in, P)
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Release()
	rest, _, err := m.HiddenPrefix(context.Background(), qwen3moe.Input{IDs: ids[P:], Positions: in.Positions[P:], Past: pre}, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Config.Hidden
	mx, _ := relErr(rest, full[P*h:])
	if mx > 1e-6 {
		t.Errorf("resumed rows differ from the full run by %.3g", mx)
	}
	// Without the positions the rest would get plain ids after the prefix:
	// not what the record needs (the image shifted them).
	plain, _, err := m.HiddenPrefix(context.Background(), qwen3moe.Input{IDs: ids[P:], Past: pre}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if mx, _ := relErr(plain, full[P*h:]); mx < 1e-3 {
		t.Errorf("plain positions after a media prefix match the 3-D ones (%.3g): the test cannot tell them apart", mx)
	}
}

// TestMergeErrors: tower rows that do not fit the pads are errors, and
// nothing is written then.
func TestMergeErrors(t *testing.T) {
	tok := testTokens()
	const h = 2
	ids := []int{1, tok.VisionStart, tok.Image, tok.Image, tok.VisionEnd, tok.AudioStart, tok.Audio, tok.AudioEnd}
	rows := func(n int) []float32 { return make([]float32, n*h) }
	ok := Rows{Image: rows(2), ImageDeep: [][]float32{rows(2)}, Audio: rows(1)}
	for _, c := range []struct {
		name string
		r    Rows
		want string
	}{
		{"image rows short", Rows{Image: rows(1), Audio: rows(1)}, "2 image pad tokens but 1 image rows"},
		{"audio rows long", Rows{Image: rows(2), Audio: rows(2)}, "1 audio pad tokens but 2 audio rows"},
		{"audio missing", Rows{Image: rows(2)}, "1 audio pad tokens but 0"},
		{"video rows, no pads", Rows{Image: rows(2), Audio: rows(1), Video: rows(1)}, "0 video pad tokens but 1"},
		{"ragged rows", Rows{Image: make([]float32, 3), Audio: rows(1)}, "not rows of 2"},
		{"deep level short", Rows{Image: rows(2), ImageDeep: [][]float32{rows(1)}, Audio: rows(1)}, "DeepStack level 0"},
		{"levels differ", Rows{Image: rows(2), ImageDeep: [][]float32{rows(2)}, Video: rows(0), VideoDeep: [][]float32{rows(0), rows(0)}, Audio: rows(1)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			embeds := make([]float32, len(ids)*h)
			for i := range embeds {
				embeds[i] = 7
			}
			_, _, err := Merge(embeds, h, ids, tok, c.r)
			if c.want == "" {
				if err != nil {
					t.Fatalf("err = %v (absent videos need no levels)", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			for _, v := range embeds {
				if v != 7 {
					t.Fatal("embeddings written despite the error")
				}
			}
		})
	}
	embeds := make([]float32, len(ids)*h)
	ok.Image[2], ok.ImageDeep[0][3], ok.Audio[1] = 1, 2, 3
	visual, deep, err := Merge(embeds, h, ids, tok, ok)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(visual, []int{2, 3}) || len(deep) != 1 || deep[0][3] != 2 || embeds[3*h] != 1 || embeds[6*h+1] != 3 {
		t.Errorf("visual %v deep %v embeds %v", visual, deep, embeds)
	}
	if _, _, err := Merge(embeds[1:], h, ids, tok, ok); err == nil {
		t.Error("short embeddings accepted")
	}
	both := Rows{Image: rows(2), ImageDeep: [][]float32{rows(2)}, Video: rows(1), VideoDeep: [][]float32{rows(1), rows(1)}, Audio: rows(1)}
	if _, _, err := Merge(make([]float32, (len(ids)+3)*h), h, append(ids, tok.VisionStart, tok.Video, tok.VisionEnd), tok, both); err == nil ||
		!strings.Contains(err.Error(), "DeepStack levels") {
		t.Errorf("images and videos with different DeepStack levels: err = %v", err)
	}
}
