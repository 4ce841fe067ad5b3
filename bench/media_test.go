package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/record"
)

// The media scenarios run in process on the tiny model: the records' token
// counts (built from the processors' formulas) are what the engine reads,
// and the media stages are timed.
func TestRunMediaScenarios(t *testing.T) {
	kinds, err := ParseMedia("image,audio,image+audio")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseMedia("movie"); err == nil {
		t.Error("an unknown media scenario was accepted")
	}
	build := func(tok record.Tokenizer) ([]*Scenario, []Skipped, error) {
		return BuildMedia(tok, kinds, MediaOptions{Seed: 7})
	}
	cfg := Config{Models: []ModelSpec{{Path: tinyRelease}}, Reps: 1, Engine: engine.Options{Backend: "cpu"}}
	rep, err := Run(context.Background(), cfg, nil, build)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Models) != 1 || len(rep.Models[0].Scenarios) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Models[0].Scenarios {
		st := s.Stages
		if st == nil || st.Decode <= 0 || st.Processor <= 0 || st.Towers <= 0 || st.Towers > st.Thinker || s.InputTokens < 100 {
			t.Errorf("%s: %d tokens, stages %+v", s.Scenario, s.InputTokens, st)
		}
	}
}

// The video scenarios run in process on the tiny model: a 10 s 640x360
// H.264 clip (with an AAC soundtrack for video+audio) made with the system's
// ffmpeg, its tokens counted by decoding it as the engine does and read so
// by the engine, every stage timed: decoding (demux and decode), the
// processor, the towers within the thinker, and the head.
func TestRunVideoScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes and runs two 10 s videos")
	}
	needFFmpeg(t)
	kinds, err := ParseMedia("video,video+audio")
	if err != nil {
		t.Fatal(err)
	}
	build := func(tok record.Tokenizer) ([]*Scenario, []Skipped, error) {
		s, sk, err := BuildMedia(tok, kinds, MediaOptions{Seed: 3})
		if len(sk) > 0 {
			t.Errorf("skipped with ffmpeg present: %+v", sk)
		}
		return s, sk, err
	}
	cfg := Config{Models: []ModelSpec{{Path: tinyRelease}}, Reps: 1, Engine: engine.Options{Backend: "cpu"}}
	rep, err := Run(context.Background(), cfg, nil, build)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Models) != 1 || len(rep.Models[0].Scenarios) != 2 {
		t.Fatalf("report %+v", rep)
	}
	tokens := map[string]int{}
	for _, s := range rep.Models[0].Scenarios {
		st := s.Stages
		if st == nil || st.Decode <= 0 || st.Processor <= 0 || st.Towers <= 0 || st.Towers > st.Thinker || st.Head <= 0 {
			t.Errorf("%s: stages %+v", s.Scenario, st)
		}
		tokens[s.Scenario] = s.InputTokens
	}
	// 20 frames kept at 2 fps, 10 temporal patches of at least 128 merged
	// patches each; the heard soundtrack adds 10 s of audio (130 tokens).
	v, va := tokens["media-video"], tokens["media-video+audio"]
	if v < 10*128 || va-v < 130 || va-v > 140 {
		t.Errorf("input tokens: video %d, video+audio %d", v, va)
	}
}

// Without ffmpeg the video scenarios are skipped, each named with the
// reason, and the others still build.
func TestVideoScenariosSkippedWithoutFFmpeg(t *testing.T) {
	kinds, err := ParseMedia("audio,video,video+audio")
	if err != nil {
		t.Fatal(err)
	}
	tok := loadTok(t, tinyRelease)
	missing := filepath.Join(t.TempDir(), "no-ffmpeg")
	s, sk, err := BuildMedia(tok, kinds, MediaOptions{FFmpeg: missing, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 || s[0].Name != "media-audio" {
		t.Errorf("built %d scenarios, want media-audio alone", len(s))
	}
	if len(sk) != 2 || sk[0].Name != "media-video" || sk[1].Name != "media-video+audio" {
		t.Fatalf("skipped %+v", sk)
	}
	for _, k := range sk {
		if !strings.Contains(k.Reason, "need ffmpeg") || !strings.Contains(k.Reason, "install") {
			t.Errorf("%s: reason %q does not say what is missing", k.Name, k.Reason)
		}
	}
}

// SynthClip makes the clips the tests and the video scenarios use: MP4
// (H.264 and AAC) and WebM (VP9 and Opus), with and without a soundtrack,
// as ffprobe reads them back; bad specs are refused before ffmpeg runs.
func TestSynthClip(t *testing.T) {
	ffmpeg := needFFmpeg(t)
	ffprobe := filepath.Join(filepath.Dir(ffmpeg), "ffprobe")
	if _, err := os.Stat(ffprobe); err != nil {
		t.Skip("no ffprobe beside ffmpeg")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		spec ClipSpec
		want string
	}{
		{ClipSpec{Width: 64, Height: 48, Seconds: 1, FPS: 10, Sound: true, Tone: 330, Format: "mp4"}, "video:h264:64x48,audio:aac"},
		{ClipSpec{Width: 64, Height: 48, Seconds: 1, FPS: 10, Format: "mp4"}, "video:h264:64x48"},
		{ClipSpec{Width: 96, Height: 64, Seconds: 1, FPS: 10, Sound: true, Format: "webm"}, "video:vp9:96x64,audio:opus"},
	} {
		path := filepath.Join(dir, "clip."+c.spec.Format)
		if err := SynthClip(context.Background(), ffmpeg, path, c.spec); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(ffprobe, "-v", "error", "-show_entries", "stream=codec_type,codec_name,width,height", "-of", "csv=p=0", path).Output()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, ",")
			switch {
			case len(f) == 4 && f[1] == "video":
				got = append(got, "video:"+f[0]+":"+f[2]+"x"+f[3])
			case len(f) >= 2 && f[1] == "audio":
				got = append(got, "audio:"+f[0])
			default:
				got = append(got, line)
			}
		}
		if s := strings.Join(got, ","); s != c.want {
			t.Errorf("%+v: streams %q, want %q", c.spec, s, c.want)
		}
	}
	for _, bad := range []ClipSpec{{Width: 0, Height: 48, Seconds: 1, FPS: 10}, {Width: 64, Height: 48, Seconds: 1, FPS: 10, Format: "avi"}} {
		if err := SynthClip(context.Background(), ffmpeg, filepath.Join(dir, "bad"), bad); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
}

// needFFmpeg returns the ffmpeg the video tests use, and skips the test
// when there is none.
func needFFmpeg(t *testing.T) string {
	t.Helper()
	tools, err := video.Find("")
	if err != nil {
		t.Skipf("no ffmpeg: %v", err)
	}
	return tools.FFmpeg
}
