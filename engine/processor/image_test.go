package processor

import (
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/release"
)

// Processor-config limits (spec §4.3) and the reference's IMAGE_SIZE.
var (
	configLimits = [2]int{3136, 12845056}
	imageLimits  = [2]int{ImageSize.MinPixels, ImageSize.MaxPixels}
)

func TestSmartResize(t *testing.T) {
	// Expected sizes are what the reference's smart_resize (transformers
	// 4.57, factor 32) returns for the same arguments.
	cases := []struct {
		h, w   int
		limits [2]int
		wantH  int
		wantW  int
	}{
		{48, 64, configLimits, 64, 64},       // ../omni image: 1.5 rounds to 2
		{48, 64, imageLimits, 224, 320},      // clef-tiny media: grown to ≥ 65536 pixels
		{64, 96, configLimits, 64, 96},       // ../omni mixed: unchanged
		{64, 96, imageLimits, 224, 320},      // grown
		{80, 112, configLimits, 64, 128},     // 2.5 → 2 and 3.5 → 4: ties to even
		{1080, 1920, imageLimits, 768, 1344}, // shrunk: 1080/β/32 is exactly 24
		{1080, 1920, configLimits, 1088, 1920},
		{800, 1280, imageLimits, 800, 1280}, // 1,024,000 pixels: within the limits
		{3000, 4000, imageLimits, 864, 1152},
		{3024, 4032, imageLimits, 864, 1152},
		{4000, 4000, imageLimits, 1024, 1024}, // exactly the maximum
		{4096, 4096, configLimits, 3584, 3584},
		{4000, 6000, configLimits, 2912, 4384},
		{720, 1280, imageLimits, 704, 1280},
		{768, 1365, imageLimits, 768, 1344},
		{224, 320, imageLimits, 224, 320},
		{10, 10, imageLimits, 256, 256},  // smaller than factor: grown, not refused
		{10, 10, configLimits, 64, 64},   //
		{15, 17, configLimits, 64, 64},   //
		{1, 1, imageLimits, 256, 256},    //
		{1, 200, imageLimits, 32, 3648},  // aspect ratio exactly 200 is allowed
		{5, 1000, imageLimits, 32, 3648}, //
		{20, 4000, imageLimits, 32, 4000},
		{2000, 10, imageLimits, 3648, 32},
	}
	for _, c := range cases {
		h, w, err := SmartResize(c.h, c.w, 32, c.limits[0], c.limits[1])
		if err != nil {
			t.Errorf("SmartResize(%d, %d, %v): %v", c.h, c.w, c.limits, err)
			continue
		}
		if h != c.wantH || w != c.wantW {
			t.Errorf("SmartResize(%d, %d, %v) = %dx%d, want %dx%d", c.h, c.w, c.limits, h, w, c.wantH, c.wantW)
		}
		if h%32 != 0 || w%32 != 0 {
			t.Errorf("SmartResize(%d, %d) = %dx%d: not multiples of 32", c.h, c.w, h, w)
		}
	}

	bad := []struct {
		h, w, factor, min, max int
		want                   string
	}{
		{1, 201, 32, 65536, 1048576, "aspect ratio"},
		{300, 1, 32, 65536, 1048576, "aspect ratio"},
		{0, 10, 32, 65536, 1048576, "positive"},
		{10, -1, 32, 65536, 1048576, "positive"},
		{10, 10, 0, 65536, 1048576, "factor"},
		{10, 10, 32, 2, 1, "limits"},
		{10, 10, 32, 0, 0, "limits"},
		{10, 10, 32, 0, 1048576, "too small"}, // rounds to 0 and no minimum to grow it
		{1 << 25, 1 << 25, 32, 65536, 1048576, "exceeds"},
	}
	for _, c := range bad {
		_, _, err := SmartResize(c.h, c.w, c.factor, c.min, c.max)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SmartResize(%d, %d, %d, %d, %d) error %v, want one mentioning %q", c.h, c.w, c.factor, c.min, c.max, err, c.want)
		}
	}
}

func TestResizeBicubicGolden(t *testing.T) {
	// ../omni image: 64x48 → 64x64 by PIL bicubic (only the vertical pass runs).
	in := rgbImage(t, load(t, "omni/image_rgb.npy"))
	want := rgbImage(t, load(t, "omni/image_resized_rgb.npy"))
	got := ResizeBicubic(in, want.Width, want.Height)
	if got == nil || got.Width != want.Width || got.Height != want.Height {
		t.Fatalf("ResizeBicubic gave %v, want %dx%d", got, want.Width, want.Height)
	}
	diff := 0
	for i := range got.Pix {
		if got.Pix[i] != want.Pix[i] {
			diff++
		}
	}
	if diff != 0 {
		t.Errorf("image_resized_rgb: %d of %d bytes differ", diff, len(got.Pix))
	}

	// ../omni mixed: 96x64 is already a multiple of 32 and stays as it is.
	in = rgbImage(t, load(t, "omni/mixed_rgb.npy"))
	want = rgbImage(t, load(t, "omni/mixed_resized_rgb.npy"))
	got = ResizeBicubic(in, want.Width, want.Height)
	if string(got.Pix) != string(want.Pix) {
		t.Error("mixed_resized_rgb differs")
	}
	if &got.Pix[0] == &in.Pix[0] {
		t.Error("an unchanged size must return a copy, not the input's buffer")
	}
}

func TestResizeBicubicConstant(t *testing.T) {
	// A flat picture stays flat in both directions and on both passes: the
	// fixed-point taps of every output pixel sum to 1 within rounding.
	img := &media.Image{Width: 37, Height: 23, Pix: make([]byte, 3*37*23)}
	for i := range img.Pix {
		img.Pix[i] = []byte{17, 200, 255}[i%3]
	}
	for _, size := range [][2]int{{11, 7}, {100, 64}, {37, 5}, {9, 23}, {300, 2}} {
		got := ResizeBicubic(img, size[0], size[1])
		for i, v := range got.Pix {
			if want := []byte{17, 200, 255}[i%3]; v != want {
				t.Fatalf("resize to %v: byte %d = %d, want %d", size, i, v, want)
			}
		}
	}
}

func TestResizeBicubicAntialias(t *testing.T) {
	// Downscaling widens the filter by the scale (Pillow's antialiasing):
	// a white column every 4 shrunk 4× averages to a quarter grey. A filter
	// of fixed width would see one white column among its four taps, weigh
	// it by −1/16 and give black.
	img := &media.Image{Width: 64, Height: 64, Pix: make([]byte, 3*64*64)}
	for i := range img.Pix {
		if (i/3%64)%4 == 0 {
			img.Pix[i] = 255
		}
	}
	// Away from the borders (where the filter is cut and renormalised) the
	// taps see every phase of the stripes: 255/4 = 63.75.
	got := ResizeBicubic(img, 16, 16)
	for y := range 16 {
		for x := 2; x < 14; x++ {
			if v := got.Pix[3*(y*16+x)]; v < 63 || v > 65 {
				t.Fatalf("4x downscale of one-in-four stripes: pixel (%d, %d) is %d, want 64", x, y, v)
			}
		}
	}
}

func TestResizeBicubicBadInput(t *testing.T) {
	good := &media.Image{Width: 2, Height: 2, Pix: make([]byte, 12)}
	for _, c := range []struct {
		img  *media.Image
		w, h int
	}{
		{nil, 4, 4},
		{&media.Image{Width: 2, Height: 2, Pix: make([]byte, 11)}, 4, 4},
		{&media.Image{Width: 0, Height: 2}, 4, 4},
		{good, 0, 4},
		{good, 4, -1},
	} {
		if got := ResizeBicubic(c.img, c.w, c.h); got != nil {
			t.Errorf("ResizeBicubic(%v, %d, %d) = %v, want nil", c.img, c.w, c.h, got)
		}
	}
}

// checkPatches compares Image's output with the golden pixel values and grid.
func checkPatches(t *testing.T, name string, got ImagePatches, pixels, grid string, merge int) {
	t.Helper()
	pv := load(t, pixels)
	g := load(t, grid)
	sameShape(t, g, 1, 3)
	if want := [3]int{int(g.I[0]), int(g.I[1]), int(g.I[2])}; got.Grid != want {
		t.Fatalf("%s: grid %v, want %v", name, got.Grid, want)
	}
	sameShape(t, pv, got.Rows, got.Cols)
	if len(got.Pixels) != got.Rows*got.Cols {
		t.Fatalf("%s: %d values for %dx%d", name, len(got.Pixels), got.Rows, got.Cols)
	}
	d, at := maxAbsDiff(got.Pixels, pv.F)
	t.Logf("%s: %dx%d patches, grid %v, %d tokens, max |Δ| %.3g", name, got.Rows, got.Cols, got.Grid, got.Tokens(merge), d)
	if d > 1e-6 {
		t.Errorf("%s: pixel values differ by %g at row %d col %d", name, d, at/got.Cols, at%got.Cols)
	}
}

func TestImageGoldens(t *testing.T) {
	o := processorConfig(t).Image
	if o.MinPixels != configLimits[0] || o.MaxPixels != configLimits[1] {
		t.Fatalf("processor_config limits %d, %d; want spec §4.3's %v", o.MinPixels, o.MaxPixels, configLimits)
	}

	// ../omni: the processor_config limits (3136, 12845056).
	got, err := Image(rgbImage(t, load(t, "omni/image_rgb.npy")), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPatches(t, "omni image", got, "omni/image_pixel_values.npy", "omni/image_image_grid_thw.npy", o.MergeSize)
	if got.Tokens(o.MergeSize) != 4 {
		t.Errorf("omni image: %d tokens, want 4 (index.json n_image_tokens)", got.Tokens(o.MergeSize))
	}
	got, err = Image(rgbImage(t, load(t, "omni/mixed_rgb.npy")), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPatches(t, "omni mixed", got, "omni/mixed_pixel_values.npy", "omni/mixed_image_grid_thw.npy", o.MergeSize)

	// clef-tiny media record: the request's PNG with the reference's
	// IMAGE_SIZE, 64x48 grown to 320x224.
	images, _ := mediaRequest(t, "media_image_audio_multi")
	if len(images) != 1 {
		t.Fatalf("media_image_audio_multi has %d images, want 1", len(images))
	}
	o.MinPixels, o.MaxPixels = ImageSize.MinPixels, ImageSize.MaxPixels
	got, err = Image(decodePNG(t, dataURL(t, images[0], "image/png")), o)
	if err != nil {
		t.Fatal(err)
	}
	checkPatches(t, "clef-tiny media", got, "clef-tiny/media/media_image_audio_multi_pixel_values.npy",
		"clef-tiny/media/media_image_audio_multi_image_grid_thw.npy", o.MergeSize)
	if got.Tokens(o.MergeSize) != 70 {
		t.Errorf("clef-tiny media: %d tokens, want 70", got.Tokens(o.MergeSize))
	}
}

func TestImageLayout(t *testing.T) {
	// Every pixel lands once per frame where spec §4.4 puts it: row in
	// merge-block order, column (c, t, y, x). A 64x96 picture is not resized.
	img := &media.Image{Width: 96, Height: 64, Pix: make([]byte, 3*96*64)}
	for i := range img.Pix {
		img.Pix[i] = byte(i*7 + i/3)
	}
	o := release.ImageProcessor{PatchSize: 16, TemporalPatchSize: 2, MergeSize: 2, MinPixels: 3136, MaxPixels: 12845056,
		ImageMean: []float64{0.5}, ImageStd: []float64{0.5}, RescaleFactor: 1.0 / 255}
	got, err := Image(img, o)
	if err != nil {
		t.Fatal(err)
	}
	if got.Grid != [3]int{1, 4, 6} || got.Rows != 24 || got.Cols != 1536 {
		t.Fatalf("grid %v, %dx%d", got.Grid, got.Rows, got.Cols)
	}
	for y := range 64 {
		for x := range 96 {
			ph, pw := y/16, x/16
			row := ((ph/2)*3+pw/2)*4 + (ph%2)*2 + pw%2
			for c := range 3 {
				want := (float32(float64(img.Pix[3*(y*96+x)+c])*(1.0/255)) - 0.5) / 0.5
				for tt := range 2 {
					col := ((c*2+tt)*16+y%16)*16 + x%16
					if v := got.Pixels[row*1536+col]; v != want {
						t.Fatalf("pixel (%d, %d) channel %d frame %d: %g at row %d col %d, want %g", x, y, c, tt, v, row, col, want)
					}
				}
			}
		}
	}
}

func TestImageBadInput(t *testing.T) {
	o := processorConfig(t).Image
	img := &media.Image{Width: 4, Height: 4, Pix: make([]byte, 48)}
	for _, c := range []struct {
		name string
		img  *media.Image
		mod  func(*release.ImageProcessor)
		want string
	}{
		{"nil image", nil, nil, "no image"},
		{"short buffer", &media.Image{Width: 4, Height: 4, Pix: make([]byte, 47)}, nil, "bytes"},
		{"zero size", &media.Image{}, nil, "sides"},
		{"aspect", &media.Image{Width: 402, Height: 2, Pix: make([]byte, 3*804)}, nil, "aspect ratio"},
		{"no patch size", img, func(o *release.ImageProcessor) { o.PatchSize = 0 }, "patch_size"},
		{"no merge size", img, func(o *release.ImageProcessor) { o.MergeSize = -2 }, "merge_size"},
		{"no limits", img, func(o *release.ImageProcessor) { o.MinPixels, o.MaxPixels = 0, 0 }, "limits"},
		{"bad mean", img, func(o *release.ImageProcessor) { o.ImageMean = []float64{1, 2} }, "image_mean"},
		{"zero std", img, func(o *release.ImageProcessor) { o.ImageStd = []float64{0.5, 0, 0.5} }, "std"},
	} {
		oo := o
		if c.mod != nil {
			c.mod(&oo)
		}
		_, err := Image(c.img, oo)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}
