// Package video decodes the videos a request carries as the reference does
// (PyAV, i.e. FFmpeg's libraries): frames kept at 2 fps as 8-bit RGB, each
// scaled down to at most 262,144 pixels with even sides, and the soundtrack
// as float32 mono at 16 kHz. No maintained pure-Go decoder exists for the
// codecs phones record, so it runs the ffmpeg and ffprobe executables: the
// clip goes in through a pipe, only the file and pipe protocols are allowed,
// the input format is forced from our own container probe, and a wall-clock
// limit kills a decoder that hangs.
package video

import (
	"errors"
	"time"

	"github.com/clefrt/clef/engine/media"
)

// Errors a caller maps to a refusal naming the item (errors.Is).
var (
	// ErrNoFFmpeg: no ffmpeg/ffprobe executable was found; the message says
	// what to install.
	ErrNoFFmpeg = errors.New("video decoding needs FFmpeg")
	// ErrNoVideoStream: the container holds no decodable video stream.
	ErrNoVideoStream = errors.New("no decodable video stream")
	// ErrCorrupt: the container or a stream could not be read.
	ErrCorrupt = errors.New("corrupt or unsupported video")
	// ErrTooLong: the clip is longer than Options.MaxSeconds.
	ErrTooLong = errors.New("video too long")
	// ErrDecoder: the decoder crashed or ran past Options.Timeout and was
	// killed.
	ErrDecoder = errors.New("video decoder failed")
)

// refusal is an error of this package: a message for the request's
// refusal, wrapping one of the sentinels above.
type refusal struct {
	kind error
	msg  string
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }

func corrupt(msg string) error      { return &refusal{ErrCorrupt, msg} }
func tooLong(msg string) error      { return &refusal{ErrTooLong, msg} }
func noVideo(msg string) error      { return &refusal{ErrNoVideoStream, msg} }
func decoderError(msg string) error { return &refusal{ErrDecoder, msg} }

// Tools are the FFmpeg executables used to decode, and how much of the
// machine their runs may take.
type Tools struct {
	FFmpeg  string // path of ffmpeg
	FFprobe string // path of ffprobe
	// Threads, when above 0, is each ffmpeg run's -threads (the decoder's)
	// and -filter_threads; 0 leaves ffmpeg's default, one per core.
	Threads int
	// Slots, when not nil, bounds how many clips decode at once across
	// every caller sharing these Tools (each clip runs up to two ffmpeg
	// processes and holds its frames): Decode takes one of its places for
	// the whole of a clip's decoding, waiting for one until ctx ends.
	Slots chan struct{}
}

// Options are the reference's sampling and the hosted API's limits.
type Options struct {
	FPS            float64       // frames kept per second (2)
	MaxFramePixels int           // larger frames are scaled down, even sides (262,144)
	MaxSeconds     float64       // longer clips are refused (60)
	Timeout        time.Duration // wall-clock limit of one clip's decoding
	Audio          bool          // also decode the soundtrack
}

// DefaultOptions returns the reference's sampling (2 fps, 262,144 pixels)
// and the hosted limits (60 s), with the soundtrack decoded.
func DefaultOptions() Options {
	return Options{FPS: 2, MaxFramePixels: 262144, MaxSeconds: 60, Timeout: 2 * time.Minute, Audio: true}
}

// Clip is one decoded video.
type Clip struct {
	Frames        []*media.Image // the kept frames in order, RGB (not padded to an even count)
	Times         []float64      // each kept frame's time in seconds
	Width, Height int            // the stream's frame size before any scale-down
	Duration      float64        // seconds
	Audio         *media.Clip    // the soundtrack (16 kHz mono); nil when there is none or Options.Audio is false
	Format        string         // the container: "mp4" or "webm"
}

// Container is what our own probe reads from a clip's first bytes, before
// any decoder runs.
type Container struct {
	Format   string  // "mp4" (ISO BMFF / QuickTime) or "webm" (Matroska/WebM)
	Duration float64 // seconds from the container header; 0 when not stated
	// MoovAfterMdat: an MP4 whose movie header (moov) follows its media
	// data (mdat), as cameras write it without "fast start". Such a file
	// cannot be read from a pipe; Decode reads it from a private temporary
	// file.
	MoovAfterMdat bool
}
