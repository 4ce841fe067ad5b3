package processor

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
)

// VideoSize is the pixel range a video frame is resized into (the Qwen2-VL
// video processor's default size, {"shortest_edge": 131072,
// "longest_edge": 786432}): 128 to 768 merged tokens per temporal patch.
// The clef-omni reference passes IMAGE_SIZE to the image processor only
// (images_kwargs), so videos keep this default.
var VideoSize = struct{ MinPixels, MaxPixels int }{131072, 786432}

// PositionIDPerSeconds is the processor's position_id_per_seconds (its
// call's default, 13.0): the time scale on which it writes a heard video's
// video and audio pads interleaved (spec §6). The thinker's configuration
// has its own value for the positions; the released checkpoints keep them
// equal.
const PositionIDPerSeconds = 13.0

// maxVideoFrames bounds the frames of one clip: far above what the hosted
// limits give (60 s at 2 fps), small enough that a bad caller cannot ask
// for absurd work.
const maxVideoFrames = 1 << 14

// VideoPatches is one video after the processor: Pixels [Rows, Cols], rows
// (temporal patch, block row, block column, row in block, column in block),
// each row's vector (channel, frame of the temporal patch, y, x); Grid
// (t, h, w) in patches; SecondsPerGrid the time one temporal patch covers
// (video_second_per_grid = temporal_patch_size / fps).
type VideoPatches struct {
	Pixels         []float32 // [Rows, Cols]
	Rows, Cols     int
	Grid           [3]int // (t, h, w) in patches
	SecondsPerGrid float64
}

// Tokens is the number of placeholder tokens: t·h·w / merge².
func (p VideoPatches) Tokens(merge int) int {
	return p.Grid[0] * p.FrameTokens(merge)
}

// FrameTokens is the number of placeholder tokens of one temporal patch:
// h·w / merge².
func (p VideoPatches) FrameTokens(merge int) int {
	if merge <= 0 {
		return 0
	}
	return p.Grid[1] * p.Grid[2] / (merge * merge)
}

// Video runs the Qwen2-VL video processor on a clip's frames, as the
// reference's processor call makes it with do_sample_frames off (every
// frame given is used) and the given fps: the frames, which must all have
// the first one's size, are resized to the size smart_resize (factor
// patch·merge, o's pixel limits: the engine passes VideoSize) gives for
// it, with the image processor's bicubic resize (ResizeBicubic, skipped
// when the size is unchanged), rescaled and normalised as Image does; an
// incomplete last temporal patch is filled by repeating the last frame;
// temporal_patch_size consecutive frames make one temporal patch, cut into
// rows in merge-block order. SecondsPerGrid is temporal_patch_size / fps.
func Video(frames []*media.Image, o release.ImageProcessor, fps float64) (VideoPatches, error) {
	if len(frames) == 0 {
		return VideoPatches{}, fmt.Errorf("processor: a video needs at least one frame")
	}
	if len(frames) > maxVideoFrames {
		return VideoPatches{}, fmt.Errorf("processor: a video of %d frames, at most %d", len(frames), maxVideoFrames)
	}
	if !(fps > 0) || math.IsInf(fps, 0) {
		return VideoPatches{}, fmt.Errorf("processor: video fps %v must be a positive number", fps)
	}
	for i, f := range frames {
		if err := checkImage(f); err != nil {
			return VideoPatches{}, fmt.Errorf("processor: frame %d: %w", i, err)
		}
		if f.Width != frames[0].Width || f.Height != frames[0].Height {
			return VideoPatches{}, fmt.Errorf("processor: frame %d is %dx%d, frame 0 %dx%d: a video's frames share one size",
				i, f.Width, f.Height, frames[0].Width, frames[0].Height)
		}
	}
	patch, merge, err := checkGeometry(o)
	if err != nil {
		return VideoPatches{}, err
	}
	lut, err := normLUT(o)
	if err != nil {
		return VideoPatches{}, err
	}
	h, w, err := SmartResize(frames[0].Height, frames[0].Width, patch*merge, o.MinPixels, o.MaxPixels)
	if err != nil {
		return VideoPatches{}, err
	}
	tps := o.TemporalPatchSize
	gt := (len(frames) + tps - 1) / tps // the last temporal patch is filled with the last frame
	if gt*(h/patch)*(w/patch) > math.MaxInt/(imageChannels*tps*patch*patch) {
		return VideoPatches{}, fmt.Errorf("processor: a video of %d frames of %dx%d is too large", len(frames), w, h)
	}
	out, rows, cols := patchify(frames, w, h, o, lut)
	return VideoPatches{Pixels: out, Rows: rows, Cols: cols, Grid: [3]int{gt, h / patch, w / patch}, SecondsPerGrid: float64(tps) / fps}, nil
}
