// Package media decodes the pictures and sound a request carries, as the
// reference's decoding makes them (Pillow for images, PyAV/FFmpeg for audio):
// images to 8-bit RGB, audio to float32 mono at 16 kHz. It parses the two
// shapes a request sends (a data: URL, or a content type with base64 bytes),
// detects the real format from the bytes, and enforces the hosted API's
// limits before any decoding work (dimensions from the header first). It
// depends on the standard library and well-kept decoders only.
package media

// Image is a decoded picture: 8-bit RGB, row-major, Pix[3*(y*Width+x)+c].
type Image struct {
	Width, Height int
	Pix           []byte
}

// Clip is decoded sound: mono float32 samples at SampleRate (16 kHz).
type Clip struct {
	Samples []float32
}

// SampleRate is the rate every Clip is delivered at (the reference's
// AUDIO_SAMPLE_RATE).
const SampleRate = 16000

// Limits bounds what a request may carry. HostedLimits are the hosted API's.
type Limits struct {
	Images           int     // images per request
	ImageBytes       int     // encoded bytes of one image
	ImagePixels      int     // width × height of one image
	ImagesTotalBytes int     // encoded bytes of all images together
	Clips            int     // audio clips per request
	ClipBytes        int     // encoded bytes of one clip
	ClipSeconds      float64 // duration of one clip
}

// HostedLimits returns the limits of the hosted API (Workers AI schema for
// @cf/cloudflare/clef-omni): 4 images of at most 4 MiB and 16 MP each, 8 MiB
// of images in total; 4 clips of at most 8 MiB and 300 s each.
func HostedLimits() Limits {
	return Limits{
		Images:           4,
		ImageBytes:       4 << 20,
		ImagePixels:      16_000_000,
		ImagesTotalBytes: 8 << 20,
		Clips:            4,
		ClipBytes:        8 << 20,
		ClipSeconds:      300,
	}
}
