//go:build mslemu

package omni

import (
	"context"
	"math"
	"testing"

	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/metal"
)

// TestComposeEmulatedMetal runs TestComposeGolden's image, audio and mixed
// prompts on the Metal backend over the emulated GPU (the mslemu build
// tag): transformers' tower outputs uploaded there, merged into the text
// embeddings (inputs_embeds bit for bit), and the whole thinker decoder on
// them with the DeepStack rows and the 3-D positions (last_hidden_state to
// the CPU test's 1e-4 relative).
func TestComposeEmulatedMetal(t *testing.T) {
	b := metal.EmulatedForTest(t)
	th := thinker(t, omniDir)
	w, err := weights.OpenSafetensors(omniDir + "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, err := qwen3moe.Load(w, th.Text, b)
	if err != nil {
		t.Fatal(err)
	}
	hidden := m.Config.Hidden
	for _, cs := range []string{"image", "audio", "mixed"} {
		t.Run(cs, func(t *testing.T) {
			ids, media, dir := goldenMedia(t, cs)
			in, err := Compose(context.Background(), m, ids, th.Tokens, goldenTowers(t, b, cs, dir, hidden))
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
			if cs != "audio" && len(in.Deepstack) != 2 {
				t.Fatalf("%d DeepStack levels, want 2", len(in.Deepstack))
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
			t.Logf("inputs_embeds exact; last_hidden_state: relative max %.3g, l2 %.3g", mx, l2)
			if mx > 1e-4 || l2 > 1e-4 {
				t.Errorf("last_hidden_state: relative error max %.3g, l2 %.3g > 1e-4", mx, l2)
			}
		})
	}
}
