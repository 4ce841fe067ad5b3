// Package media decodes the pictures and sound a request carries, as the
// reference's decoding makes them (Pillow for images, PyAV/FFmpeg for audio):
// images to 8-bit RGB, audio to float32 mono at 16 kHz. It parses the two
// shapes a request sends (a data: URL, or a content type with base64 bytes),
// detects the real format from the bytes, and enforces the hosted API's
// limits before any decoding work (dimensions from the header first). It
// depends on the standard library and well-kept decoders only.
package media

import (
	"fmt"
	"strings"
)

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
	Videos           int     // videos per request
	VideoBytes       int     // encoded bytes of one video
	VideoSeconds     float64 // duration of one video (checked by its decoder)
	AVTotalBytes     int     // encoded bytes of all clips and videos together, when there are videos
}

// HostedLimits returns the limits of the hosted API (Workers AI schema for
// @cf/cloudflare/clef-omni): 4 images of at most 4 MiB and 16 MP each, 8 MiB
// of images in total; 4 clips of at most 8 MiB and 300 s each; 2 videos of
// at most 16 MiB and 60 s each, with the clips and videos at most 16 MiB
// together.
func HostedLimits() Limits {
	return Limits{
		Images:           4,
		ImageBytes:       4 << 20,
		ImagePixels:      16_000_000,
		ImagesTotalBytes: 8 << 20,
		Clips:            4,
		ClipBytes:        8 << 20,
		ClipSeconds:      300,
		Videos:           2,
		VideoBytes:       16 << 20,
		VideoSeconds:     60,
		AVTotalBytes:     16 << 20,
	}
}

// CheckVideos checks a request's videos against lim before any is decoded
// (decoding them is engine/media/video's): their count, the bytes of each,
// each one's declared content type (a video type, or none), and the bytes
// of the clips and videos together. A zero limit is no limit. Every
// refusal is an *Error naming the item, or the list (Index -1).
func CheckVideos(videos, clips []Source, lim Limits) error {
	if len(videos) == 0 {
		return nil
	}
	if lim.Videos > 0 && len(videos) > lim.Videos {
		return &Error{"videos", -1, fmt.Sprintf("%d items, at most %d", len(videos), lim.Videos)}
	}
	total := 0
	for i, s := range videos {
		if err := checkBytes(s.Data, "video", lim.VideoBytes); err != nil {
			return &Error{"videos", i, err.Error()}
		}
		if ct := s.ContentType; ct != "" && ct != "application/octet-stream" && !strings.HasPrefix(ct, "video/") {
			return &Error{"videos", i, fmt.Sprintf("declared content type %s is not a video type", ct)}
		}
		total += len(s.Data)
	}
	for _, s := range clips {
		total += len(s.Data)
	}
	if lim.AVTotalBytes > 0 && total > lim.AVTotalBytes {
		return &Error{"videos", -1, fmt.Sprintf("audio and videos are %s together, at most %s", sizeText(total, lim.AVTotalBytes), sizeText(lim.AVTotalBytes, total))}
	}
	return nil
}
