package bench

// Video scenarios: a synthetic clip made at bench start with the system's
// ffmpeg (its test pattern and a tone), so demuxing and decoding, the video
// processor and the vision tower over many frames are timed.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
)

// ClipSpec is a synthetic video clip: ffmpeg's testsrc2 pattern (moving
// shapes, a clock and colour bars), with a sine tone as its soundtrack when
// Sound.
type ClipSpec struct {
	Width, Height int
	Seconds       float64
	FPS           int
	Sound         bool
	Tone          float64 // the soundtrack's frequency in Hz
	// Format is the container and codecs: "mp4" (H.264 and AAC, as phones
	// record) or "webm" (VP9 and Opus).
	Format string
}

// BenchVideo is the clip of the video scenarios: 10 s of 640×360 at 25 fps,
// H.264 in MP4, with an AAC soundtrack when sound (its tone from seed).
func BenchVideo(sound bool, seed uint64) ClipSpec {
	return ClipSpec{Width: 640, Height: 360, Seconds: 10, FPS: 25, Sound: sound, Tone: 220 + 55*float64(seed%8), Format: "mp4"}
}

// clipTimeout bounds one clip's encoding.
const clipTimeout = 5 * time.Minute

// SynthClip encodes the clip c with the ffmpeg executable into the file
// path (overwritten). Its error carries the end of ffmpeg's own message,
// e.g. when this ffmpeg lacks an encoder.
func SynthClip(ctx context.Context, ffmpeg, path string, c ClipSpec) error {
	if c.Width <= 0 || c.Height <= 0 || c.Seconds <= 0 || c.FPS <= 0 {
		return fmt.Errorf("bench: clip %dx%d, %v s at %d fps: sizes must be positive", c.Width, c.Height, c.Seconds, c.FPS)
	}
	secs := strconv.FormatFloat(c.Seconds, 'f', -1, 64)
	args := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=%d:duration=%s", c.Width, c.Height, c.FPS, secs)}
	if c.Sound {
		tone := c.Tone
		if tone <= 0 {
			tone = 440
		}
		args = append(args, "-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=%s:sample_rate=48000:duration=%s", strconv.FormatFloat(tone, 'f', -1, 64), secs))
	}
	args = append(args, "-map", "0:v")
	if c.Sound {
		args = append(args, "-map", "1:a")
	}
	switch c.Format {
	case "mp4", "":
		args = append(args, "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-movflags", "+faststart")
		if c.Sound {
			args = append(args, "-c:a", "aac", "-b:a", "96k")
		}
		args = append(args, "-f", "mp4")
	case "webm":
		args = append(args, "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "500k", "-pix_fmt", "yuv420p")
		if c.Sound {
			args = append(args, "-c:a", "libopus", "-b:a", "64k")
		}
		args = append(args, "-f", "webm")
	default:
		return fmt.Errorf("bench: clip format %q: want mp4 or webm", c.Format)
	}
	args = append(args, "-t", secs, path)
	ctx, cancel := context.WithTimeout(ctx, clipTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ffmpeg, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = "…" + msg[len(msg)-500:]
		}
		return fmt.Errorf("bench: making a %s clip with %s: %v: %s", c.Format, ffmpeg, err, msg)
	}
	return nil
}

// videoMaker makes the video scenarios' clips with one ffmpeg, in one
// temporary directory, and counts their tokens as the engine does.
type videoMaker struct {
	ffmpeg string // as given ("": $CLEF_FFMPEG, then PATH)
	tools  *video.Tools
	err    error // why there is no ffmpeg
	looked bool
	dir    string
	n      int
}

func newVideoMaker(ffmpeg string) *videoMaker { return &videoMaker{ffmpeg: ffmpeg} }

// find locates ffmpeg once; its error says that the video scenarios need
// it and what is missing.
func (v *videoMaker) find() error {
	if !v.looked {
		v.looked = true
		if v.tools, v.err = video.Find(v.ffmpeg); v.err != nil {
			v.err = fmt.Errorf("the video scenarios need ffmpeg: %w", v.err)
		}
	}
	return v.err
}

// clip makes the clip c and returns its bytes.
func (v *videoMaker) clip(c ClipSpec) ([]byte, error) {
	if err := v.find(); err != nil {
		return nil, err
	}
	if v.dir == "" {
		dir, err := os.MkdirTemp("", "clef-bench-video-")
		if err != nil {
			return nil, err
		}
		v.dir = dir
	}
	v.n++
	path := filepath.Join(v.dir, fmt.Sprintf("clip%d.%s", v.n, c.Format))
	if err := SynthClip(context.Background(), v.tools.FFmpeg, path, c); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// counts decodes and processes req's media as the engine does and returns
// the record's placeholder counts.
func (v *videoMaker) counts(req *api.Request, proc *release.Processor) (record.Media, error) {
	if err := v.find(); err != nil {
		return record.Media{}, err
	}
	return engine.MediaCountsContext(context.Background(), req, proc, v.tools.FFmpeg)
}

// close removes the clips.
func (v *videoMaker) close() {
	if v.dir != "" {
		os.RemoveAll(v.dir)
	}
}
