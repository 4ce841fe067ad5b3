package processor

import (
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
)

// ImageSize is the reference's IMAGE_SIZE (pixels): MinPixels 65536, MaxPixels 1048576.
// The clef-omni reference passes it to every processor call as
// size={"shortest_edge": 65536, "longest_edge": 1048576}, overriding the
// processor_config.json limits (3136 and 12845056).
var ImageSize = struct{ MinPixels, MaxPixels int }{65536, 1048576}

// maxSide bounds an image side SmartResize accepts, so that products of
// sides never overflow and a damaged header cannot ask for absurd sizes.
const maxSide = 1 << 24

// maxAspect is the reference's limit on max(side)/min(side).
const maxAspect = 200

// SmartResize returns the height and width (multiples of factor) the Qwen2-VL processor resizes to, or an error (aspect ratio > 200, too small) as the reference raises.
//
// It follows the reference's smart_resize (transformers 4.57 and later, which
// no longer refuse a side shorter than factor): each side is rounded to the
// nearest multiple of factor (Python round, ties to even); when the area then
// exceeds maxPixels both sides shrink by √(H·W/maxPixels) and are floored to a
// multiple of factor (at least factor); when it falls below minPixels both
// grow by √(minPixels/(H·W)) and are ceiled. All arithmetic is the
// reference's float64 in the reference's order. A result with a zero side
// (possible only when minPixels is 0) is refused as too small.
func SmartResize(height, width, factor, minPixels, maxPixels int) (h, w int, err error) {
	if height <= 0 || width <= 0 {
		return 0, 0, fmt.Errorf("processor: image is %dx%d pixels: both sides must be positive", width, height)
	}
	if height > maxSide || width > maxSide {
		return 0, 0, fmt.Errorf("processor: image is %dx%d pixels: a side exceeds %d", width, height, maxSide)
	}
	if factor <= 0 || factor > maxSide {
		return 0, 0, fmt.Errorf("processor: resize factor %d must be in [1, %d]", factor, maxSide)
	}
	if minPixels < 0 || maxPixels <= 0 || minPixels > maxPixels {
		return 0, 0, fmt.Errorf("processor: pixel limits [%d, %d] are invalid", minPixels, maxPixels)
	}
	hf, wf, ff := float64(height), float64(width), float64(factor)
	if ratio := math.Max(hf, wf) / math.Min(hf, wf); ratio > maxAspect {
		return 0, 0, fmt.Errorf("processor: image is %dx%d pixels: absolute aspect ratio must be smaller than %d, got %g", width, height, maxAspect, ratio)
	}
	h = int(math.RoundToEven(hf/ff)) * factor
	w = int(math.RoundToEven(wf/ff)) * factor
	switch {
	case h*w > maxPixels:
		beta := math.Sqrt(float64(height*width) / float64(maxPixels))
		h = max(factor, int(math.Floor(hf/beta/ff))*factor)
		w = max(factor, int(math.Floor(wf/beta/ff))*factor)
	case h*w < minPixels:
		beta := math.Sqrt(float64(minPixels) / float64(height*width))
		h = int(math.Ceil(hf*beta/ff)) * factor
		w = int(math.Ceil(wf*beta/ff)) * factor
	}
	if h <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("processor: image is %dx%d pixels: too small, it resizes to %dx%d", width, height, w, h)
	}
	if h > maxSide || w > maxSide {
		return 0, 0, fmt.Errorf("processor: image is %dx%d pixels: it would resize to %dx%d", width, height, w, h)
	}
	return h, w, nil
}

// ImagePatches is one picture after the processor: Pixels [Rows, C*T*P*P] (rows in merge-block order), Grid (t, h, w) in patches.
//
// Row r = ((bh·(gw/merge) + bw)·merge + ih)·merge + iw for the patch at
// patch row bh·merge+ih and column bw·merge+iw; column index
// ((c·T + t)·P + y)·P + x (channel, frame, row, column inside the patch).
type ImagePatches struct {
	Pixels     []float32 // [Rows, Cols]
	Rows, Cols int
	Grid       [3]int // (t, h, w) in patches
}

// Tokens is the number of placeholder tokens: t*h*w / merge².
func (p ImagePatches) Tokens(merge int) int {
	if merge <= 0 {
		return 0
	}
	return p.Grid[0] * p.Grid[1] * p.Grid[2] / (merge * merge)
}

// Reference defaults of Qwen2VLImageProcessor for settings a
// processor_config.json may leave out (rescale factor, mean, std).
var (
	defaultImageMean = []float64{0.48145466, 0.4578275, 0.40821073}  // OPENAI_CLIP_MEAN
	defaultImageStd  = []float64{0.26862954, 0.26130258, 0.27577711} // OPENAI_CLIP_STD
)

const (
	defaultRescale = 1.0 / 255
	imageChannels  = 3
	maxPatchSide   = 1 << 10 // any sane patch, temporal patch or merge size
)

// Image runs the processor: smart_resize (factor patch*merge) with o's limits (the engine passes ImageSize), ResizeBicubic when the size changes, rescale 1/255, normalize with mean/std, repeat to temporal_patch_size frames, patchify in the reference's order.
//
// The reference resizes unconditionally, but Pillow returns an unchanged copy
// when the size is already right, so skipping the resize then is exact.
// Rescale is float64 x·factor rounded to float32, then (x−mean)/std in
// float32 with mean and std rounded to float32: the reference's numpy steps.
// A settings value left at zero takes the reference class's default
// (rescale 1/255, OpenAI CLIP mean and std); patch, temporal patch and merge
// sizes and the pixel limits are required.
func Image(img *media.Image, o release.ImageProcessor) (ImagePatches, error) {
	if err := checkImage(img); err != nil {
		return ImagePatches{}, err
	}
	patch, merge, err := checkGeometry(o)
	if err != nil {
		return ImagePatches{}, err
	}
	lut, err := normLUT(o)
	if err != nil {
		return ImagePatches{}, err
	}
	h, w, err := SmartResize(img.Height, img.Width, patch*merge, o.MinPixels, o.MaxPixels)
	if err != nil {
		return ImagePatches{}, err
	}
	// One picture is one temporal patch: the frame repeated to
	// temporal_patch_size frames.
	out, rows, cols := patchify([]*media.Image{img}, w, h, o, lut)
	return ImagePatches{Pixels: out, Rows: rows, Cols: cols, Grid: [3]int{1, h / patch, w / patch}}, nil
}

// checkGeometry checks the processor's patch, temporal patch and merge
// sizes and returns the patch and merge sizes.
func checkGeometry(o release.ImageProcessor) (patch, merge int, err error) {
	patch, tps, merge := o.PatchSize, o.TemporalPatchSize, o.MergeSize
	if patch <= 0 || tps <= 0 || merge <= 0 || patch > maxPatchSide || tps > maxPatchSide || merge > maxPatchSide {
		return 0, 0, fmt.Errorf("processor: image processor patch_size %d, temporal_patch_size %d, merge_size %d: each must be in [1, %d]", patch, tps, merge, maxPatchSide)
	}
	return patch, merge, nil
}

// patchify cuts frames, resized to w×h (ResizeBicubic, skipped when the
// size is already right), into the rows of the vision tower's input:
// temporal_patch_size consecutive frames make one temporal patch (an
// incomplete last one is filled by repeating the last frame), each cut
// into rows in merge-block order (temporal patch, block row, block
// column, row in block, column in block), each row's vector (channel,
// frame of the temporal patch, y, x), the bytes mapped through lut. It
// returns the rows [rows, cols].
func patchify(frames []*media.Image, w, h int, o release.ImageProcessor, lut *[imageChannels][256]float32) (out []float32, rows, cols int) {
	patch, tps, merge := o.PatchSize, o.TemporalPatchSize, o.MergeSize
	gt := (len(frames) + tps - 1) / tps
	gh, gw := h/patch, w/patch
	frameRows := gh * gw // rows of one temporal patch
	rows, cols = gt*frameRows, imageChannels*tps*patch*patch
	out = make([]float32, rows*cols)
	plane := patch * patch // one (c, frame) block of a row
	var last, resized *media.Image
	for k := range gt {
		for ft := range tps {
			src := frames[min(k*tps+ft, len(frames)-1)]
			if h != src.Height || w != src.Width {
				if src != last { // the repeated last frame is resized once
					last, resized = src, ResizeBicubic(src, w, h)
				}
				src = resized
			}
			// The frame's pixels go to the (c, ft) blocks of the rows of
			// temporal patch k.
			r := k * frameRows
			for bh := range gh / merge {
				for bw := range gw / merge {
					for ih := range merge {
						for iw := range merge {
							y0 := (bh*merge + ih) * patch
							x0 := (bw*merge + iw) * patch
							row := out[r*cols : (r+1)*cols]
							for c := range imageChannels {
								block := row[(c*tps+ft)*plane : (c*tps+ft+1)*plane]
								for y := range patch {
									pix := src.Pix[3*((y0+y)*w+x0)+c:]
									dst := block[y*patch : (y+1)*patch]
									for x := range dst {
										dst[x] = lut[c][pix[3*x]]
									}
								}
							}
							r++
						}
					}
				}
			}
		}
	}
	return out, rows, cols
}

// normLUT is the rescale and normalisation as a table: per channel and
// byte, float32(float64(v)·rescale), then (x − mean)/std in float32 (the
// reference's numpy steps).
func normLUT(o release.ImageProcessor) (*[imageChannels][256]float32, error) {
	mean, std, err := meanStd(o)
	if err != nil {
		return nil, err
	}
	rescale := o.RescaleFactor
	if rescale == 0 {
		rescale = defaultRescale
	}
	if math.IsNaN(rescale) || math.IsInf(rescale, 0) {
		return nil, fmt.Errorf("processor: image processor rescale_factor %g is not finite", rescale)
	}
	var lut [imageChannels][256]float32
	for c := range imageChannels {
		m, s := float32(mean[c]), float32(std[c])
		for v := range 256 {
			x := float32(float64(v) * rescale)
			lut[c][v] = (x - m) / s
		}
	}
	return &lut, nil
}

// checkImage refuses a picture whose buffer does not match its size.
func checkImage(img *media.Image) error {
	if img == nil {
		return fmt.Errorf("processor: no image")
	}
	if img.Width <= 0 || img.Height <= 0 || img.Width > maxSide || img.Height > maxSide {
		return fmt.Errorf("processor: image is %dx%d pixels: sides must be in [1, %d]", img.Width, img.Height, maxSide)
	}
	if want := 3 * img.Width * img.Height; len(img.Pix) != want {
		return fmt.Errorf("processor: %dx%d RGB image has %d bytes, want %d", img.Width, img.Height, len(img.Pix), want)
	}
	return nil
}

// meanStd returns the per-channel mean and std (one value is broadcast to
// every channel, as numpy does), with the reference defaults when absent.
func meanStd(o release.ImageProcessor) (mean, std []float64, err error) {
	mean, std = o.ImageMean, o.ImageStd
	if len(mean) == 0 {
		mean = defaultImageMean
	}
	if len(std) == 0 {
		std = defaultImageStd
	}
	if len(mean) == 1 {
		mean = []float64{mean[0], mean[0], mean[0]}
	}
	if len(std) == 1 {
		std = []float64{std[0], std[0], std[0]}
	}
	if len(mean) != imageChannels || len(std) != imageChannels {
		return nil, nil, fmt.Errorf("processor: image_mean has %d values and image_std %d, want %d each", len(mean), len(std), imageChannels)
	}
	for c := range imageChannels {
		if math.IsNaN(mean[c]) || math.IsInf(mean[c], 0) || std[c] == 0 || math.IsNaN(std[c]) || math.IsInf(std[c], 0) {
			return nil, nil, fmt.Errorf("processor: image_mean %v / image_std %v: need finite values and a non-zero std", mean, std)
		}
	}
	return mean, std, nil
}
