package video

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/clefrt/clef/engine/media"
)

// How a clip is decoded, and why each step is as it is:
//
//  1. Probe (our own, probe.go): the container must be MP4/QuickTime or
//     WebM/Matroska; its stated duration past MaxSeconds is refused before
//     any process starts. The demuxer is then forced (-f mov / -f matroska)
//     so ffmpeg never picks another one from the content (concat, hls,
//     image2...), and only the pipe protocol (or, for a file, the file
//     protocol) is allowed.
//  2. ffprobe reads the streams: the first video stream's size, pixel
//     format and time base, whether there is an audio stream, and the
//     duration libavformat sees (refused past MaxSeconds).
//  3. Two ffmpeg runs, at the same time: the frames and the soundtrack.
//
// Frames, as the reference makes them with PyAV 10: the first video stream
// decoded; a frame kept when its time, float(pts)·num/den in seconds, is
// at least kept/FPS − 1e-6 (kept: the frames kept before it), which the
// select filter evaluates with the same double arithmetic (the time base is
// written into the expression); timestamps as decoded (-copyts: ffmpeg
// would otherwise shift them by the file's start time) and nothing
// duplicated or dropped (-fps_mode passthrough); no rotation
// (-noautorotate: PyAV does not rotate). Each kept frame is converted to
// RGB24 by one swscale call, as VideoFrame.to_ndarray(format="rgb24",
// width, height) makes one: PyAV's reformatter asks swscale for
// SWS_BILINEAR (its default interpolation; ffmpeg's scale filter would
// otherwise use bicubic) and leaves swscale's colour defaults in place,
// that is BT.601 coefficients, and limited range unless the decoder's
// pixel format is a JPEG-range one (yuvj*), whatever the stream's colour
// tags say. The scale filter is given the same: in_color_matrix=bt601 and
// in_range=tv, or pc for yuvj* formats.
//
// The soundtrack, as PyAV's AudioResampler(format="flt", layout="mono",
// rate=16000) gives it: the first audio stream decoded and passed through
// one libswresample context with default options (mono downmix, 16 kHz),
// flushed at the end; ffmpeg's -ac 1 -ar 16000 -f f32le builds the same
// aresample filter.

// maxSourcePixels bounds a stream's frame size (width × height) before
// decoding: 8192 × 8192.
const maxSourcePixels = 1 << 26

// maxFramesUnbounded caps the frames kept when Options.MaxSeconds is 0
// (no limit): an hour at 2 fps.
const maxFramesUnbounded = 7200

// audioSlackSeconds is how far a soundtrack may run past MaxSeconds (the
// resampler's flush, an encoder's padding) before it is refused.
const audioSlackSeconds = 0.1

// maxProbeOutput bounds ffprobe's JSON.
const maxProbeOutput = 1 << 20

// Decode decodes one clip: the kept frames (Options.FPS, scaled down to at
// most Options.MaxFramePixels with even sides), their times, and the
// soundtrack when Options.Audio is set and the clip has one that decodes.
// A zero MaxFramePixels keeps every frame's size, a zero MaxSeconds and a
// zero Timeout set no limit. Its errors wrap ErrCorrupt, ErrNoVideoStream,
// ErrTooLong or ErrDecoder with a message for the refusal; when ctx ends,
// its error is returned.
func (t *Tools) Decode(ctx context.Context, data []byte, o Options) (*Clip, error) {
	if !(o.FPS > 0 && o.FPS <= 1000) || math.IsNaN(o.MaxSeconds) || o.MaxSeconds < 0 {
		return nil, fmt.Errorf("video: invalid options (FPS %v, MaxSeconds %v)", o.FPS, o.MaxSeconds)
	}
	c, err := Probe(data)
	if err != nil {
		return nil, err
	}
	if o.MaxSeconds > 0 && c.Duration > o.MaxSeconds {
		return nil, tooLongErr(c.Duration, o.MaxSeconds)
	}
	if t.Slots != nil {
		// The wait for a place is not part of the decoder's time limit.
		select {
		case t.Slots <- struct{}{}:
			defer func() { <-t.Slots }()
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.Timeout, errTimedOut)
		defer cancel()
	}
	in := &input{data: data, url: "pipe:0", whitelist: "pipe", format: "matroska"}
	if c.Format == "mp4" {
		in.format = "mov"
	}
	if c.MoovAfterMdat {
		// The mov demuxer must seek back to the media data after reading
		// moov at the end, which a pipe cannot do.
		cleanup, err := in.toFile()
		if err != nil {
			return nil, err
		}
		defer cleanup()
	}
	s, err := t.probeStreams(ctx, *in, o)
	if err != nil {
		return nil, err
	}
	if o.MaxSeconds > 0 && s.duration > o.MaxSeconds {
		return nil, tooLongErr(s.duration, o.MaxSeconds)
	}
	frames, times, samples, err := t.decodeStreams(ctx, in, s, o)
	if err == errPipeSeek {
		// An MP4 whose sample table points back at data the pipe has
		// already passed (on a pipe the mov demuxer reads samples in file
		// order and cannot seek back): read it from a file instead.
		if ctx.Err() != nil {
			return nil, ended(ctx, o.Timeout, "ffmpeg")
		}
		cleanup, ferr := in.toFile()
		if ferr != nil {
			return nil, ferr
		}
		defer cleanup()
		frames, times, samples, err = t.decodeStreams(ctx, in, s, o)
	}
	if err != nil {
		return nil, err
	}
	clip := &Clip{Frames: frames, Times: times, Width: s.width, Height: s.height, Format: c.Format}
	if len(samples) > 0 {
		clip.Audio = &media.Clip{Samples: samples}
	}
	switch {
	case s.duration > 0:
		clip.Duration = s.duration
	case c.Duration > 0:
		clip.Duration = c.Duration
	default:
		clip.Duration = max(times[len(times)-1], float64(len(samples))/media.SampleRate)
	}
	return clip, nil
}

// decodeStreams runs the two ffmpeg processes, frames and soundtrack, at
// the same time (a failure of the first stops the second).
func (t *Tools) decodeStreams(ctx context.Context, in *input, s streams, o Options) ([]*media.Image, []float64, []float32, error) {
	var (
		wg         sync.WaitGroup
		frames     []*media.Image
		times      []float64
		samples    []float32
		vErr, aErr error
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		frames, times, vErr = t.frames(runCtx, *in, s, o)
		if vErr != nil {
			stop() // no use decoding the soundtrack
		}
	}()
	if o.Audio && s.audio {
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples, aErr = t.soundtrack(runCtx, *in, o)
		}()
	}
	wg.Wait()
	if vErr != nil {
		return nil, nil, nil, vErr
	}
	if aErr != nil {
		return nil, nil, nil, aErr
	}
	return frames, times, samples, nil
}

// errPipeSeek: the demuxer needed to seek back in a clip read from a pipe.
var errPipeSeek = errors.New("the demuxer could not seek in the pipe")

// readWatch follows what ffmpeg says about reading its input. ffmpeg treats
// a read error as the end of the input (and exits 0), so without this a
// damaged clip would come back cut short; PyAV raises on it.
type readWatch struct {
	url     string
	partial bool   // the mov demuxer could not seek to a sample
	failed  string // ffmpeg's report of a read error
}

func (w *readWatch) see(l string) {
	if strings.Contains(l, ": partial file") {
		w.partial = true
	}
	if w.failed == "" && strings.HasPrefix(l, w.url+": ") {
		w.failed = strings.TrimPrefix(l, w.url+": ")
	}
}

// err is the run's verdict: errPipeSeek when a pipe was the trouble, a
// refusal when the data could not be read to its end.
func (w *readWatch) err() error {
	switch {
	case w.partial && w.url == "pipe:0":
		return errPipeSeek
	case w.failed != "":
		return corrupt("the video's data cannot be read to its end: " + w.failed)
	case w.partial:
		return corrupt("the video's data cannot be read to its end: a sample lies past the end of the file (truncated?)")
	}
	return nil
}

// tooLongErr is the refusal of a clip whose container states a duration
// past the limit.
func tooLongErr(d, limit float64) error {
	return tooLong(fmt.Sprintf("video is %s long, at most %s", seconds(d), seconds(limit)))
}

// seconds writes a duration for a message: "61.02 s", "60 s", "1e+300 s".
func seconds(s float64) string {
	return strconv.FormatFloat(math.Round(s*100)/100, 'g', -1, 64) + " s"
}

// streams is what ffprobe says about a clip.
type streams struct {
	width, height int
	codec         string
	pixFmt        string
	tbNum, tbDen  int64   // the video stream's time base
	start         float64 // the video stream's start time (0 when unknown)
	duration      float64 // the container's duration as libavformat sees it (0 when unknown)
	audio         bool    // there is an audio stream
}

// probeOutput is the part of ffprobe's JSON read here.
type probeOutput struct {
	Streams []struct {
		CodecType string `json:"codec_type"`
		CodecName string `json:"codec_name"`
		Width     int    `json:"width"`
		Height    int    `json:"height"`
		PixFmt    string `json:"pix_fmt"`
		TimeBase  string `json:"time_base"`
		StartTime string `json:"start_time"`
	} `json:"streams"`
	Format struct {
		Duration string `json:"duration"`
	} `json:"format"`
}

// probeStreams runs ffprobe on the clip.
func (t *Tools) probeStreams(ctx context.Context, in input, o Options) (streams, error) {
	args := append([]string{"-hide_banner", "-v", "error"}, in.args()...)
	args = append(args, "-show_entries",
		"stream=codec_type,codec_name,width,height,pix_fmt,time_base,start_time:format=duration", "-of", "json")
	p, err := start(ctx, "ffprobe", t.FFprobe, args, in, nil)
	if err != nil {
		return streams{}, err
	}
	out, rerr := io.ReadAll(io.LimitReader(p.stdout, maxProbeOutput+1))
	tooMuch := rerr == nil && len(out) > maxProbeOutput
	if tooMuch {
		p.kill()
	}
	werr := p.wait()
	switch {
	case tooMuch && p.parent.Err() == nil:
		// Killed by us, not crashed.
		return streams{}, decoderError(fmt.Sprintf("ffprobe's output is too large (over %d bytes): it was stopped", maxProbeOutput))
	case werr != nil:
		return streams{}, p.failure(werr, o.Timeout)
	}
	if rerr != nil {
		return streams{}, decoderError(fmt.Sprintf("reading ffprobe's output: %v", rerr))
	}
	var po probeOutput
	if err := json.Unmarshal(out, &po); err != nil {
		return streams{}, decoderError(fmt.Sprintf("ffprobe's output is not the JSON expected: %v", err))
	}
	var s streams
	found := false
	kinds := map[string]int{}
	for _, st := range po.Streams {
		kinds[st.CodecType]++
		switch st.CodecType {
		case "video":
			if found {
				continue
			}
			found = true
			s.width, s.height, s.codec, s.pixFmt = st.Width, st.Height, st.CodecName, st.PixFmt
			s.tbNum, s.tbDen, err = parseRational(st.TimeBase)
			if err != nil {
				return streams{}, corrupt(fmt.Sprintf("the video stream's time base %q is unusable", printable(st.TimeBase)))
			}
			s.start = parseSeconds(st.StartTime)
		case "audio":
			s.audio = true
		}
	}
	if !found {
		if len(po.Streams) == 0 {
			return streams{}, noVideo("the container holds no streams")
		}
		return streams{}, noVideo(fmt.Sprintf("the container holds no video stream (%s)", streamList(kinds)))
	}
	codec := s.codec
	if codec == "" {
		codec = "unknown"
	}
	if s.width <= 0 || s.height <= 0 {
		return streams{}, noVideo(fmt.Sprintf("the video stream (codec %s) has no frame size: it cannot be decoded", printable(codec)))
	}
	if int64(s.width)*int64(s.height) > maxSourcePixels {
		return streams{}, corrupt(fmt.Sprintf("video frames are %dx%d, at most %d pixels", s.width, s.height, maxSourcePixels))
	}
	s.duration = parseSeconds(po.Format.Duration)
	return s, nil
}

// streamList names the stream kinds found: "1 audio stream".
func streamList(kinds map[string]int) string {
	var parts []string
	for _, k := range []string{"audio", "subtitle", "data", "attachment"} {
		if n := kinds[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s stream%s", n, k, map[bool]string{true: "s"}[n > 1]))
		}
	}
	if len(parts) == 0 {
		return "no stream ffmpeg can use"
	}
	return "only " + strings.Join(parts, ", ")
}

// parseRational reads "num/den" with both positive.
func parseRational(s string) (int64, int64, error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errors.New("not a fraction")
	}
	num, err1 := strconv.ParseInt(a, 10, 32)
	den, err2 := strconv.ParseInt(b, 10, 32)
	if err1 != nil || err2 != nil || num <= 0 || den <= 0 {
		return 0, 0, errors.New("not a positive fraction")
	}
	return num, den, nil
}

// parseSeconds reads a duration ffprobe printed; 0 for "N/A", absent, or
// anything not finite and positive.
func parseSeconds(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// ScaledSize is the size a width × height frame is kept at: itself when it
// has at most maxPixels pixels (or maxPixels is 0), else scaled down by
// s = √(maxPixels / (width·height)), each side rounded down to an even
// number (at least 2): W = 2·⌊⌊width·s⌋/2⌋, H = 2·⌊⌊height·s⌋/2⌋. s is the
// largest uniform scale with (width·s)·(height·s) ≤ maxPixels, and
// rounding each side down keeps W·H at or under that product; the aspect
// ratio is kept to within the rounding. (If floating-point rounding ever
// left W·H above maxPixels, the longer side is shortened by 2 until it
// fits.)
func ScaledSize(width, height, maxPixels int) (int, int) {
	if maxPixels <= 0 || width*height <= maxPixels {
		return width, height
	}
	s := math.Sqrt(float64(maxPixels) / (float64(width) * float64(height)))
	w := max(2, int(float64(width)*s)/2*2)
	h := max(2, int(float64(height)*s)/2*2)
	for w*h > maxPixels && (w > 2 || h > 2) {
		if w >= h && w > 2 {
			w -= 2
		} else {
			h -= 2
		}
	}
	return w, h
}

// kept is one frame the select filter kept, as showinfo reports it.
type kept struct {
	n             int // showinfo's count of the frames it saw
	pts           int64
	fmt           string
	width, height int
}

// showinfo's lines, after its "[showinfo@<tag> @ 0x<address>] " prefix: the
// time base it was configured with, and one line per frame passing (the
// frames the select filter kept).
var (
	tbRe    = regexp.MustCompile(`^config in time_base: (\d+)/(\d+),`)
	frameRe = regexp.MustCompile(`^n:\s*(\d+) pts:\s*(-?\d+) .*? fmt:(\S+) .*? s:(\d+)x(\d+) `)
)

// showinfoLog reads the lines of one showinfo instance out of ffmpeg's
// log. A clip can put text of its own in the log (a demuxer naming an
// unknown codec ID prints the file's string, newlines and all), so a line
// counts only when it carries the instance's name, a tag drawn at random
// for each run that the file cannot know, and the address of the instance
// that logged the first such "config in time_base" line.
type showinfoLog struct {
	prefix string // "[showinfo@<tag> @ 0x"
	addr   string // the instance's address, once seen
}

// newShowinfoLog draws the tag; name is the filter to put in the chain.
func newShowinfoLog() (l *showinfoLog, name string) {
	var b [8]byte
	rand.Read(b[:])
	name = "showinfo@clef" + hex.EncodeToString(b[:])
	return &showinfoLog{prefix: "[" + name + " @ 0x"}, name
}

// body returns what the instance logged on line l, and whether l is its.
func (s *showinfoLog) body(l string) (string, bool) {
	rest, ok := strings.CutPrefix(l, s.prefix)
	if !ok {
		return "", false
	}
	addr, body, ok := strings.Cut(rest, "] ")
	if !ok || addr == "" || strings.Trim(addr, "0123456789abcdefABCDEF") != "" {
		return "", false
	}
	if s.addr == "" && tbRe.MatchString(body) {
		s.addr = addr
	}
	return body, addr == s.addr
}

// maxFrameBytes bounds the RGB frames one clip may hold: 512 MiB.
const maxFrameBytes = 512 << 20

// startSlackSeconds is how late a clip's timestamps may start and the clip
// still be decoded as the reference does. The reference keeps frame k when
// its time is at least k/FPS − 1e-6, counting from time 0 whatever the
// first frame's time T, so it keeps every frame until k/FPS catches up
// with T: about FPS·T frames more than the clip's length calls for. A clip
// starting later than this would make that many frames, so it is refused.
const startSlackSeconds = 10

// frameCap is how many frames the run for s may keep, and the refusal when
// there are more: the most the reference's rule can keep of a clip that
// starts at s.start and lasts at most MaxSeconds, but no more than a clip
// starting startSlackSeconds late keeps (whatever the stream's start time,
// which the file sets), and no more than maxFrameBytes of w × h frames.
func frameCap(s streams, w, h int, o Options) (int, error) {
	limit, why := maxFramesUnbounded, tooLong(fmt.Sprintf("video has more than %d frames to keep at %v fps", maxFramesUnbounded, o.FPS))
	if o.MaxSeconds > 0 {
		exact := math.Floor((max(s.start, 0)+o.MaxSeconds+1e-6)*o.FPS) + 1
		slack := math.Floor((o.MaxSeconds+startSlackSeconds+1e-6)*o.FPS) + 1
		if exact <= slack {
			limit = int(exact)
			why = tooLong(fmt.Sprintf("video has more than %d frames to keep at %v fps: longer than %s", limit, o.FPS, seconds(o.MaxSeconds)))
		} else {
			limit = int(slack)
			why = tooLong(fmt.Sprintf("video timestamps start at %s: more than %d frames would be kept at %v fps (a frame is kept while its time is at least the frames kept so far / %v, counted from 0 s)",
				seconds(s.start), limit, o.FPS, o.FPS))
		}
	}
	if n := maxFrameBytes / (w * h * 3); n < limit {
		limit = n
		why = tooLong(fmt.Sprintf("video has more than %d frames of %dx%d to keep: over %d MiB of frames", n, w, h, maxFrameBytes>>20))
	}
	return limit, why
}

// frames runs ffmpeg for the kept frames.
func (t *Tools) frames(ctx context.Context, in input, s streams, o Options) ([]*media.Image, []float64, error) {
	w, h := ScaledSize(s.width, s.height, o.MaxFramePixels)
	rng := "tv"
	if strings.HasPrefix(s.pixFmt, "yuvj") {
		rng = "pc"
	}
	fps := strconv.FormatFloat(o.FPS, 'g', -1, 64)
	maxFrames, tooMany := frameCap(s, w, h, o)
	mode := []string{"-fps_mode", "passthrough"}
	retimed := false
	for {
		if ctx.Err() != nil {
			// A run ended by the time limit or the caller: no other try.
			return nil, nil, ended(ctx, o.Timeout, "ffmpeg")
		}
		log, showinfo := newShowinfoLog()
		chain := fmt.Sprintf("select='gte(pts*%d/%d,selected_n/%s-1e-6)',%s,"+
			"scale=%d:%d:flags=bilinear:in_color_matrix=bt601:in_range=%s,format=rgb24",
			s.tbNum, s.tbDen, fps, showinfo, w, h, rng)
		args := append([]string{"-hide_banner", "-nostats", "-loglevel", "info", "-nostdin", "-noautorotate", "-copyts"}, t.threads()...)
		args = append(args, in.args()...)
		args = append(args, "-map", "0:v:0", "-an", "-sn", "-dn", "-vf", chain)
		args = append(args, mode...)
		args = append(args, "-f", "rawvideo", "pipe:1")
		frames, infos, tb, err := t.runFrames(ctx, in, args, log, s, w, h, maxFrames, tooMany, o)
		if err == errNoFPSMode && mode[0] == "-fps_mode" {
			mode = []string{"-vsync", "passthrough"} // FFmpeg before 5.1
			continue
		}
		if tb[0] > 0 && tb[1] > 0 && tb[0]*s.tbDen != tb[1]*s.tbNum && !retimed {
			// This ffmpeg filters in another time base than the
			// stream's, so the selection was wrong: select again with the
			// times written in the filter's time base.
			s.tbNum, s.tbDen, retimed = tb[0], tb[1], true
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		times, err := checkKept(frames, infos, tb, s, o)
		if err != nil {
			return nil, nil, err
		}
		return frames, times, nil
	}
}

// threads are the options bounding an ffmpeg run's threads (Tools.Threads).
func (t *Tools) threads() []string {
	if t.Threads <= 0 {
		return nil
	}
	n := strconv.Itoa(t.Threads)
	return []string{"-threads", n, "-filter_threads", n}
}

// errNoFPSMode: this ffmpeg predates -fps_mode (FFmpeg 5.1); -vsync is
// its name there.
var errNoFPSMode = errors.New("ffmpeg has no -fps_mode option")

// runFrames runs one ffmpeg for the frames and reads them: at most
// maxFrames frames of w × h RGB24 (more is the refusal tooMany), so the
// memory used is known before. A kept frame whose size is not the
// stream's stops ffmpeg at once.
func (t *Tools) runFrames(ctx context.Context, in input, args []string, log *showinfoLog, s streams, w, h, maxFrames int, tooMany error, o Options) ([]*media.Image, []kept, [2]int64, error) {
	var (
		infos []kept
		tb    [2]int64
	)
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	oldFFmpeg := false
	watch := &readWatch{url: in.url}
	line := func(l string) {
		watch.see(l)
		if strings.HasPrefix(l, "Unrecognized option 'fps_mode'") {
			oldFFmpeg = true
		}
		body, ok := log.body(l)
		if !ok {
			return
		}
		if m := frameRe.FindStringSubmatch(body); m != nil {
			if len(infos) <= maxFrames {
				n, _ := strconv.Atoi(m[1])
				pts, _ := strconv.ParseInt(m[2], 10, 64)
				fw, _ := strconv.Atoi(m[4])
				fh, _ := strconv.Atoi(m[5])
				infos = append(infos, kept{n: n, pts: pts, fmt: m[3], width: fw, height: fh})
				if fw != s.width || fh != s.height {
					// Refused at once: the decoder need not go on making
					// frames of a size nobody checked.
					stop(sizeChange(s, fw, fh))
				}
			}
		} else if m := tbRe.FindStringSubmatch(body); m != nil && tb == [2]int64{} {
			num, err1 := strconv.ParseInt(m[1], 10, 32)
			den, err2 := strconv.ParseInt(m[2], 10, 32)
			if err1 == nil && err2 == nil {
				tb = [2]int64{num, den}
			}
		}
	}
	p, err := start(ctx, "ffmpeg", t.FFmpeg, args, in, line)
	if err != nil {
		return nil, nil, tb, err
	}
	size := w * h * 3
	var (
		frames  []*media.Image
		readErr error
	)
	for {
		buf := make([]byte, size)
		_, err := io.ReadFull(p.stdout, buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
		if len(frames) == maxFrames {
			readErr = tooMany
			break
		}
		frames = append(frames, &media.Image{Width: w, Height: h, Pix: buf})
	}
	if readErr != nil {
		p.kill()
	}
	werr := p.wait()
	var re *refusal
	switch {
	case errors.As(context.Cause(ctx), &re): // the frame size changed
		return nil, nil, tb, context.Cause(ctx)
	case errors.As(readErr, &re):
		return nil, nil, tb, readErr
	case werr != nil && oldFFmpeg && !p.hard(werr):
		return nil, nil, tb, errNoFPSMode
	case werr != nil:
		return nil, nil, tb, p.failure(werr, o.Timeout)
	case readErr == io.ErrUnexpectedEOF:
		return nil, nil, tb, decoderError("ffmpeg's output ends inside a frame")
	case readErr != nil:
		return nil, nil, tb, decoderError(fmt.Sprintf("reading ffmpeg's frames: %v", readErr))
	}
	if err := watch.err(); err != nil {
		return nil, nil, tb, err
	}
	return frames, infos, tb, nil
}

// sizeChange is the refusal of a clip whose frames change size mid-stream.
func sizeChange(s streams, w, h int) error {
	return corrupt(fmt.Sprintf("the frame size changes from %dx%d to %dx%d mid-stream", s.width, s.height, w, h))
}

// checkKept matches the frames read with showinfo's reports and returns
// their times: float(pts)·num/den, as PyAV's frame.time computes it.
func checkKept(frames []*media.Image, infos []kept, tb [2]int64, s streams, o Options) ([]float64, error) {
	if len(frames) == 0 {
		return nil, corrupt("no video frame could be decoded (damaged or empty stream?)")
	}
	if len(infos) != len(frames) {
		return nil, decoderError(fmt.Sprintf("ffmpeg wrote %d frames but reported %d", len(frames), len(infos)))
	}
	if tb[0]*s.tbDen != tb[1]*s.tbNum || tb[1] == 0 {
		return nil, decoderError(fmt.Sprintf("ffmpeg filtered in time base %d/%d, not the stream's %d/%d", tb[0], tb[1], s.tbNum, s.tbDen))
	}
	times := make([]float64, len(infos))
	for i, k := range infos {
		if k.n != i {
			return nil, decoderError(fmt.Sprintf("ffmpeg reported kept frame %d as number %d", i, k.n))
		}
		if k.width != s.width || k.height != s.height {
			return nil, sizeChange(s, k.width, k.height)
		}
		if strings.HasPrefix(k.fmt, "yuvj") != strings.HasPrefix(s.pixFmt, "yuvj") {
			return nil, corrupt(fmt.Sprintf("the pixel format changes from %s to %s mid-stream", printable(s.pixFmt), printable(k.fmt)))
		}
		times[i] = float64(k.pts) * float64(s.tbNum) / float64(s.tbDen)
		if o.MaxSeconds > 0 && times[i]-times[0] > o.MaxSeconds {
			return nil, tooLong(fmt.Sprintf("video runs past %s (a frame at %s)", seconds(o.MaxSeconds), seconds(times[i])))
		}
	}
	return times, nil
}

// soundtrack runs ffmpeg for the first audio stream as float32 mono at 16
// kHz. A soundtrack ffmpeg cannot decode is none (nil, nil), as the
// reference hears a video only when its audio decodes; a decoder past the
// time limit or killed by a signal is an error.
func (t *Tools) soundtrack(ctx context.Context, in input, o Options) ([]float32, error) {
	args := append([]string{"-hide_banner", "-nostats", "-loglevel", "error", "-nostdin"}, t.threads()...)
	args = append(args, in.args()...)
	args = append(args, "-map", "0:a:0", "-vn", "-sn", "-dn", "-ac", "1", "-ar", strconv.Itoa(media.SampleRate), "-f", "f32le", "pipe:1")
	watch := &readWatch{url: in.url}
	p, err := start(ctx, "ffmpeg", t.FFmpeg, args, in, watch.see)
	if err != nil {
		return nil, err
	}
	maxSeconds := o.MaxSeconds
	if maxSeconds <= 0 {
		maxSeconds = maxFramesUnbounded / o.FPS
	}
	maxBytes := 4 * int64(math.Ceil((maxSeconds+audioSlackSeconds)*media.SampleRate))
	raw, rerr := io.ReadAll(io.LimitReader(p.stdout, maxBytes+1))
	if rerr == nil && int64(len(raw)) > maxBytes {
		p.kill()
		rerr = tooLong(fmt.Sprintf("the soundtrack runs past %s", seconds(maxSeconds)))
	}
	werr := p.wait()
	var re *refusal
	switch {
	case errors.As(rerr, &re):
		return nil, rerr
	case werr != nil && p.hard(werr):
		return nil, p.failure(werr, o.Timeout)
	case werr != nil:
		return nil, nil // ffmpeg cannot decode the soundtrack: there is none
	case rerr != nil:
		return nil, decoderError(fmt.Sprintf("reading ffmpeg's soundtrack: %v", rerr))
	case len(raw)%4 != 0:
		return nil, decoderError("ffmpeg's soundtrack ends inside a sample")
	}
	if err := watch.err(); err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}
