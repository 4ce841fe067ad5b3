package video

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/npy"
)

// goldenDir holds the committed clips and what PyAV 10 (FFmpeg 5.1's
// libraries) makes of them with the reference's procedure (gen.py there).
const goldenDir = "../../../testdata/video"

// TestDecodePyAVGolden decodes the committed clips and compares frames,
// times and soundtrack with PyAV's. With FFmpeg 5.1 (the libraries the
// goldens were made with) everything must be identical: every byte of every
// frame, every sample's bits. Other FFmpeg versions may round differently
// in swscale and libswresample, so there the test asks only for frame
// count, times and sizes to be identical and reports the pixel and sample
// differences it sees.
func TestDecodePyAVGolden(t *testing.T) {
	tl := tools(t)
	ver := ffmpegVersion(t, tl)
	exact := strings.HasPrefix(ver, "5.1")
	if !exact {
		t.Logf("ffmpeg %s is not 5.1: pixels and samples are compared loosely (reported, not required equal)", ver)
	}
	for _, name := range []string{"h264_aac_bt709.mp4", "vp9_opus.webm", "h264_fullrange_big.mp4"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(goldenDir, name))
			if err != nil {
				t.Fatal(err)
			}
			stem := strings.TrimSuffix(name, filepath.Ext(name))
			load := func(kind string) *npy.Array {
				a, err := npy.ReadFile(filepath.Join(goldenDir, stem+"_"+kind+".npy"))
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			wantFrames, wantTimes, wantAudio := load("frames"), load("times"), load("audio")
			got, err := tl.Decode(context.Background(), data, DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			n, h, w := wantFrames.Shape[0], wantFrames.Shape[1], wantFrames.Shape[2]
			if len(got.Frames) != n {
				t.Fatalf("%d frames, PyAV kept %d", len(got.Frames), n)
			}
			for i := range n {
				if float32(got.Times[i]) != wantTimes.F[i] {
					t.Errorf("frame %d: time %v, PyAV %v", i, got.Times[i], wantTimes.F[i])
				}
				im := got.Frames[i]
				if im.Width != w || im.Height != h {
					t.Fatalf("frame %d is %dx%d, PyAV's %dx%d", i, im.Width, im.Height, w, h)
				}
				want := wantFrames.I[i*w*h*3 : (i+1)*w*h*3]
				diff, maxDiff := 0, 0
				for j, v := range im.Pix {
					if d := int(v) - int(want[j]); d != 0 {
						diff++
						maxDiff = max(maxDiff, d, -d)
					}
				}
				if diff > 0 {
					msg := "frame %d: %d of %d bytes differ from PyAV's, by up to %d levels"
					if exact {
						t.Errorf(msg, i, diff, len(want), maxDiff)
					} else {
						t.Logf(msg, i, diff, len(want), maxDiff)
					}
				}
			}
			if got.Audio == nil {
				t.Fatal("no soundtrack")
			}
			if len(got.Audio.Samples) != len(wantAudio.F) {
				t.Fatalf("%d samples, PyAV %d", len(got.Audio.Samples), len(wantAudio.F))
			}
			diff, maxDiff := 0, 0.0
			for i, v := range wantAudio.F {
				if g := got.Audio.Samples[i]; math.Float32bits(g) != math.Float32bits(v) {
					diff++
					maxDiff = max(maxDiff, math.Abs(float64(g)-float64(v)))
				}
			}
			if diff > 0 {
				msg := "%d of %d samples differ from PyAV's, by up to %g"
				if exact {
					t.Errorf(msg, diff, len(wantAudio.F), maxDiff)
				} else {
					t.Logf(msg, diff, len(wantAudio.F), maxDiff)
				}
			}
		})
	}
}
