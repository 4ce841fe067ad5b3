package video

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests check the bounds a clip cannot talk its way past: the
// frames kept whatever its timestamps say, ffmpeg's log lines it can
// forge, a frame size that changes, and the decoder's runs after a time
// limit.

// lateClip encodes a 64x48 VP9 WebM of secs seconds at 30 fps whose
// timestamps start at offset seconds, with the container's Duration
// rewritten to secs, as a crafted file would state it (our own probe and
// ffprobe then see a short clip starting late).
func lateClip(t *testing.T, tl *Tools, offset, secs float64) (path string, data []byte) {
	t.Helper()
	ftoa := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	path = filepath.Join(t.TempDir(), "late.webm")
	ffmpegRun(t, tl.FFmpeg, "-v", "error", "-nostdin", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=30:duration="+ftoa(secs),
		"-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-output_ts_offset", ftoa(offset), path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Info/Duration: ID 0x4489, size 8, a float64 in milliseconds.
	i := bytes.Index(data, []byte{0x44, 0x89, 0x88})
	if i < 0 {
		t.Fatal("the clip states no 8-byte Duration")
	}
	binary.BigEndian.PutUint64(data[i+3:], math.Float64bits(secs*1000))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out := string(ffmpegRun(t, tl.FFprobe, "-v", "error", "-show_entries", "format=duration:stream=start_time", "-of", "compact", path))
	if !strings.Contains(out, "start_time="+ftoa(offset)) || !strings.Contains(out, "duration="+ftoa(secs)) {
		t.Fatalf("ffprobe does not see a %v s clip starting at %v s:\n%s", secs, offset, out)
	}
	return path, data
}

// TestDecodeLateStart: the reference counts kept frames from time 0, so a
// clip whose timestamps start at T keeps every frame until kept/2 catches
// up with T. A clip starting a little late is decoded exactly as the
// reference decodes it; one starting at 1000 s (which would keep all its
// 300 frames, and a longer or faster one without bound) is refused, saying
// why, before more frames than a 60 s clip starting 10 s late are held.
func TestDecodeLateStart(t *testing.T) {
	tl := tools(t)
	path, data := lateClip(t, tl, 1.5, 3)
	got, err := tl.Decode(context.Background(), data, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	want, times, _ := reference(t, tl, path, 64, 48, false)
	if len(got.Frames) != len(want) {
		t.Fatalf("%d frames kept, the reference keeps %d", len(got.Frames), len(want))
	}
	if len(want) <= 7 || times[0] != 1.5 {
		t.Fatalf("the reference keeps %d frames from %v s: the clip does not start late", len(want), times[0])
	}
	for i := range want {
		if got.Times[i] != times[i] || !bytes.Equal(got.Frames[i].Pix, want[i]) {
			t.Errorf("frame %d (%v s) differs from the reference's (%v s)", i, got.Times[i], times[i])
		}
	}

	_, data = lateClip(t, tl, 1000, 10)
	c, err := tl.Decode(context.Background(), data, DefaultOptions())
	if !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "timestamps start at 1000 s: more than 141 frames") {
		n := -1
		if c != nil {
			n = len(c.Frames)
		}
		t.Errorf("clip starting at 1000 s: %d frames, error %v; want ErrTooLong: timestamps start at 1000 s: more than 141 frames", n, err)
	}
}

// TestFrameCap: the most frames one run may keep, and why more are
// refused: the reference's own bound for a clip starting at its stated
// start, up to that of a clip starting startSlackSeconds late, and never
// over maxFrameBytes.
func TestFrameCap(t *testing.T) {
	o := DefaultOptions()
	unbounded := o
	unbounded.MaxSeconds = 0
	for _, c := range []struct {
		start float64
		w, h  int
		o     Options
		want  int
		msg   string
	}{
		{0, 512, 512, o, 121, "longer than 60 s"},
		{0.25, 512, 512, o, 121, "longer than 60 s"},
		{1.5, 512, 512, o, 124, "longer than 60 s"},
		{10, 512, 512, o, 141, "longer than 60 s"},
		{10.5, 512, 512, o, 141, "timestamps start at 10.5 s: more than 141 frames"},
		{1e300, 512, 512, o, 141, "timestamps start at 1e+300 s"},
		{0, 512, 512, unbounded, 682, "over 512 MiB of frames"},
		{0, 8192, 8192, o, 2, "more than 2 frames of 8192x8192"},
	} {
		n, err := frameCap(streams{start: c.start}, c.w, c.h, c.o)
		if n != c.want || !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("start %v, %dx%d, MaxSeconds %v: %d frames (%v), want %d (%s)", c.start, c.w, c.h, c.o.MaxSeconds, n, err, c.want, c.msg)
		}
		if n*c.w*c.h*3 > maxFrameBytes {
			t.Errorf("start %v, %dx%d: %d frames hold more than %d bytes", c.start, c.w, c.h, n, maxFrameBytes)
		}
	}
}

// goldenClip is the small WebM (VP9 + Opus, 98x62) of testdata/video.
func goldenClip(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, "vp9_opus.webm"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// tagOf is shell that sets $tag to the showinfo instance named in ffmpeg's
// arguments (what a fake ffmpeg needs to speak as the real one). The fakes
// below answer only the frames' run (-vf); the soundtrack's sleeps until
// it is killed.
const tagOf = `tag=; for a in "$@"; do case "$a" in *showinfo@*) tag=$(echo "$a" | sed 's/.*\(showinfo@[0-9a-z]*\).*/\1/');; esac; done
`

// TestDecodeForgedShowinfo: lines a clip can put in ffmpeg's log (a
// demuxer printing a codec ID string with newlines in it) that look like
// showinfo's are not read as frames or time bases: only lines of the
// instance named with this run's random tag count, from the address that
// logged its first time base.
func TestDecodeForgedShowinfo(t *testing.T) {
	real := tools(t)
	data := goldenClip(t)
	want, err := real.Decode(context.Background(), data, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	frame := `n:   0 pts:      0 pts_time:0       pos:      1 fmt:yuv420p sar:1/1 s:98x62 i:P iskey:1 type:I checksum:0 plane_checksum:[0] mean:[0] stdev:[0]`
	forged := `echo '[Parsed_showinfo_1 @ 0x55d0c0a4b2c0] config in time_base: 1/1, frame_rate: 1/1' >&2
echo '[Parsed_showinfo_1 @ 0x55d0c0a4b2c0] ` + frame + `' >&2
echo '[showinfo@clef0000000000000000 @ 0x55d0c0a4b2c0] config in time_base: 1/1, frame_rate: 1/1' >&2
echo '[showinfo@clef0000000000000000 @ 0x55d0c0a4b2c0] ` + frame + `' >&2
`
	// Before ffmpeg's own lines, untagged and wrongly tagged; after them,
	// with the right tag from another address.
	tl := &Tools{FFmpeg: fakeFFmpeg(t, tagOf+forged+`'`+real.FFmpeg+`' "$@"; rc=$?
[ -n "$tag" ] && echo "[$tag @ 0x1] `+frame+`" >&2
exit $rc`), FFprobe: real.FFprobe}
	got, err := tl.Decode(context.Background(), data, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Frames) != len(want.Frames) {
		t.Fatalf("%d frames, want %d", len(got.Frames), len(want.Frames))
	}
	for i := range want.Frames {
		if got.Times[i] != want.Times[i] || !bytes.Equal(got.Frames[i].Pix, want.Frames[i].Pix) {
			t.Errorf("frame %d differs", i)
		}
	}
}

// TestDecodeSizeChangeStopsFFmpeg: a kept frame whose size is not the one
// ffprobe read stops ffmpeg at once (a refusal naming both sizes), rather
// than letting it decode on until it ends or the time limit.
func TestDecodeSizeChangeStopsFFmpeg(t *testing.T) {
	script := tagOf + `case " $* " in *" -vf "*) ;; *) exec sleep 60;; esac
echo "[$tag @ 0x5581c5d0c8c0] config in time_base: 1/1000, frame_rate: 30/1" >&2
echo "[$tag @ 0x5581c5d0c8c0] n:   0 pts:      7 pts_time:0.007 pos: 1 fmt:yuv420p sar:1/1 s:7680x4320 i:P iskey:1 type:I checksum:0" >&2
sleep 60`
	tl := &Tools{FFmpeg: fakeFFmpeg(t, script), FFprobe: fakeFFmpeg(t, fakeProbe)}
	o := DefaultOptions()
	o.Timeout = 5 * time.Second
	_, err := tl.Decode(context.Background(), goldenClip(t), o)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "the frame size changes from 98x62 to 7680x4320 mid-stream") {
		t.Errorf("error %v, want ErrCorrupt: the frame size changes from 98x62 to 7680x4320", err)
	}
}

// TestDecodeNoRetryAfterTimeout: a run killed at the time limit is
// reported as such, even when what it logged before would have ffmpeg
// run again (here a time base other than the stream's): no second run is
// started with a context that has ended.
func TestDecodeNoRetryAfterTimeout(t *testing.T) {
	script := tagOf + `case " $* " in *" -vf "*) ;; *) exec sleep 60;; esac
echo "[$tag @ 0x5581c5d0c8c0] config in time_base: 1/7, frame_rate: 30/1" >&2
echo "[Parsed_showinfo_1 @ 0x5581c5d0c8c0] config in time_base: 1/7, frame_rate: 30/1" >&2
sleep 60`
	tl := &Tools{FFmpeg: fakeFFmpeg(t, script), FFprobe: fakeFFmpeg(t, fakeProbe)}
	o := DefaultOptions()
	o.Timeout = 300 * time.Millisecond
	_, err := tl.Decode(context.Background(), goldenClip(t), o)
	if !errors.Is(err, ErrDecoder) || !strings.Contains(err.Error(), "decoding ran past its 300ms limit; ffmpeg was killed") {
		t.Errorf("error %v, want ErrDecoder: decoding ran past its 300ms limit; ffmpeg was killed", err)
	}
	// The caller's own end is its error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	o.Timeout = time.Minute
	if _, err := tl.Decode(ctx, goldenClip(t), o); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller's deadline: error %v, want context.DeadlineExceeded", err)
	}
}

// TestProbeOutputTooLarge: ffprobe writing more than maxProbeOutput is
// stopped and reported as such, not as a crash.
func TestProbeOutputTooLarge(t *testing.T) {
	tl := &Tools{FFmpeg: fakeFFmpeg(t, "exit 1"), FFprobe: fakeFFmpeg(t, `head -c 3000000 /dev/zero; sleep 60`)}
	_, err := tl.Decode(context.Background(), goldenClip(t), DefaultOptions())
	if !errors.Is(err, ErrDecoder) || !strings.Contains(err.Error(), "ffprobe's output is too large") {
		t.Errorf("error %v, want ErrDecoder: ffprobe's output is too large", err)
	}
}

// TestDecodeSlots: with every place of Tools.Slots taken, Decode waits and
// starts no process; when its context ends first, that is its error.
func TestDecodeSlots(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "started")
	tl := &Tools{FFmpeg: fakeFFmpeg(t, "touch "+mark+"\nexit 1"), FFprobe: fakeFFmpeg(t, "touch "+mark+"\n"+fakeProbe),
		Slots: make(chan struct{}, 1)}
	tl.Slots <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := tl.Decode(ctx, goldenClip(t), DefaultOptions()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a place: error %v, want context.DeadlineExceeded", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a process ran without a place")
	}
	<-tl.Slots
	if _, err := tl.Decode(context.Background(), goldenClip(t), DefaultOptions()); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("with a place free: error %v, want the fake ffmpeg's failure", err)
	}
	if len(tl.Slots) != 0 {
		t.Error("Decode kept its place")
	}
}
