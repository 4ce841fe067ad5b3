package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/bench"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/internal/npy"
	"github.com/clefrt/clef/server/launchagent"
)

// videoRequest is the one-question request the video tests attach videos
// to.
const videoRequest = `{"model":"clef-omni","state":"A parcel on a conveyor belt.","questions":{"q":{"type":"noul","instructions":"Is it moving?"}}}`

// testClip writes a 1 s 64x48 synthetic clip (2 frames kept at 2 fps) with
// the system's ffmpeg into dir as name and returns its path; the test is
// skipped without ffmpeg.
func testClip(t *testing.T, dir, name string, sound bool) string {
	t.Helper()
	tools, err := video.Find("")
	if err != nil {
		t.Skipf("no ffmpeg: %v", err)
	}
	format := "mp4"
	if filepath.Ext(name) == ".webm" {
		format = "webm"
	}
	path := filepath.Join(dir, name)
	c := bench.ClipSpec{Width: 64, Height: 48, Seconds: 1, FPS: 10, Sound: sound, Tone: 330, Format: format}
	if err := bench.SynthClip(context.Background(), tools.FFmpeg, path, c); err != nil {
		t.Fatal(err)
	}
	return path
}

// withVideos is videoRequest carrying the files as {content_type, base64}
// videos, in order.
func withVideos(t *testing.T, files map[string]string, order ...string) string {
	t.Helper()
	var items []string
	for _, name := range order {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]string{"content_type": files[name], "base64": base64.StdEncoding.EncodeToString(data)})
		items = append(items, string(b))
	}
	return strings.TrimSuffix(videoRequest, "}") + `,"videos":[` + strings.Join(items, ",") + `]}`
}

// clef decide --video FILE (the embedded tiny model, no --model) answers as
// the same request carrying the video does: MP4 with a soundtrack, WebM, a
// .mov name, and two videos. More than two --video, a missing file and a
// file that is no video exit 2 naming what is wrong.
func TestDecideVideo(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes videos and runs the towers")
	}
	t.Setenv("CLEF_MODEL", "")
	dir := t.TempDir()
	mp4 := testClip(t, dir, "clip.mp4", true)
	webm := testClip(t, dir, "clip.webm", true)
	mov := filepath.Join(dir, "phone.MOV")
	data, _ := os.ReadFile(mp4)
	os.WriteFile(mov, data, 0o644)
	types := map[string]string{mp4: "video/mp4", webm: "video/webm", mov: "video/mp4"}
	for _, files := range [][]string{{mp4}, {webm}, {mov}, {mp4, webm}} {
		args := []string{"decide"}
		for _, f := range files {
			args = append(args, "--video", f)
		}
		got, errOut, err := run(t, videoRequest, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		want, _, err := run(t, withVideos(t, types, files...), "decide")
		if err != nil {
			t.Fatalf("%v in the request: %v", files, err)
		}
		if got != want {
			t.Errorf("%v: --video answers\n%s\nthe request carrying it answers\n%s", files, got, want)
		}
		if !strings.Contains(got, `"input_tokens"`) {
			t.Errorf("%v: %s", files, got)
		}
	}
	notVideo := filepath.Join(dir, "notes.mp4")
	os.WriteFile(notVideo, []byte("these are notes, not a video"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--video", mp4, "--video", mp4, "--video", mp4}, "at most 2 videos"},
		{[]string{"--video", filepath.Join(dir, "missing.mp4")}, "missing.mp4"},
		{[]string{"--video", notVideo}, "videos[0]"},
		{[]string{"--video", mp4, "--video", notVideo}, "videos[1]"},
	} {
		_, _, err := run(t, videoRequest, append([]string{"decide"}, c.args...)...)
		if exitCode(err) != exitBadRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d %v; want exit 2 naming %q", c.args, exitCode(err), err, c.want)
		}
	}
}

// With --ffmpeg naming a missing file, clef decide answers a text record and
// refuses a video (exit 2) saying what to install.
func TestDecideVideoWithoutFFmpeg(t *testing.T) {
	t.Setenv("CLEF_MODEL", "")
	clip := testClip(t, t.TempDir(), "clip.mp4", true)
	missing := filepath.Join(t.TempDir(), "no-such-ffmpeg")
	if _, _, err := run(t, videoRequest, "decide", "--ffmpeg", missing); err != nil {
		t.Errorf("text record with a missing ffmpeg: %v", err)
	}
	_, _, err := run(t, videoRequest, "decide", "--ffmpeg", missing, "--video", clip)
	if exitCode(err) != exitBadRequest || !strings.Contains(err.Error(), "install") || !strings.Contains(strings.ToLower(err.Error()), "ffmpeg") {
		t.Errorf("video with a missing ffmpeg: exit %d %v; want exit 2 saying what to install", exitCode(err), err)
	}
}

// videoType names an attached video from its bytes, else its extension.
func TestVideoType(t *testing.T) {
	dir := t.TempDir()
	mp4, err := os.ReadFile(testClip(t, dir, "a.mp4", false))
	if err != nil {
		t.Fatal(err)
	}
	webm, err := os.ReadFile(testClip(t, dir, "a.webm", false))
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte("no container here")
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"clip.webm", mp4, "video/mp4"}, {"clip.mp4", webm, "video/webm"}, {"clip", mp4, "video/mp4"},
		{"a.MP4", junk, "video/mp4"}, {"a.m4v", junk, "video/mp4"}, {"a.mov", junk, "video/mp4"}, {"a.webm", junk, "video/webm"}, {"a.avi", junk, "video/unknown"},
	} {
		if got := videoType(c.name, c.data); got != c.want {
			t.Errorf("%s (%.4q…): %s, want %s", c.name, c.data, got, c.want)
		}
	}
}

// encodedVideo is what clef encode prints of a record with videos.
type encodedVideo struct {
	InputIDs []int `json:"input_ids"`
	Media    struct {
		Videos []struct {
			Frames          int     `json:"frames"`
			TemporalPatches int     `json:"temporal_patches"`
			TokensPerPatch  int     `json:"tokens_per_patch"`
			VideoTokens     int     `json:"video_tokens"`
			AudioTokens     int     `json:"audio_tokens"`
			SecondsPerGrid  float64 `json:"seconds_per_grid"`
		} `json:"videos"`
		Heard      *bool `json:"heard"`
		Start, End int
	} `json:"media"`
}

// clef encode reports the videos' counts (2 frames at 2 fps in one temporal
// patch of at least 128 merged patches, 1 s per grid; the 1 s soundtrack's
// 13 tokens when heard), and clef hidden --request writes one hidden state
// per record token, videos included; clef decide reads the same tokens.
func TestEncodeAndHiddenVideo(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes videos and runs the towers")
	}
	t.Setenv("CLEF_MODEL", "")
	dir := t.TempDir()
	sound, silent := testClip(t, dir, "sound.mp4", true), testClip(t, dir, "silent.mp4", false)
	types := map[string]string{sound: "video/mp4", silent: "video/mp4"}
	for _, c := range []struct {
		name  string
		files []string
		heard bool
	}{{"heard", []string{sound}, true}, {"silent", []string{silent}, false}, {"one silent of two", []string{sound, silent}, false}} {
		body := withVideos(t, types, c.files...)
		out, err := runEncode(t, body, "--tokenizer", tinyRelease)
		if err != nil {
			t.Fatalf("%s: encode: %v", c.name, err)
		}
		var e encodedVideo
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, out)
		}
		m := e.Media
		if len(m.Videos) != len(c.files) || m.Heard == nil || *m.Heard != c.heard {
			t.Fatalf("%s: media %+v", c.name, m)
		}
		sum := 0
		for i, v := range m.Videos {
			audio := 0
			if c.heard {
				audio = 13
			}
			if v.Frames != 2 || v.TemporalPatches != 1 || v.TokensPerPatch < 128 || v.VideoTokens != v.TokensPerPatch || v.AudioTokens != audio || v.SecondsPerGrid != 1 {
				t.Errorf("%s: video %d: %+v", c.name, i, v)
			}
			sum += v.VideoTokens + v.AudioTokens
		}
		// Each video: <|vision_start|> pads <|vision_end|> \n, heard also
		// <|audio_start|> <|audio_end|>.
		markers := 3
		if c.heard {
			markers = 5
		}
		if got := m.End - m.Start; got != sum+markers*len(m.Videos) {
			t.Errorf("%s: media block of %d tokens, want %d pads and %d markers per video", c.name, got, sum, markers)
		}

		req, npyOut := filepath.Join(dir, "req.json"), filepath.Join(dir, "h.npy")
		os.WriteFile(req, []byte(body), 0o644)
		resetHiddenFlags(t)
		rootCmd.SetArgs([]string{"hidden", "--request", req, "--out", npyOut})
		if err := rootCmd.Execute(); err != nil {
			t.Fatalf("%s: hidden: %v", c.name, err)
		}
		h, err := npy.ReadFile(npyOut)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Shape) != 2 || h.Shape[0] != len(e.InputIDs) {
			t.Errorf("%s: hidden states %v, want %d rows", c.name, h.Shape, len(e.InputIDs))
		}
		dec, _, err := run(t, body, "decide")
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Usage struct {
				InputTokens int `json:"input_tokens"`
			}
		}
		json.Unmarshal([]byte(dec), &resp)
		if resp.Usage.InputTokens != len(e.InputIDs) {
			t.Errorf("%s: decide read %d tokens, encode %d", c.name, resp.Usage.InputTokens, len(e.InputIDs))
		}
	}
}

// clef serve --ffmpeg names the decoder: with a missing one it says so at
// start, answers text and refuses a video with a 422 saying what to
// install.
func TestServeFFmpegFlag(t *testing.T) {
	clip := testClip(t, t.TempDir(), "clip.mp4", true)
	data, _ := os.ReadFile(clip)
	body := strings.TrimSuffix(videoRequest, "}") + `,"videos":["data:video/mp4;base64,` + base64.StdEncoding.EncodeToString(data) + `"]}`
	addr := freeAddr(t)
	missing := filepath.Join(t.TempDir(), "no-such-ffmpeg")
	type res struct {
		errOut string
		err    error
	}
	done := make(chan res, 1)
	go func() {
		_, errOut, err := run(t, "", "serve", "--model", tinyRelease, "--addr", addr, "--prefix-cache-bytes", "0", "--ffmpeg", missing)
		done <- res{errOut, err}
	}()
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := httpDo(t, "GET", base+"/health", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("clef serve never became healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, out := httpDo(t, "POST", base+"/v1/systemone", videoRequest); code != 200 {
		t.Errorf("text: %d %s", code, out)
	}
	if code, out := httpDo(t, "POST", base+"/v1/systemone", body); code != 422 || !strings.Contains(out, "install") || !strings.Contains(out, "videos") {
		t.Errorf("video: %d %s; want a 422 saying what to install", code, out)
	}
	if code, _ := httpDo(t, "POST", base+"/v1/shutdown", ""); code != 202 {
		t.Fatalf("shutdown: %d", code)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("serve: %v\n%s", r.err, r.errOut)
		}
		if !strings.Contains(r.errOut, "videos will be refused") {
			t.Errorf("the log does not say videos will be refused:\n%s", r.errOut)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// clef daemon install writes the ffmpeg found now into the agent as an
// absolute path (launchd's PATH lacks Homebrew's); an --ffmpeg that does
// not exist is refused; with none found the agent's PATH covers Homebrew's
// and the install says videos will be refused.
func TestDaemonInstallFFmpeg(t *testing.T) {
	tools, err := video.Find("")
	if err != nil {
		t.Skipf("no ffmpeg: %v", err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("CLEF_FFMPEG", "")
	plistArgs := func() (args, env string) {
		data, err := os.ReadFile(launchagent.Path(home))
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		i := strings.Index(s, "<key>ProgramArguments</key>")
		args = s[i : strings.Index(s[i:], "</array>")+i]
		if j := strings.Index(s, "<key>EnvironmentVariables</key>"); j >= 0 {
			env = s[j : strings.Index(s[j:], "</dict>")+j]
		}
		return args, env
	}
	if _, errOut, err := run(t, "", "daemon", "install", "--model", tinyRelease, "--load=false"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	abs, _ := filepath.Abs(tools.FFmpeg)
	if args, _ := plistArgs(); !strings.Contains(args, "<string>--ffmpeg</string>") || !strings.Contains(args, "<string>"+abs+"</string>") {
		t.Errorf("the agent's arguments lack --ffmpeg %s:\n%s", abs, args)
	}
	missing := filepath.Join(t.TempDir(), "no-such-ffmpeg")
	if _, _, err := run(t, "", "daemon", "install", "--model", tinyRelease, "--load=false", "--ffmpeg", missing); exitCode(err) != 2 || !strings.Contains(err.Error(), "--ffmpeg") {
		t.Errorf("missing --ffmpeg: exit %d %v", exitCode(err), err)
	}
	t.Setenv("PATH", t.TempDir())
	_, errOut, err := run(t, "", "daemon", "install", "--model", tinyRelease, "--load=false")
	if err != nil {
		t.Fatal(err)
	}
	args, env := plistArgs()
	if strings.Contains(args, "--ffmpeg") || !strings.Contains(env, "<key>PATH</key>") || !strings.Contains(env, "/opt/homebrew/bin") {
		t.Errorf("no ffmpeg: arguments\n%s\nenvironment\n%s", args, env)
	}
	if !strings.Contains(errOut, "refuses until ffmpeg is installed") {
		t.Errorf("no ffmpeg: install said %q", errOut)
	}
}

// clef bench --media video without ffmpeg skips the scenario with a line
// saying why, and succeeds.
func TestBenchVideoSkippedWithoutFFmpeg(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-ffmpeg")
	_, errOut, err := runBenchCLI(t, "bench", "--media", "video,video+audio", "--ffmpeg", missing)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for _, k := range []string{"media-video:", "media-video+audio:"} {
		if !strings.Contains(errOut, "skipped "+k) || !strings.Contains(errOut, "need ffmpeg") {
			t.Errorf("no skip line for %s:\n%s", k, errOut)
		}
	}
	if _, _, err := runBenchCLI(t, "bench", "--media", "movie"); exitCode(err) != 2 {
		t.Errorf("--media movie: %v", err)
	}
}
