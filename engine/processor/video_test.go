package processor

import (
	"math"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
)

// videoFrames splits a [T, H, W, 3] uint8 array into frames.
func videoFrames(t testing.TB, rel string) []*media.Image {
	t.Helper()
	a := load(t, rel)
	if len(a.Shape) != 4 || a.Shape[3] != 3 || a.I == nil {
		t.Fatalf("%s: want a [T, H, W, 3] integer array, got shape %v", rel, a.Shape)
	}
	n, per := a.Shape[0], a.Shape[1]*a.Shape[2]*3
	frames := make([]*media.Image, n)
	for i := range frames {
		f := &media.Image{Height: a.Shape[1], Width: a.Shape[2], Pix: make([]byte, per)}
		for j, v := range a.I[i*per : (i+1)*per] {
			f.Pix[j] = byte(v)
		}
		frames[i] = f
	}
	return frames
}

// TestVideoGolden: omni-video's 8-frame 64x64 clip through the video
// processor with the limits the fixture passed (processor_config's 3136 and
// 12845056) and fps 2 gives transformers' pixel_values_videos, grid (4, 4,
// 4) and second_per_grid 1.0.
func TestVideoGolden(t *testing.T) {
	o := processorConfig(t).Image
	if o.MinPixels != configLimits[0] || o.MaxPixels != configLimits[1] {
		t.Fatalf("processor_config limits %d, %d; want %v", o.MinPixels, o.MaxPixels, configLimits)
	}
	got, err := Video(videoFrames(t, "omni-video/video_frames.npy"), o, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkPatches(t, "omni-video video", ImagePatches{Pixels: got.Pixels, Rows: got.Rows, Cols: got.Cols, Grid: got.Grid},
		"omni-video/video_pixel_values_videos.npy", "omni-video/video_video_grid_thw.npy", o.MergeSize)
	if spg := load(t, "omni-video/video_second_per_grid.npy").F; len(spg) != 1 || float32(got.SecondsPerGrid) != spg[0] {
		t.Errorf("second_per_grid %v, want %v", got.SecondsPerGrid, spg)
	}
	if got.Tokens(o.MergeSize) != 16 || got.FrameTokens(o.MergeSize) != 4 {
		t.Errorf("%d tokens (%d per temporal patch), want 16 (4)", got.Tokens(o.MergeSize), got.FrameTokens(o.MergeSize))
	}
}

// TestVideoSize: with the reference's VIDEO_SIZE a frame of any size gives
// between 128 and 768 tokens per temporal patch: the fixture's 64x64 is
// grown to 384x384 (grid (4, 24, 24), as its README works out), a 640x360
// frame (under the decoder's 262,144-pixel cap) only rounded, a
// 1920x1080 one (the processor does not know the cap) shrunk and a 300x100
// one grown.
func TestVideoSize(t *testing.T) {
	o := processorConfig(t).Image
	o.MinPixels, o.MaxPixels = VideoSize.MinPixels, VideoSize.MaxPixels
	if VideoSize.MinPixels != 128*32*32 || VideoSize.MaxPixels != 768*32*32 {
		t.Fatalf("VideoSize %v, want 128·32·32 to 768·32·32", VideoSize)
	}
	got, err := Video(videoFrames(t, "omni-video/video_frames.npy"), o, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Grid != [3]int{4, 24, 24} || got.Tokens(o.MergeSize) != 576 {
		t.Errorf("64x64 clip: grid %v, %d tokens; want (4, 24, 24), 576", got.Grid, got.Tokens(o.MergeSize))
	}
	for _, c := range []struct {
		w, h, frames int
		grid         [3]int
	}{
		{640, 360, 3, [3]int{2, 22, 40}},   // 352x640: 220 tokens a temporal patch
		{1920, 1080, 2, [3]int{1, 40, 72}}, // 640x1152 = 737,280 px ≤ 786,432
		{300, 100, 1, [3]int{1, 14, 40}},   // grown: 224x640 = 143,360 px ≥ 131,072
	} {
		frames := make([]*media.Image, c.frames)
		for i := range frames {
			frames[i] = &media.Image{Width: c.w, Height: c.h, Pix: make([]byte, 3*c.w*c.h)}
			for j := range frames[i].Pix {
				frames[i].Pix[j] = byte(j*31 + i*17 + j/(3*c.w))
			}
		}
		got, err := Video(frames, o, 2)
		if err != nil {
			t.Fatalf("%dx%d: %v", c.w, c.h, err)
		}
		per := got.FrameTokens(o.MergeSize)
		if got.Grid != c.grid || per < 128 || per > 768 {
			t.Errorf("%dx%d, %d frames: grid %v, %d tokens per temporal patch; want %v, within [128, 768]", c.w, c.h, c.frames, got.Grid, per, c.grid)
		}
		if got.Rows != got.Grid[0]*got.Grid[1]*got.Grid[2] || len(got.Pixels) != got.Rows*got.Cols {
			t.Errorf("%dx%d: %d rows of %d values for grid %v", c.w, c.h, got.Rows, got.Cols, got.Grid)
		}
		// Every frame is the image processor's resize of that frame.
		want, err := Image(frames[0], o)
		if err != nil {
			t.Fatal(err)
		}
		frameRows := got.Grid[1] * got.Grid[2]
		for r := range frameRows {
			for c := range 3 {
				for x := range 256 {
					if a, b := got.Pixels[r*1536+c*512+x], want.Pixels[r*1536+c*512+x]; a != b {
						t.Fatalf("frame 0 row %d channel %d: %v, the image processor %v", r, c, a, b)
					}
				}
			}
		}
	}
}

// TestVideoLayout: every frame lands in the rows of its temporal patch, in
// the block of its place in the pair; a still video equals the image
// processor's output (which repeats its picture in every frame); an odd
// frame count repeats the last frame.
func TestVideoLayout(t *testing.T) {
	o := release.ImageProcessor{PatchSize: 16, TemporalPatchSize: 2, MergeSize: 2, MinPixels: 3136, MaxPixels: 12845056,
		ImageMean: []float64{0.5}, ImageStd: []float64{0.5}, RescaleFactor: 1.0 / 255}
	frame := func(seed int) *media.Image {
		img := &media.Image{Width: 96, Height: 64, Pix: make([]byte, 3*96*64)}
		for i := range img.Pix {
			img.Pix[i] = byte(i*7 + i/3 + seed*53)
		}
		return img
	}
	still, err := Video([]*media.Image{frame(0), frame(0)}, o, 2)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(frame(0), o)
	if err != nil {
		t.Fatal(err)
	}
	if still.Grid != img.Grid || !equalF32(still.Pixels, img.Pixels) {
		t.Errorf("a still 2-frame video (grid %v) differs from its picture (grid %v)", still.Grid, img.Grid)
	}

	frames := []*media.Image{frame(1), frame(2), frame(3)}
	got, err := Video(frames, o, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got.Grid != [3]int{2, 4, 6} || got.Rows != 48 || got.Cols != 1536 || got.SecondsPerGrid != 0.5 {
		t.Fatalf("grid %v, %dx%d, second_per_grid %v; want (2, 4, 6), 48x1536, 0.5", got.Grid, got.Rows, got.Cols, got.SecondsPerGrid)
	}
	for f := range 4 { // frame 3 is frame 2 repeated
		src := frames[min(f, 2)]
		k, ft := f/2, f%2
		for y := range 64 {
			for x := range 96 {
				ph, pw := y/16, x/16
				row := k*24 + ((ph/2)*3+pw/2)*4 + (ph%2)*2 + pw%2
				for c := range 3 {
					want := (float32(float64(src.Pix[3*(y*96+x)+c])*(1.0/255)) - 0.5) / 0.5
					col := ((c*2+ft)*16+y%16)*16 + x%16
					if v := got.Pixels[row*1536+col]; v != want {
						t.Fatalf("frame %d pixel (%d, %d) channel %d: %g at row %d col %d, want %g", f, x, y, c, v, row, col, want)
					}
				}
			}
		}
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestVideoBadInput(t *testing.T) {
	o := processorConfig(t).Image
	f := &media.Image{Width: 64, Height: 64, Pix: make([]byte, 3*64*64)}
	other := &media.Image{Width: 64, Height: 32, Pix: make([]byte, 3*64*32)}
	for _, c := range []struct {
		name   string
		frames []*media.Image
		fps    float64
		mod    func(*release.ImageProcessor)
		want   string
	}{
		{"no frames", nil, 2, nil, "at least one frame"},
		{"nil frame", []*media.Image{f, nil}, 2, nil, "frame 1"},
		{"short buffer", []*media.Image{{Width: 4, Height: 4, Pix: make([]byte, 47)}}, 2, nil, "bytes"},
		{"frames of two sizes", []*media.Image{f, other}, 2, nil, "share one size"},
		{"zero fps", []*media.Image{f}, 0, nil, "fps"},
		{"NaN fps", []*media.Image{f}, math.NaN(), nil, "fps"},
		{"infinite fps", []*media.Image{f}, math.Inf(1), nil, "fps"},
		{"no temporal patch", []*media.Image{f}, 2, func(o *release.ImageProcessor) { o.TemporalPatchSize = 0 }, "temporal_patch_size"},
		{"no limits", []*media.Image{f}, 2, func(o *release.ImageProcessor) { o.MinPixels, o.MaxPixels = 0, 0 }, "limits"},
		{"zero std", []*media.Image{f}, 2, func(o *release.ImageProcessor) { o.ImageStd = []float64{0} }, "std"},
		{"too many frames", make([]*media.Image, maxVideoFrames+1), 2, nil, "frames"},
	} {
		oo := o
		if c.mod != nil {
			c.mod(&oo)
		}
		_, err := Video(c.frames, oo, c.fps)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

// TestLogMelSoundtrack: the av case's 4 s soundtrack alone gives the
// processor's 400 frames, all valid, and 52 audio tokens.
func TestLogMelSoundtrack(t *testing.T) {
	o := audioConfig(t)
	got, err := LogMel(load(t, "omni-video/av_audio_waveform.npy").F, o)
	if err != nil {
		t.Fatal(err)
	}
	checkLogMel(t, "av soundtrack (torch path)", got, "omni-video/av_input_features.npy", tolTorchPath)
	checkMask(t, "av soundtrack", got, "omni-video/av_feature_attention_mask.npy")
	if n := AudioTokens(got.Frames); n != 52 {
		t.Errorf("AudioTokens(%d) = %d, want 52", got.Frames, n)
	}
}
