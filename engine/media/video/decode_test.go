package video

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests need the ffmpeg and ffprobe executables (make deps installs
// them); without them they skip, saying so.

// tools finds ffmpeg, or skips the test.
func tools(t testing.TB) *Tools {
	t.Helper()
	tl, err := Find("")
	if err != nil {
		t.Skipf("skipping: this test decodes with FFmpeg, which is not installed here (%v)", err)
	}
	return tl
}

// clipDir holds the clips the tests encode, made once per test binary.
var (
	clipOnce sync.Once
	clipDir  string
	clipErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if clipDir != "" {
		os.RemoveAll(clipDir)
	}
	os.Exit(code)
}

// ffmpegRun runs the system ffmpeg (or ffprobe) and returns its stdout.
func ffmpegRun(t testing.TB, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// synthetic clips: lavfi's testsrc2 (moving colour patterns) with a sine
// soundtrack, BT.709-tagged as phones tag their videos.
var bt709 = []string{"-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv"}

// clip is one clip the tests encode.
type clip struct {
	name  string
	size  string  // WxH
	rate  int     // frames per second
	secs  float64 // duration
	codec []string
}

var e2eClips = []clip{
	// H.264 (B-frames) + AAC in MP4, moov at the end (read from a file).
	{"h264_322x242.mp4", "322x242", 30, 3, append([]string{"-c:v", "libx264", "-preset", "veryfast", "-crf", "28", "-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "64k"}, bt709...)},
	// The same, larger than 262,144 pixels, +faststart (read from a pipe).
	{"h264_800x600_faststart.mp4", "800x600", 25, 3, append([]string{"-c:v", "libx264", "-preset", "veryfast", "-crf", "28", "-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "64k", "-movflags", "+faststart"}, bt709...)},
	// VP9 + Opus in WebM, both sizes.
	{"vp9_322x242.webm", "322x242", 24, 3, append([]string{"-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "300k", "-pix_fmt", "yuv420p", "-c:a", "libopus", "-b:a", "48k"}, bt709...)},
	{"vp9_800x600.webm", "800x600", 30, 3, append([]string{"-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "500k", "-pix_fmt", "yuv420p", "-c:a", "libopus", "-b:a", "48k"}, bt709...)},
}

// encodeClips makes the end-to-end clips (and a few for the malformed
// table) in a temporary folder.
func encodeClips(t testing.TB, tl *Tools) string {
	clipOnce.Do(func() {
		dir, err := os.MkdirTemp("", "clef-video-test-")
		if err != nil {
			clipErr = err
			return
		}
		clipDir = dir
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		encode := func(name string, args ...string) {
			defer wg.Done()
			cmd := exec.Command(tl.FFmpeg, append(append([]string{"-v", "error", "-y", "-nostdin"}, args...), filepath.Join(dir, name))...)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("encoding %s: %v\n%s", name, err, out)
			}
		}
		for _, c := range e2eClips {
			wg.Add(1)
			go encode(c.name, append([]string{
				"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%s:rate=%d:duration=%v", c.size, c.rate, c.secs),
				"-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=440:sample_rate=44100:duration=%v", c.secs),
				"-ac", "2", "-shortest"}, c.codec...)...)
		}
		wg.Add(4)
		// Audio only, in MP4.
		go encode("audio_only.mp4", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100:duration=1", "-c:a", "aac")
		// 61 s, tiny, one frame a second: the container says 61 s.
		go encode("long_61s.mp4", "-f", "lavfi", "-i", "testsrc2=size=32x32:rate=1:duration=61", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p")
		// 61 s without a stated duration: WebM written to a pipe (as live
		// recorders write it), so only decoding can find its length.
		go encode("long_61s_live.webm", "-f", "lavfi", "-i", "testsrc2=size=32x32:rate=4:duration=61", "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-live", "1", "-f", "webm")
		// A soundtrack that cannot be decoded... is not made here; a clip
		// with video only:
		go encode("video_only.webm", "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10:duration=1", "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8")
		wg.Wait()
		close(errs)
		for err := range errs {
			clipErr = errors.Join(clipErr, err)
		}
	})
	if clipErr != nil {
		t.Fatal(clipErr)
	}
	return clipDir
}

func readClip(t testing.TB, dir, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// reference decodes a clip with ffmpeg and ffprobe on their own, as a
// check of Decode's plumbing: every frame's time from ffprobe
// -show_frames, the 2 fps rule applied here, every frame converted by
// ffmpeg (BT.601, limited range, bilinear, at the size given), and the
// soundtrack (withAudio) by a plain f32le run.
func reference(t *testing.T, tl *Tools, path string, w, h int, withAudio bool) (frames [][]byte, times []float64, samples []float32) {
	var fr struct {
		Frames []struct {
			PTS  *int64 `json:"pts"`
			BEts *int64 `json:"best_effort_timestamp"`
		} `json:"frames"`
		Streams []struct {
			TimeBase string `json:"time_base"`
		} `json:"streams"`
	}
	out := ffmpegRun(t, tl.FFprobe, "-v", "error", "-select_streams", "v:0", "-show_frames",
		"-show_entries", "frame=pts,best_effort_timestamp:stream=time_base", "-of", "json", path)
	if err := json.Unmarshal(out, &fr); err != nil {
		t.Fatal(err)
	}
	if len(fr.Streams) != 1 {
		t.Fatalf("ffprobe: %d video streams", len(fr.Streams))
	}
	num, den, err := parseRational(fr.Streams[0].TimeBase)
	if err != nil {
		t.Fatal(err)
	}
	var keep []int
	for i, f := range fr.Frames {
		if f.PTS == nil || f.BEts == nil || *f.PTS != *f.BEts {
			t.Fatalf("frame %d: pts %v, best effort %v", i, f.PTS, f.BEts)
		}
		tm := float64(*f.PTS) * float64(num) / float64(den)
		if tm >= float64(len(keep))/2-1e-6 {
			keep = append(keep, i)
			times = append(times, tm)
		}
	}
	raw := ffmpegRun(t, tl.FFmpeg, "-v", "error", "-nostdin", "-noautorotate", "-i", path, "-map", "0:v:0",
		"-vf", fmt.Sprintf("scale=%d:%d:flags=bilinear:in_color_matrix=bt601:in_range=tv,format=rgb24", w, h),
		"-fps_mode", "passthrough", "-f", "rawvideo", "-")
	size := w * h * 3
	if len(raw) != size*len(fr.Frames) {
		t.Fatalf("ffmpeg wrote %d bytes, %d frames of %d expected", len(raw), len(fr.Frames), size)
	}
	for _, i := range keep {
		frames = append(frames, raw[i*size:(i+1)*size])
	}
	if !withAudio {
		return frames, times, nil
	}
	pcm := ffmpegRun(t, tl.FFmpeg, "-v", "error", "-nostdin", "-i", path, "-map", "0:a:0", "-ac", "1", "-ar", "16000", "-f", "f32le", "-")
	samples = make([]float32, len(pcm)/4)
	for i := range samples {
		samples[i] = math.Float32frombits(binary.LittleEndian.Uint32(pcm[4*i:]))
	}
	return frames, times, samples
}

// TestDecodeEndToEnd encodes clips with the system ffmpeg (H.264 + AAC in
// MP4, moov at the end and fast start; VP9 + Opus in WebM; 322x242 and
// 800x600), decodes them through Decode, and checks frames, times and
// samples against ffmpeg's own output obtained independently: identical.
func TestDecodeEndToEnd(t *testing.T) {
	tl := tools(t)
	dir := encodeClips(t, tl)
	for _, c := range e2eClips {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			data := readClip(t, dir, c.name)
			pc, err := Probe(data)
			if err != nil {
				t.Fatal(err)
			}
			wantMoovLast := strings.HasSuffix(c.name, ".mp4") && !strings.Contains(c.name, "faststart")
			if pc.MoovAfterMdat != wantMoovLast {
				t.Fatalf("Probe: MoovAfterMdat %v, want %v", pc.MoovAfterMdat, wantMoovLast)
			}
			// Temporary files go to a folder of the test's, to see that
			// none is left behind.
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			got, err := tl.Decode(context.Background(), data, DefaultOptions())
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("Decode left %d temporary files", len(left))
			}
			var sw, sh int
			fmt.Sscanf(c.size, "%dx%d", &sw, &sh)
			if got.Width != sw || got.Height != sh {
				t.Errorf("size %dx%d, want %dx%d", got.Width, got.Height, sw, sh)
			}
			if math.Abs(got.Duration-c.secs) > 0.1 {
				t.Errorf("duration %v, want about %v", got.Duration, c.secs)
			}
			w, h := got.Frames[0].Width, got.Frames[0].Height
			checkScaled(t, sw, sh, w, h, 262144)
			wantFrames, wantTimes, wantSamples := reference(t, tl, path, w, h, true)
			if len(got.Frames) != len(wantFrames) || len(got.Times) != len(wantTimes) {
				t.Fatalf("%d frames at %v, want %d at %v", len(got.Frames), got.Times, len(wantFrames), wantTimes)
			}
			if n := int(c.secs*2 + 0.5); len(got.Frames) != n {
				t.Errorf("%d frames kept from a %v s clip, want %d", len(got.Frames), c.secs, n)
			}
			for i := range wantFrames {
				if got.Times[i] != wantTimes[i] {
					t.Errorf("frame %d: time %v, want %v", i, got.Times[i], wantTimes[i])
				}
				im := got.Frames[i]
				if im.Width != w || im.Height != h || !bytes.Equal(im.Pix, wantFrames[i]) {
					t.Errorf("frame %d differs from ffmpeg's (%d of %d bytes)", i, countDiff(im.Pix, wantFrames[i]), len(wantFrames[i]))
				}
			}
			if got.Audio == nil {
				t.Fatal("no soundtrack")
			}
			if len(got.Audio.Samples) != len(wantSamples) {
				t.Fatalf("%d samples, want %d", len(got.Audio.Samples), len(wantSamples))
			}
			for i, v := range wantSamples {
				if math.Float32bits(got.Audio.Samples[i]) != math.Float32bits(v) {
					t.Fatalf("sample %d: %v, want %v", i, got.Audio.Samples[i], v)
				}
			}
			if n := len(wantSamples); math.Abs(float64(n)/16000-c.secs) > 0.1 {
				t.Errorf("%d samples for %v s", n, c.secs)
			}
		})
	}
}

// checkScaled checks a kept frame's size against the rule: unchanged when
// the frame has at most max pixels, else at most max pixels, even sides,
// the aspect ratio kept, and no more than one even step short per side.
func checkScaled(t *testing.T, w0, h0, w, h, max int) {
	t.Helper()
	if w0*h0 <= max {
		if w != w0 || h != h0 {
			t.Errorf("%dx%d kept as %dx%d, want it unchanged", w0, h0, w, h)
		}
		return
	}
	if w*h > max || w%2 != 0 || h%2 != 0 || w < 2 || h < 2 {
		t.Errorf("%dx%d scaled to %dx%d: want at most %d pixels and even sides", w0, h0, w, h, max)
	}
	s := math.Sqrt(float64(max) / float64(w0*h0))
	if float64(w) > float64(w0)*s || float64(w) <= float64(w0)*s-2 || float64(h) > float64(h0)*s || float64(h) <= float64(h0)*s-2 {
		t.Errorf("%dx%d scaled to %dx%d: want each side the largest even number at most side·%.6f", w0, h0, w, h, s)
	}
}

func countDiff(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}

// TestScaledSize checks the scale-down rule on known sizes and over a range
// of sizes: at most the pixels, even sides, the largest such even sides
// under the uniform scale.
func TestScaledSize(t *testing.T) {
	for _, c := range []struct{ w, h, ww, wh int }{
		{800, 600, 590, 442},
		{1920, 1080, 682, 384},
		{1080, 1920, 384, 682},
		{3840, 2160, 682, 384},
		{720, 400, 686, 380},
		{512, 512, 512, 512},
		{513, 512, 512, 510},
		{322, 242, 322, 242},
		{321, 241, 321, 241}, // not scaled: odd sides stay
		{100000, 3, 93476, 2},
	} {
		if w, h := ScaledSize(c.w, c.h, 262144); w != c.ww || h != c.wh {
			t.Errorf("ScaledSize(%d, %d) = %dx%d, want %dx%d", c.w, c.h, w, h, c.ww, c.wh)
		}
	}
	for w := 2; w <= 4096; w += 37 {
		for h := 2; h <= 4096; h += 41 {
			sw, sh := ScaledSize(w, h, 262144)
			checkScaled(t, w, h, sw, sh, 262144)
		}
	}
	if w, h := ScaledSize(5000, 4000, 0); w != 5000 || h != 4000 {
		t.Errorf("no limit: %dx%d", w, h)
	}
}

// TestDecodeMalformed: each bad clip is refused with the right sentinel
// and a message saying what is wrong.
func TestDecodeMalformed(t *testing.T) {
	tl := tools(t)
	dir := encodeClips(t, tl)
	mp4 := readClip(t, dir, "h264_800x600_faststart.mp4")
	mp4End := readClip(t, dir, "h264_322x242.mp4")
	webm := readClip(t, dir, "vp9_322x242.webm")
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x02\x00\x00\x00\x90\x91\x68\x36")
	garbage := append([]byte{}, mp4[:32]...) // ftyp (32 bytes in ffmpeg's MP4s)
	if string(garbage[4:8]) != "ftyp" || binary.BigEndian.Uint32(garbage) != 32 {
		t.Fatalf("unexpected first box % x", garbage[:8])
	}
	for i := 0; i < 4000; i++ {
		garbage = append(garbage, byte(i*7919>>3))
	}
	cases := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"truncated MP4 (fast start)", mp4[:len(mp4)/2], ErrCorrupt, "(truncated?)"},
		{"truncated MP4 (moov at the end)", mp4End[:len(mp4End)/2], ErrCorrupt, "(truncated?)"},
		{"garbage after a valid ftyp", garbage, ErrCorrupt, "no valid box at offset 32"},
		{"audio-only MP4", readClip(t, dir, "audio_only.mp4"), ErrNoVideoStream, "no video stream (only 1 audio stream)"},
		{"61 s clip", readClip(t, dir, "long_61s.mp4"), ErrTooLong, "video is 61 s long, at most 60 s"},
		{"61 s live WebM, no duration stated", readClip(t, dir, "long_61s_live.webm"), ErrTooLong, "more than 121 frames"},
		{"PNG labelled video", png, ErrCorrupt, "bytes are a PNG image, not an MP4 or WebM video"},
		{"empty", nil, ErrCorrupt, "empty video (0 bytes)"},
		{"WebM cut in the middle", webm[:len(webm)/2], ErrCorrupt, "(truncated?)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tl.Decode(context.Background(), c.data, DefaultOptions())
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
		})
	}
	// The live WebM states no duration: Probe and ffprobe find none, so the
	// limit is enforced while decoding.
	if c, err := Probe(readClip(t, dir, "long_61s_live.webm")); err != nil || c.Duration != 0 {
		t.Errorf("live WebM: Probe = %+v, %v; want no duration", c, err)
	}
}

// TestDecodeVideoOnly: a clip without a soundtrack decodes with Audio nil,
// and Options.Audio false leaves a soundtrack undecoded.
func TestDecodeVideoOnly(t *testing.T) {
	tl := tools(t)
	dir := encodeClips(t, tl)
	c, err := tl.Decode(context.Background(), readClip(t, dir, "video_only.webm"), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c.Audio != nil || len(c.Frames) != 2 || c.Format != "webm" {
		t.Errorf("video only: %d frames, audio %v, format %q", len(c.Frames), c.Audio != nil, c.Format)
	}
	o := DefaultOptions()
	o.Audio = false
	c, err = tl.Decode(context.Background(), readClip(t, dir, "vp9_322x242.webm"), o)
	if err != nil {
		t.Fatal(err)
	}
	if c.Audio != nil || len(c.Frames) != 6 {
		t.Errorf("Audio false: %d frames, audio %v", len(c.Frames), c.Audio != nil)
	}
}

// fakeFFmpeg writes a shell script standing in for ffmpeg.
func fakeFFmpeg(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeProbe is an ffprobe script that describes vp9_opus.webm at once, so
// the tests of a failing ffmpeg need no FFmpeg and no time of their own.
const fakeProbe = `cat <<'EOF'
{"streams": [{"codec_type": "video", "codec_name": "vp9", "width": 98, "height": 62, "pix_fmt": "yuv420p",
 "time_base": "1/1000", "start_time": "0.007000"}, {"codec_type": "audio", "codec_name": "opus"}],
 "format": {"duration": "1.608000"}}
EOF`

// TestDecodeHangingAndCrashingDecoder: an ffmpeg that hangs is killed at
// the time limit (its whole process group), one that crashes or fails is
// reported; all ErrDecoder with ffmpeg's last message.
func TestDecodeHangingAndCrashingDecoder(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(goldenDir, "vp9_opus.webm"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, script, msg string
		timeout           time.Duration
	}{
		// sleep runs as a child of the script: the whole group must go.
		{"hangs", "sleep 60\nexit 0", "ran past its 300ms limit; ffmpeg was killed", 300 * time.Millisecond},
		{"hangs in ffprobe", "", "ran past its 300ms limit; ffprobe was killed", 300 * time.Millisecond},
		{"crashes", "echo 'about to crash' >&2\nkill -SEGV $$", "ffmpeg crashed (signal: segmentation fault); its last message: about to crash", time.Minute},
		{"fails", "echo '[h264 @ 0x5581c5d0c8c0] Error while decoding' >&2\necho 'Conversion failed!' >&2\nexit 1", "ffmpeg failed (exit status 1): [h264] Error while decoding", time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			mark := filepath.Join(dir, "started")
			probe := fakeFFmpeg(t, fakeProbe)
			script := "touch " + mark + "\n" + c.script
			if c.script == "" {
				probe = fakeFFmpeg(t, "touch "+mark+"\nsleep 60")
				script = "exit 1"
			}
			tl := &Tools{FFmpeg: fakeFFmpeg(t, script), FFprobe: probe}
			o := DefaultOptions()
			o.Timeout = c.timeout
			start := time.Now()
			_, err := tl.Decode(context.Background(), data, o)
			if !errors.Is(err, ErrDecoder) {
				t.Fatalf("error %v, want ErrDecoder", err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
			if _, err := os.Stat(mark); err != nil {
				t.Errorf("the fake never ran: %v", err)
			}
			// Not a speed test: a decoder that is not killed would hold
			// Decode for the script's 60 s.
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("Decode returned after %v", d)
			}
		})
	}
}

// TestDecodeTempFile: a clip with moov at the end goes to ffmpeg as a
// private (0600) copy read through the file protocol only, which on Unix
// is already gone from the temporary folder while ffmpeg runs (it reaches
// ffmpeg as descriptor 3), so a daemon killed mid-decode leaves nothing
// behind; other clips go through the pipe. Every run states the input
// options that bound it.
func TestDecodeTempFile(t *testing.T) {
	real := tools(t)
	dir := encodeClips(t, real)
	// The fake prints how it was called, the input file's mode and what
	// the temporary folder holds while it runs.
	script := `prev=; in=
for a in "$@"; do [ "$prev" = "-i" ] && in="$a"; prev="$a"; done
mode=; case "$in" in file:*) mode=$(ls -lL "${in#file:}" | cut -c1-10);; esac
echo "args: $* mode: $mode in the folder: [$(ls -A "$TMPDIR")]" >&2
exit 1`
	tl := &Tools{FFmpeg: fakeFFmpeg(t, script), FFprobe: real.FFprobe}
	for _, c := range []struct {
		clip string
		msg  []string
	}{
		{"h264_322x242.mp4", []string{"-protocol_whitelist file -f mov -enable_drefs 0 -max_pixels 67108864 -i the input", "mode: -rw------- "}},
		{"h264_800x600_faststart.mp4", []string{"-protocol_whitelist pipe -f mov -enable_drefs 0 -max_pixels 67108864 -i the input"}},
		{"vp9_322x242.webm", []string{"-protocol_whitelist pipe -f matroska -max_pixels 67108864 -i the input"}},
	} {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		_, err := tl.Decode(context.Background(), readClip(t, dir, c.clip), DefaultOptions())
		for _, m := range c.msg {
			if err == nil || !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %v, want it to say %q", c.clip, err, m)
			}
		}
		if runtime.GOOS != "windows" && (err == nil || !strings.Contains(err.Error(), "in the folder: []")) {
			t.Errorf("%s: error %v: want no file in the temporary folder while ffmpeg runs", c.clip, err)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("%s: %d temporary files left", c.clip, len(left))
		}
	}
	// The file's path never reaches a message.
	tl = &Tools{FFmpeg: fakeFFmpeg(t, `echo "$*" >&2; exit 1`), FFprobe: real.FFprobe}
	_, err := tl.Decode(context.Background(), readClip(t, dir, "h264_322x242.mp4"), DefaultOptions())
	if err == nil || strings.Contains(err.Error(), "clef-video-") || !strings.Contains(err.Error(), "-protocol_whitelist file -f mov -enable_drefs 0 -max_pixels 67108864 -i the input") {
		t.Errorf("error %v: want the input named \"the input\"", err)
	}
	// The threads, when bounded.
	tl.Threads = 3
	_, err = tl.Decode(context.Background(), readClip(t, dir, "h264_322x242.mp4"), DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "-threads 3 -filter_threads 3 -protocol_whitelist") {
		t.Errorf("error %v: want -threads 3 -filter_threads 3 before the input", err)
	}
}

// TestFind: an explicit path, $CLEF_FFMPEG, PATH, and the error naming
// what to install.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"ffmpeg-7", "ffprobe-7"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", t.TempDir()) // nothing on PATH
	t.Setenv("CLEF_FFMPEG", "")
	t.Setenv("CLEF_FFPROBE", "")
	tl, err := Find(filepath.Join(dir, "ffmpeg-7"))
	if err != nil || tl.FFmpeg != filepath.Join(dir, "ffmpeg-7") || tl.FFprobe != filepath.Join(dir, "ffprobe-7") {
		t.Errorf("explicit path: %+v, %v", tl, err)
	}
	t.Setenv("CLEF_FFMPEG", filepath.Join(dir, "ffmpeg-7"))
	if tl, err := Find(""); err != nil || tl.FFprobe != filepath.Join(dir, "ffprobe-7") {
		t.Errorf("$CLEF_FFMPEG: %+v, %v", tl, err)
	}
	t.Setenv("CLEF_FFMPEG", "")
	_, err = Find("")
	if !errors.Is(err, ErrNoFFmpeg) || !strings.Contains(err.Error(), "install") || !strings.Contains(err.Error(), "ffmpeg is not on PATH") {
		t.Errorf("nothing installed: %v", err)
	}
	t.Logf("the message: %v", err)
	if _, err := Find(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoFFmpeg) {
		t.Errorf("missing explicit path: %v", err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := os.WriteFile(filepath.Join(dir, "ffmpeg"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(""); !errors.Is(err, ErrNoFFmpeg) || !strings.Contains(err.Error(), "ffprobe") {
		t.Errorf("ffmpeg without ffprobe: %v", err)
	}
	t.Setenv("CLEF_FFPROBE", filepath.Join(dir, "ffprobe-7"))
	if tl, err := Find(""); err != nil || tl.FFmpeg != filepath.Join(dir, "ffmpeg") {
		t.Errorf("PATH and $CLEF_FFPROBE: %+v, %v", tl, err)
	}
}

// ffmpegVersion reads "ffmpeg version X" from ffmpeg -version.
func ffmpegVersion(t testing.TB, tl *Tools) string {
	out := ffmpegRun(t, tl.FFmpeg, "-hide_banner", "-version")
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		return f[2]
	}
	return ""
}

// TestDecodePipeSeekFallback: when the demuxer cannot seek in the pipe (an
// MP4 whose tracks are not interleaved: ffmpeg says "partial file" and
// stops reading, with exit status 0), Decode reads the clip from a file
// instead and gets the whole of it; a file that still cannot be read to
// its end is refused, never returned cut short.
func TestDecodePipeSeekFallback(t *testing.T) {
	real := tools(t)
	dir := encodeClips(t, real)
	data := readClip(t, dir, "h264_800x600_faststart.mp4")
	want, err := real.Decode(context.Background(), data, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	partial := `echo '[mov,mp4,m4a,3gp,3g2,mj2 @ 0x55d0c0a4b2c0] stream 0, offset 0x2f3c1: partial file' >&2
echo 'pipe:0: Invalid data found when processing input' >&2`
	// A wrapper that fails like that on the pipe and runs ffmpeg on files.
	tl := &Tools{FFmpeg: fakeFFmpeg(t, `for a in "$@"; do if [ "$a" = pipe:0 ]; then
`+partial+`
exit 0; fi; done
exec '`+real.FFmpeg+`' "$@"`), FFprobe: real.FFprobe}
	got, err := tl.Decode(context.Background(), data, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Frames) != len(want.Frames) || len(got.Audio.Samples) != len(want.Audio.Samples) {
		t.Fatalf("%d frames and %d samples, want %d and %d", len(got.Frames), len(got.Audio.Samples), len(want.Frames), len(want.Audio.Samples))
	}
	for i := range want.Frames {
		if !bytes.Equal(got.Frames[i].Pix, want.Frames[i].Pix) {
			t.Errorf("frame %d differs", i)
		}
	}
	// Always cut short: refused.
	tl = &Tools{FFmpeg: fakeFFmpeg(t, partial+"\nexit 0"), FFprobe: real.FFprobe}
	_, err = tl.Decode(context.Background(), data, DefaultOptions())
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cannot be read to its end") {
		t.Errorf("error %v, want ErrCorrupt: cannot be read to its end", err)
	}
}

// TestDecodeRotated: a phone's portrait clip (a display matrix saying
// "rotate 90°") is not rotated, as PyAV does not rotate: the frames come
// out as stored, identical to ffmpeg's with -noautorotate.
func TestDecodeRotated(t *testing.T) {
	tl := tools(t)
	dir := t.TempDir()
	plain, rotated := filepath.Join(dir, "plain.mp4"), filepath.Join(dir, "rotated.mp4")
	ffmpegRun(t, tl.FFmpeg, "-v", "error", "-nostdin", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10:duration=1.2",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", plain)
	ffmpegRun(t, tl.FFmpeg, "-v", "error", "-nostdin", "-i", plain, "-c", "copy", "-metadata:s:v:0", "rotate=90", rotated)
	if out := ffmpegRun(t, tl.FFprobe, "-v", "error", "-show_streams", rotated); !strings.Contains(string(out), "rotation=90") {
		t.Fatalf("the clip is not marked rotated:\n%s", out)
	}
	got, err := tl.Decode(context.Background(), readClip(t, dir, "rotated.mp4"), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	wantFrames, wantTimes, _ := reference(t, tl, rotated, 320, 240, false)
	if len(got.Frames) != len(wantFrames) || got.Width != 320 || got.Height != 240 {
		t.Fatalf("%d frames of %dx%d, want %d of 320x240", len(got.Frames), got.Width, got.Height, len(wantFrames))
	}
	for i := range wantFrames {
		if got.Times[i] != wantTimes[i] || got.Frames[i].Width != 320 || !bytes.Equal(got.Frames[i].Pix, wantFrames[i]) {
			t.Errorf("frame %d differs from ffmpeg's unrotated frame", i)
		}
	}
}
