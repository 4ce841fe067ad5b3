package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/bench"
	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/tinymodel"
)

// videoClip makes a short synthetic clip with the system's ffmpeg (the test
// is skipped without one) and returns it as a data URL.
func videoClip(t *testing.T, c bench.ClipSpec) string {
	t.Helper()
	tools, err := video.Find("")
	if err != nil {
		t.Skipf("no ffmpeg: %v", err)
	}
	path := filepath.Join(t.TempDir(), "clip."+c.Format)
	if err := bench.SynthClip(context.Background(), tools.FFmpeg, path, c); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return "data:video/" + c.Format + ";base64," + base64.StdEncoding.EncodeToString(data)
}

// smallClip is a 1 s clip of 64x48 at 10 fps: 2 frames kept at 2 fps.
func smallClip(sound bool, format string) bench.ClipSpec {
	return bench.ClipSpec{Width: 64, Height: 48, Seconds: 1, FPS: 10, Sound: sound, Tone: 330, Format: format}
}

// videoBody is a one-question Workers AI request carrying the videos.
func videoBody(videos ...string) string {
	b, _ := json.Marshal(videos)
	return `{"model":"clef-omni","state":"A parcel on a conveyor belt.","questions":{"q":{"type":"noul","instructions":"Is it moving?"}},"videos":` + string(b) + `}`
}

// Both routes answer requests with videos (MP4 and WebM; heard when every
// video has a soundtrack, unheard otherwise) exactly as the engine does in
// process, log the media stages' times, and refuse a video that cannot be decoded with a 422 naming the
// item (code 5012 on Workers AI), and a third video on either route.
func TestVideoRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes videos and runs the towers")
	}
	mp4, silent, webm := videoClip(t, smallClip(true, "mp4")), videoClip(t, smallClip(false, "mp4")), videoClip(t, smallClip(true, "webm"))
	var logs syncBuffer
	_, base := tinyServer(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	dir, cleanup, err := tinymodel.WriteDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	e, err := engine.Open(dir, engine.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	_, out := workersAISchemas(t)

	tokens := map[string]int{}
	for _, c := range []struct {
		name   string
		videos []string
	}{
		{"mp4 heard", []string{mp4}},
		{"mp4 silent", []string{silent}},
		{"webm heard", []string{webm}},
		{"two heard", []string{mp4, webm}},
		{"one silent of two: unheard", []string{mp4, silent}},
	} {
		body := videoBody(c.videos...)
		req, err := api.ParseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, _, err := e.Decide(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: in process: %v", c.name, err)
		}
		want, _ := resp.MarshalJSON()
		want = bytes.TrimSpace(want)
		tokens[c.name] = resp.Usage.InputTokens
		r := post(t, base+soPath, body)
		if r.status != 200 || !bytes.Equal(bytes.TrimSpace(r.body), want) {
			t.Errorf("%s: systemone %d %s\nwant %s", c.name, r.status, r.body, want)
		}
		w := post(t, base+waiPath, body)
		checkWorkersAIResponse(t, out, w)
		if w.status != 200 || !bytes.HasPrefix(w.body, append([]byte(`{"result":`), want...)) {
			t.Errorf("%s: workers ai %d %s\nwant the result %s", c.name, w.status, w.body, want)
		}
	}
	// The log times the media stages of a record with videos.
	for _, want := range []string{"media_decode_ms=", "processor_ms=", "towers_ms="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	// A heard soundtrack adds its audio tokens; one silent video of two
	// leaves both unheard.
	if h, s := tokens["mp4 heard"], tokens["mp4 silent"]; h <= s {
		t.Errorf("input tokens: heard %d, silent %d", h, s)
	}
	if two, mixed := tokens["two heard"], tokens["one silent of two: unheard"]; mixed >= two {
		t.Errorf("input tokens: two heard %d, one silent of two %d", two, mixed)
	}

	corrupt := "data:video/mp4;base64," + base64.StdEncoding.EncodeToString([]byte("not a video at all, just some text"))
	truncated := mp4[:len(mp4)/2]
	truncated = truncated[:len(truncated)/4*4]
	for _, c := range []struct {
		name   string
		body   string
		field  string
		status int
	}{
		{"corrupt first", videoBody(corrupt), "videos.0", 422},
		{"truncated second", videoBody(mp4, truncated), "videos.1", 422},
	} {
		r := post(t, base+soPath, c.body)
		if r.status != c.status {
			t.Errorf("%s: systemone %d %s", c.name, r.status, r.body)
			continue
		}
		var se systemOneError
		json.Unmarshal(r.body, &se)
		label := strings.Replace(c.field, ".", "[", 1) + "]"
		if se.Error.Field != c.field || se.Error.Code != api.CodeValidation || !strings.Contains(se.Error.Message, label) {
			t.Errorf("%s: systemone error %+v, want field %s naming %s", c.name, se.Error, c.field, label)
		}
		w := post(t, base+waiPath, c.body)
		checkWorkersAIResponse(t, out, w)
		if code, msg := errorCode(t, true, w); w.status != c.status || code != api.CodeValidation || !strings.Contains(msg, label) {
			t.Errorf("%s: workers ai %d code %d %q", c.name, w.status, code, msg)
		}
	}
	three := videoBody(silent, silent, silent)
	for _, p := range []string{soPath, waiPath} {
		r := post(t, base+p, three)
		if code, msg := errorCode(t, p == waiPath, r); r.status != 422 || code != api.CodeValidation || !strings.Contains(msg, "videos") || !strings.Contains(msg, "2") {
			t.Errorf("%s: three videos: %d code %d %q", p, r.status, code, msg)
		}
	}
}

// A server whose ffmpeg is missing answers everything but videos (a text
// record, a record with a picture and a clip), and refuses a video with a 422 that says what to
// install, on both routes (5012 on Workers AI).
func TestVideoWithoutFFmpeg(t *testing.T) {
	clip := videoClip(t, smallClip(true, "mp4"))
	missing := filepath.Join(t.TempDir(), "no-such-ffmpeg")
	_, base := tinyServerWith(t, Config{}, engine.Options{FFmpeg: missing})
	text := `{"model":"clef-omni","state":"s","questions":{"q":{"type":"noul","instructions":"ok?"}}}`
	var pictureAndSound string
	for _, c := range loadGoldens(t) {
		if c.Name == "media_image_audio_multi" {
			pictureAndSound = string(c.Request)
		}
	}
	if pictureAndSound == "" {
		t.Fatal("no golden media_image_audio_multi")
	}
	for _, p := range []string{soPath, waiPath} {
		for name, body := range map[string]string{"text": text, "image and audio": pictureAndSound} {
			if r := post(t, base+p, body); r.status != 200 {
				t.Errorf("%s: %s without ffmpeg: %d %s", p, name, r.status, r.body)
			}
		}
		r := post(t, base+p, videoBody(clip))
		code, msg := errorCode(t, p == waiPath, r)
		if r.status != 422 || code != api.CodeValidation || !strings.Contains(strings.ToLower(msg), "ffmpeg") || !strings.Contains(msg, "install") {
			t.Errorf("%s: video without ffmpeg: %d code %d %q; want a 422 saying what to install", p, r.status, code, msg)
		}
	}
}

// The body limits hold two videos: on Workers AI a body carrying 16 MiB of
// video (decoded, the hosted total for audio and video) beside text near its
// own limit is read and answered, bytes of video more are a 422 naming the
// limit, and a body past what text and media may take together is a 413
// saying both limits. /v1/systemone (its own --max-body-bytes, 64 MiB by
// default) reads two videos of 16 MiB each.
func TestVideoBodyLimits(t *testing.T) {
	f := newFake()
	f.plain = true
	_, ts := startServer(t, Config{Load: f.loader(nil)})
	text := func(n int) string {
		pre := `{"model":"clef-omni","state":"`
		post := `","questions":{"q":{"type":"noul","instructions":"x"}}}`
		return pre + strings.Repeat("x", n-len(pre)-len(post)) + post
	}
	withVideos := func(body string, decoded ...int) string {
		items := make([]string, len(decoded))
		for i, n := range decoded {
			items[i] = `"data:video/mp4;base64,` + strings.Repeat("A", n/3*4) + `"`
		}
		return strings.TrimSuffix(body, "}") + `,"videos":[` + strings.Join(items, ",") + `]}`
	}
	near := text(api.MaxBodyBytes - 1000)
	half := api.MaxAVBytes / 2 / 3 * 3 // 2 bytes under 8 MiB, in whole base64 quanta
	for _, p := range []string{waiPath, acctWAI} {
		if r := post(t, ts.URL+p, withVideos(near, half, half)); r.status != 200 {
			t.Errorf("%s: two videos of 8 MiB beside text near the limit: %d %s", p, r.status, r.body[:min(len(r.body), 300)])
		}
		r := post(t, ts.URL+p, withVideos(near, half, half+6))
		if code, msg := errorCode(t, true, r); r.status != 422 || code != api.CodeValidation || !strings.Contains(msg, "16 MiB decoded together") {
			t.Errorf("%s: 2 bytes of video past 16 MiB: %d %d %q", p, r.status, code, msg)
		}
		r = post(t, ts.URL+p, withVideos(near, api.MaxVideoBytes/3*3, api.MaxVideoBytes/3*3))
		if code, msg := errorCode(t, true, r); r.status != 413 || code != api.CodeTooLong || !strings.Contains(msg, "16 MiB of audio and videos") || !strings.Contains(msg, "131072") {
			t.Errorf("%s: two videos of 16 MiB: %d %d %q", p, r.status, code, msg)
		}
	}
	big := api.MaxVideoBytes / 3 * 3
	if r := post(t, ts.URL+soPath, withVideos(text(1000), big, big)); r.status != 200 {
		t.Errorf("systemone: two videos of 16 MiB: %d %s", r.status, r.body[:min(len(r.body), 300)])
	}
}
