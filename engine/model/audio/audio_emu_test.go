//go:build mslemu

package audio

import (
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/metal"
)

// TestAudioEmulatedMetal runs the audio goldens on the Metal backend over
// the emulated GPU (the mslemu build tag): its host ops and the real shader
// source, with the tolerance of the CPU tests. The 1.3 s clip against
// transformers 4.57 (layer 0's input and the output, windowed and whole);
// the 12.7 s clip (12 full chunks, 165 tokens in two windows) windowed
// against the float64 numpy reference and whole-clip against HF eager, with
// the convolutions in batches of 5 chunks. The Metal backend is a
// backend.RowChunker: the batches are concatenated on the device.
func TestAudioEmulatedMetal(t *testing.T) {
	b := metal.EmulatedForTest(t)
	if _, ok := backend.Backend(b).(backend.RowChunker); ok {
		t.Log("the Metal backend concatenates rows itself")
	}
	m := openOmni(t, b)
	expect := func(t *testing.T, what string, got, want []float32) {
		t.Helper()
		if d := maxDiff(got, want); d > tol {
			t.Errorf("%s: max diff %.3g", what, d)
		} else {
			t.Logf("%s: max diff %.3g", what, d)
		}
	}

	t.Run("omni", func(t *testing.T) {
		mel, frames := clipMel(t, loadNpy(t, omniDir+"audio_input_features.npy"), loadNpy(t, omniDir+"audio_feature_attention_mask.npy"))
		if frames != 130 {
			t.Fatalf("%d frames", frames)
		}
		expect(t, "layer 0 input", readEmbed(t, m, mel, frames), loadNpy(t, omniDir+"audio_tower_layer0_in.npy").F)
		want := loadNpy(t, omniDir+"audio_tower_out.npy").F
		expect(t, "windowed output", read(t, m, mel, frames, Options{}), want)
		expect(t, "full-attention output", read(t, m, mel, frames, Options{FullAttention: true}), want)
	})

	t.Run("long", func(t *testing.T) {
		mel, frames := clipMel(t, loadNpy(t, videoDir+"long_audio_input_features.npy"), loadNpy(t, videoDir+"long_audio_feature_attention_mask.npy"))
		if frames != 1270 || Tokens(frames) != 165 {
			t.Fatalf("%d frames, %d tokens", frames, Tokens(frames))
		}
		windowed := loadNpy(t, videoDir+"long_audio_tower_out_np64_windowed.npy").F
		full := loadNpy(t, videoDir+"long_audio_tower_out_hf_eager.npy").F
		if d := maxDiff(windowed, full); d < 100*tol {
			t.Fatalf("the fixtures' windowed and whole-clip outputs differ by only %.3g", d)
		}
		m.ConvBatch = 5
		defer func() { m.ConvBatch = 0 }()
		expect(t, "layer 0 input", readEmbed(t, m, mel, frames), loadNpy(t, videoDir+"long_audio_tower_layer0_in.npy").F)
		expect(t, "windowed output (numpy float64)", read(t, m, mel, frames, Options{}), windowed)
		expect(t, "full-attention output (HF eager)", read(t, m, mel, frames, Options{FullAttention: true}), full)
	})
}
