//go:build mslemu

package engine

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
)

// TestDecideVideoEmulatedMetal decides a heard video record (an MP4 the
// system ffmpeg encodes: H.264 frames and an AAC soundtrack, with a WAV
// clip beside it) on the Metal backend over the emulated GPU (the mslemu
// build tag): the decoded frames through the video processor and the
// vision tower, the clip and the soundtrack through the audio tower, the
// interleaved record through the thinker and the joint head, all on the
// backend's host ops and real shader source. The ids are the CPU's and the
// probabilities within 1e-4 of the CPU's.
func TestDecideVideoEmulatedMetal(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates every kernel")
	}
	needFFmpeg(t)
	const probTol = 1e-4
	req := videoRequest(t, "", [][]byte{testWAV(t, 0.7, 330)}, [][]byte{testMP4(t, 64, 48, 1.5, 440)})
	cpu := open(t, "release", Options{})
	want, err := cpu.decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !want.stats.PrefixHit && want.stats.Towers <= 0 {
		t.Fatalf("CPU stats %+v", want.stats)
	}
	emu := open(t, "release", Options{Backend: emuBackend})
	if emu.Backend() != emuBackend {
		t.Fatalf("engine runs on %q, want %q", emu.Backend(), emuBackend)
	}
	got, err := emu.decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.enc.InputIDs, want.enc.InputIDs) {
		t.Fatal("input ids differ from the CPU's")
	}
	heard := false
	for i, id := range got.enc.InputIDs {
		if id == emu.tokens.VisionStart && i+1 < len(got.enc.InputIDs) && got.enc.InputIDs[i+1] == emu.tokens.AudioStart {
			heard = true
		}
	}
	if !heard {
		t.Fatal("the video's soundtrack is not heard")
	}
	var worst float64
	for qi := range want.probs {
		if len(got.probs[qi]) != len(want.probs[qi]) {
			t.Fatalf("q%d: %d probabilities, the CPU %d", qi, len(got.probs[qi]), len(want.probs[qi]))
		}
		for k, p := range want.probs[qi] {
			d := math.Abs(float64(got.probs[qi][k]) - float64(p))
			worst = max(worst, d)
			if d > probTol {
				t.Errorf("q%d option %d: p %v on %s, %v on the CPU", qi, k, got.probs[qi][k], emuBackend, p)
			}
		}
	}
	t.Logf("%d tokens, max |Δp| %.3g against the CPU", len(got.enc.InputIDs), worst)
}
