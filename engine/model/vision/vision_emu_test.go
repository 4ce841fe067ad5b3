//go:build mslemu

package vision

import (
	"fmt"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/metal"
)

// TestOmniVisionEmulatedMetal runs the golden cases of TestOmniVision (the
// 4×4 image, the 4×6 mixed image with its blended position columns, and
// the 4-frame video) on the Metal backend over the emulated GPU (the
// mslemu build tag): its host ops and the real shader source, against
// transformers' float32 goldens with the tolerance of the CPU test. The
// Metal backend is a backend.RowChunker, so the blocks' MLP runs in the
// chunks asked for, concatenated on the device. Two images in one
// call attend only within themselves: the batch gives each image's goldens.
func TestOmniVisionEmulatedMetal(t *testing.T) {
	b := metal.EmulatedForTest(t)
	if _, ok := backend.Backend(b).(backend.RowChunker); ok {
		t.Log("the Metal backend chunks rows: the MLP runs in chunks of 5")
	}
	w, err := weights.Open(omniDir+"model.safetensors", weights.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	m, err := Load(w, omniConfig(t), b)
	if err != nil {
		t.Fatal(err)
	}
	m.Chunk = 5
	for _, cs := range []struct{ name, prefix, grid string }{
		{"image", omniDir + "image_", omniDir + "image_image_grid_thw.npy"},
		{"mixed", omniDir + "mixed_", omniDir + "mixed_image_grid_thw.npy"},
		{"video", videoDir + "video_", videoDir + "video_video_grid_thw.npy"},
	} {
		t.Run(cs.name, func(t *testing.T) {
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
	t.Run("batch", func(t *testing.T) {
		var px, wantOut, wantDeep1 []float32
		var g [][3]int
		for _, cs := range []string{"mixed", "image"} {
			px = append(px, loadNpy(t, omniDir+cs+"_pixel_values.npy").F...)
			g = append(g, grids(t, omniDir+cs+"_image_grid_thw.npy")...)
			wantOut = append(wantOut, loadNpy(t, omniDir+cs+"_visual_out.npy").F...)
			wantDeep1 = append(wantDeep1, loadNpy(t, omniDir+cs+"_visual_deepstack1.npy").F...)
		}
		_, out, deep := run(t, m, px, g)
		if len(deep) != 2 {
			t.Fatalf("%d deepstack features, want 2", len(deep))
		}
		for _, c := range []struct {
			what      string
			got, want []float32
		}{{"out", out, wantOut}, {"deepstack1", deep[1], wantDeep1}} {
			d := maxDiff(c.got, c.want)
			t.Logf("%s: max |diff| %.3g", c.what, d)
			if d > tol {
				t.Errorf("%s: max |diff| %.3g > %g", c.what, d, tol)
			}
		}
	})
}
