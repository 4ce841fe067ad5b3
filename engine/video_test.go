package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/model/omni"
	"github.com/clefrt/clef/engine/processor"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
)

// needFFmpeg skips a test that encodes or decodes videos when the system
// has no ffmpeg.
func needFFmpeg(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found on PATH: the video tests encode and decode clips with the system FFmpeg (CI installs it; brew install ffmpeg / apt install ffmpeg)", tool)
		}
	}
}

// ffmpegEncode runs the system ffmpeg with args (inputs and codecs) into a
// file named out in a temporary directory and returns its bytes.
func ffmpegEncode(t testing.TB, out string, args ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), out)
	cmd := exec.Command("ffmpeg", append(append([]string{"-hide_banner", "-loglevel", "error", "-nostdin", "-y"}, args...), path)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testMP4 encodes a synthetic w×h clip of the given seconds into MP4
// (H.264, 10 fps): moving test bars, and, with sound, a sine soundtrack
// of hz at 16 kHz in AAC.
func testMP4(t testing.TB, w, h int, seconds float64, hz int) []byte {
	t.Helper()
	args := []string{"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=10:duration=%g", w, h, seconds)}
	if hz > 0 {
		args = append(args, "-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=%d:sample_rate=16000:duration=%g", hz, seconds), "-c:a", "aac")
	}
	args = append(args, "-c:v", "libx264", "-pix_fmt", "yuv420p", "-shortest")
	return ffmpegEncode(t, "clip.mp4", args...)
}

// testWAV encodes a sine of hz for the given seconds as 16-bit mono WAV at
// 16 kHz.
func testWAV(t testing.TB, seconds float64, hz int) []byte {
	t.Helper()
	return ffmpegEncode(t, "clip.wav", "-f", "lavfi", "-i", fmt.Sprintf("sine=frequency=%d:sample_rate=16000:duration=%g", hz, seconds), "-c:a", "pcm_s16le")
}

// videoSchema is the two questions of videoRequest.
const videoSchema = `"parcel":{"type":"noul","instructions":"Is a parcel left at the door?"},` +
	`"who":{"type":"choice","instructions":"Who is at the door?","criteria":{"courier":"a courier","neighbour":"a neighbour","nobody":"nobody"}}`

// videoRequest is a request with the questions of schema (videoSchema
// when "") carrying clips (audio, WAV) and videos (MP4) as {content_type,
// base64} items.
func videoRequest(t testing.TB, schema string, clips, videos [][]byte) *api.Request {
	t.Helper()
	item := func(ct string, b []byte) string {
		return fmt.Sprintf(`{"content_type":%q,"base64":%q}`, ct, base64.StdEncoding.EncodeToString(b))
	}
	var a, v []string
	for _, c := range clips {
		a = append(a, item("audio/wav", c))
	}
	for _, c := range videos {
		v = append(v, item("video/mp4", c))
	}
	if schema == "" {
		schema = videoSchema
	}
	raw := fmt.Sprintf(`{"model":"clef-omni","state":"Doorbell camera, front porch.","questions":{%s},"audio":[%s],"videos":[%s]}`,
		schema, strings.Join(a, ","), strings.Join(v, ","))
	req, err := api.ParseRequest([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// directRecord is a record composed without the engine's media path: the
// clips decoded by engine/media, the videos by engine/media/video, both
// processed, measured and placed by hand as the reference's processor
// call does (spec clef-omni §1.2: use_audio_in_video iff every video has
// a soundtrack, the soundtracks appended to the audio list, one feature
// extractor call padding all to the longest), then the towers and
// omni.Compose. It returns the decoder's hidden states and the measures.
func directRecord(t *testing.T, e *Engine, req *api.Request, clips, videos [][]byte) (hidden []float32, m record.Media, heard bool) {
	t.Helper()
	ctx := context.Background()
	set := e.towers.settings
	if set.video.MinPixels != 131072 || set.video.MaxPixels != 786432 || set.image.MinPixels != 65536 || set.image.MaxPixels != 1048576 {
		t.Fatalf("processor limits: images %d-%d, videos %d-%d; want IMAGE_SIZE and VIDEO_SIZE",
			set.image.MinPixels, set.image.MaxPixels, set.video.MinPixels, set.video.MaxPixels)
	}
	var samples [][]float32
	for _, c := range clips {
		cl, err := media.DecodeAudio(media.Source{Data: c}, media.HostedLimits())
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, cl.Samples)
	}
	tools, err := video.Find("")
	if err != nil {
		t.Fatal(err)
	}
	var patches []processor.VideoPatches
	var tracks [][]float32
	heard = len(videos) > 0
	for _, v := range videos {
		c, err := tools.Decode(ctx, v, video.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		p, err := processor.Video(c.Frames, set.video, 2)
		if err != nil {
			t.Fatal(err)
		}
		patches = append(patches, p)
		if c.Audio == nil {
			heard = false
		} else {
			tracks = append(tracks, c.Audio.Samples)
		}
	}
	if heard {
		samples = append(samples, tracks...)
	}
	var feats []processor.AudioFeatures
	if len(samples) > 0 {
		if feats, err = processor.LogMelBatch(samples, set.sound); err != nil {
			t.Fatal(err)
		}
	}
	m.PositionIDPerSeconds = 13
	var om omni.Media
	for _, f := range feats {
		om.Audio = append(om.Audio, processor.AudioTokens(f.Frames))
	}
	m.AudioTokens = om.Audio[:len(clips)]
	for i, p := range patches {
		v := record.Video{Frames: p.Grid[0], FrameTokens: p.Grid[1] * p.Grid[2] / 4, SecondsPerGrid: p.SecondsPerGrid}
		if heard {
			v.AudioTokens = om.Audio[len(clips)+i]
		}
		m.Videos = append(m.Videos, v)
		om.Videos = append(om.Videos, omni.Video{Grid: p.Grid, SecondsPerGrid: p.SecondsPerGrid})
	}
	enc, _, err := record.EncodeMedia(e.tok, req, e.opts.MaxLength, m)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := omni.Positions(enc.InputIDs, e.tokens, om, 2, 13)
	if err != nil {
		t.Fatal(err)
	}

	b := e.backend
	var tw omni.Towers
	var pixels []float32
	var grids [][3]int
	for _, p := range patches {
		pixels, grids = append(pixels, p.Pixels...), append(grids, p.Grid)
	}
	vis, err := e.towers.vision.Forward(ctx, pixels, grids)
	if err != nil {
		t.Fatal(err)
	}
	defer vis.Free(b)
	tw.Videos = []omni.Visual{{Rows: vis.Embeds, Deepstack: vis.Deepstack}}
	for _, f := range feats {
		out, err := e.towers.audio.Forward(ctx, f.Mel, f.Frames, e.towers.audioAttention)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(out)
		tw.Audio = append(tw.Audio, out)
	}
	in, err := omni.Compose(ctx, e.decoder, enc.InputIDs, e.tokens, tw)
	if err != nil {
		t.Fatal(err)
	}
	in.Positions = pos
	hidden, _, err = e.decoder.HiddenPrefix(ctx, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	return hidden, m, heard
}

// TestVideoRecords: clips the system ffmpeg encodes (MP4, H.264 + AAC)
// decide without error on the CPU, and the engine's hidden states equal
// the ones composed directly from the same decoded frames and sound
// (directRecord) bit for bit: one video with its soundtrack (heard: its
// pads interleaved with the video's), one without (unheard), two of which
// only one has sound (unheard: no track used), and a request clip with a
// longer heard video (the clip is padded to the soundtrack in one feature
// extractor call). MediaCounts gives the same placeholder counts, and the
// counts follow from the clip's size and length by hand.
func TestVideoRecords(t *testing.T) {
	needFFmpeg(t)
	e := open(t, "release", Options{})
	proc := release.DefaultProcessor()
	if cfg, err := release.ReadConfig(filepath.Join(tinyDir, "release")); err == nil && cfg.Processor != nil {
		proc = cfg.Processor
	}
	// 64x48 at 10 fps for 1.5 s: frames kept at 0, 0.5 and 1 s, the third
	// repeated: 2 temporal patches; grown to 320x448 (VIDEO_SIZE's 131,072
	// pixels at least): a grid of 20x28 patches, 140 tokens each.
	sound := testMP4(t, 64, 48, 1.5, 440)
	silent := testMP4(t, 64, 48, 1.5, 0)
	clip := testWAV(t, 0.7, 330)
	const frameTokens, temporal = 140, 2
	for _, c := range []struct {
		name          string
		clips, videos [][]byte
		heard         bool
	}{
		{"heard", nil, [][]byte{sound}, true},
		{"silent", nil, [][]byte{silent}, false},
		{"one of two has sound", nil, [][]byte{sound, silent}, false},
		{"clip and heard video", [][]byte{clip}, [][]byte{sound}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := videoRequest(t, "", c.clips, c.videos)
			resp, st, err := e.Decide(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp == nil || st.Decode <= 0 || st.Processor <= 0 || st.Towers <= 0 {
				t.Errorf("stats %+v", st)
			}
			got, rows, err := e.Hidden(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want, m, heard := directRecord(t, e, req, c.clips, c.videos)
			if heard != c.heard {
				t.Fatalf("composed directly: heard %v, want %v (did the decoder find the soundtrack?)", heard, c.heard)
			}
			if len(got) != len(want) || rows*e.decoder.Config.Hidden != len(got) {
				t.Fatalf("engine: %d rows (%d values); composed directly: %d values", rows, len(got), len(want))
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("hidden[%d][%d] = %v, composed directly %v", i/e.decoder.Config.Hidden, i%e.decoder.Config.Hidden, got[i], want[i])
				}
			}

			counts, err := MediaCounts(req, proc)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(counts.AudioTokens, counts.Videos) != fmt.Sprint(m.AudioTokens, m.Videos) {
				t.Errorf("MediaCounts: audio %v, videos %+v; composed directly: %v, %+v", counts.AudioTokens, counts.Videos, m.AudioTokens, m.Videos)
			}
			for i, v := range m.Videos {
				if v.Frames != temporal || v.FrameTokens != frameTokens || v.SecondsPerGrid != 1 {
					t.Errorf("video %d: %d temporal patches of %d tokens, %v s each; want %d of %d, 1 s", i, v.Frames, v.FrameTokens, v.SecondsPerGrid, temporal, frameTokens)
				}
				// 1.5 s of sound: 150 mel frames, 13 + ⌈50/8⌉ tokens (the
				// AAC soundtrack decodes to 1.5 s give or take a frame).
				if c.heard != (v.AudioTokens > 0) || c.heard && (v.AudioTokens < 19 || v.AudioTokens > 21) {
					t.Errorf("video %d: %d soundtrack tokens (heard %v)", i, v.AudioTokens, c.heard)
				}
			}
			// The record's pads: every video's, and the soundtrack's
			// only when heard, behind <|vision_start|><|audio_start|>.
			enc, _, err := record.EncodeMedia(e.tok, req, 0, counts)
			if err != nil {
				t.Fatal(err)
			}
			var videoPads, audioPads, opened int
			for i, id := range enc.InputIDs {
				switch id {
				case e.tokens.Video:
					videoPads++
				case e.tokens.Audio:
					audioPads++
				case e.tokens.VisionStart:
					if i+1 < len(enc.InputIDs) && enc.InputIDs[i+1] == e.tokens.AudioStart {
						opened++
					}
				}
			}
			wantAudio := 0
			for _, n := range m.AudioTokens {
				wantAudio += n
			}
			if c.heard {
				wantAudio += m.Videos[0].AudioTokens
			}
			if videoPads != len(c.videos)*temporal*frameTokens || audioPads != wantAudio || (opened == 1) != c.heard {
				t.Errorf("%d video pads, %d audio pads, %d heard openings; want %d, %d, heard %v",
					videoPads, audioPads, opened, len(c.videos)*temporal*frameTokens, wantAudio, c.heard)
			}
		})
	}
}

// TestVideoPrefixCache: the prefix-cache key covers the videos' bytes: the
// same clip under another schema is a hit with the uncached answer, a
// clip of the same size and length (the same ids) a miss.
func TestVideoPrefixCache(t *testing.T) {
	needFFmpeg(t)
	store := newMapStore()
	cached := open(t, "release", Options{PrefixCache: store})
	a, b := testMP4(t, 64, 48, 1, 440), testMP4(t, 64, 48, 1, 660)
	plain := open(t, "release", Options{})
	other := `"open":{"type":"noul","instructions":"Was the parcel opened?"}`
	for i, c := range []struct {
		clip   []byte
		schema string
		hit    bool
	}{
		{a, "", false}, {a, other, true}, {b, "", false}, {b, other, true},
	} {
		req := videoRequest(t, c.schema, nil, [][]byte{c.clip})
		got, st, err := cached.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if st.PrefixHit != c.hit {
			t.Errorf("decision %d: prefix hit %v, want %v", i, st.PrefixHit, c.hit)
		}
		want, _, err := plain.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		gj, _ := got.MarshalJSON()
		wj, _ := want.MarshalJSON()
		if string(gj) != string(wj) {
			t.Errorf("decision %d: cached answer\n%s\nuncached\n%s", i, gj, wj)
		}
	}
	if store.put != 2 {
		t.Errorf("%d prefixes stored, want 2 (one per clip)", store.put)
	}
}

// TestVideoRefusals: what cannot be decoded is refused with a 422 (code
// 5012) naming the item, before any model work: no ffmpeg (saying what to
// install), an MP4 with sound and no picture, a clip past 60 s, garbage
// labelled video/mp4, too many videos, an image type in videos.
func TestVideoRefusals(t *testing.T) {
	type refusal struct {
		name   string
		opts   Options
		videos [][]byte
		cts    []string // content types; "" video/mp4
		field  string
		want   []string
	}
	garbage := []byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00this is not a video at all, only some bytes")
	cases := []refusal{
		{"no ffmpeg", Options{FFmpeg: filepath.Join(t.TempDir(), "no-such-ffmpeg")}, [][]byte{garbage}, nil, "videos.0", []string{"videos[0]: ", "install"}},
		{"three videos", Options{}, [][]byte{garbage, garbage, garbage}, nil, "videos", []string{"videos: 3 items, at most 2"}},
		{"image type", Options{}, [][]byte{garbage}, []string{"image/png"}, "videos.0", []string{"videos[0]: declared content type image/png is not a video type"}},
	}
	if _, err := exec.LookPath("ffmpeg"); err == nil {
		ok := testMP4(t, 32, 32, 1, 0)
		cases = append(cases,
			refusal{"audio only", Options{}, [][]byte{ffmpegEncode(t, "sound.mp4", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=1", "-c:a", "aac")}, nil,
				"videos.0", []string{"videos[0]: ", "no video stream"}},
			refusal{"61 s", Options{}, [][]byte{ok, ffmpegEncode(t, "long.mp4", "-f", "lavfi", "-i", "testsrc2=size=32x32:rate=1:duration=61", "-c:v", "libx264", "-pix_fmt", "yuv420p")}, nil,
				"videos.1", []string{"videos[1]: ", "at most 60 s"}},
			refusal{"garbage", Options{}, [][]byte{garbage}, nil, "videos.0", []string{"videos[0]: "}},
			refusal{"truncated", Options{}, [][]byte{ok, ok[:len(ok)/3]}, nil, "videos.1", []string{"videos[1]: "}},
		)
	} else {
		t.Logf("ffmpeg not found on PATH: only the refusals made before decoding are checked")
	}
	engines := map[string]*Engine{}
	for _, c := range cases {
		key := c.opts.FFmpeg
		if engines[key] == nil {
			engines[key] = open(t, "release", c.opts)
		}
		e := engines[key]
		var items []string
		for i, v := range c.videos {
			ct := "video/mp4"
			if i < len(c.cts) {
				ct = c.cts[i]
			}
			items = append(items, fmt.Sprintf(`{"content_type":%q,"base64":%q}`, ct, base64.StdEncoding.EncodeToString(v)))
		}
		req, err := api.ParseRequest([]byte(`{"model":"clef-omni","state":"s","questions":{"q":{"type":"noul","instructions":"x"}},"videos":[` + strings.Join(items, ",") + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = e.Decide(context.Background(), req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != api.CodeValidation || ae.Field != c.field {
			t.Errorf("%s: %v (field %q), want a 422 on %s", c.name, err, fieldOf(ae), c.field)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(ae.Message, w) {
				t.Errorf("%s: %q does not say %q", c.name, ae.Message, w)
			}
		}
		if _, err := MediaCountsContext(context.Background(), req, nil, c.opts.FFmpeg); !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("%s: MediaCounts: %v, want the same refusal", c.name, err)
		}
	}
}

// TestVideoCancel: a request whose context has ended is not decoded; the
// error is the context's, not a refusal of the video.
func TestVideoCancel(t *testing.T) {
	needFFmpeg(t)
	e := open(t, "release", Options{})
	req := videoRequest(t, "", nil, [][]byte{testMP4(t, 32, 32, 1, 0)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := e.Decide(ctx, req)
	if !errors.Is(err, context.Canceled) || IsRequestError(err) {
		t.Errorf("cancelled decision: %v, want context.Canceled and no refusal", err)
	}
}

// TestVideoDigest: the media digest covers whether the videos are heard.
func TestVideoDigest(t *testing.T) {
	m := &mediaInput{videoBytes: [][]byte{[]byte("clip")}}
	d := m.digest()
	m.heard = true
	if m.digest() == d {
		t.Error("the media digest does not tell a heard video from an unheard one")
	}
}

// TestVideoDecodeSlots: the tools ffmpegTools finds bound the threads of
// each ffmpeg run and how many clips decode at once; with one place, the
// videos of two concurrent requests decode one after the other (no
// ffprobe or ffmpeg run of one overlaps a run of the other), and a request
// whose context ends while it waits gets its context's error.
func TestVideoDecodeSlots(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	for _, name := range []string{"ffmpeg", "ffprobe"} {
		real, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		// Each run says when it starts and ends, and lasts long enough
		// that two unbounded decodings would overlap.
		script := fmt.Sprintf("#!/bin/sh\necho start >> '%s'\n'%s' \"$@\"; rc=$?\nsleep 0.3\necho end >> '%s'\nexit $rc\n", runs, real, runs)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CLEF_FFPROBE", "")
	f := &ffmpegTools{path: filepath.Join(dir, "ffmpeg")}
	tools, err := f.find()
	if err != nil {
		t.Fatal(err)
	}
	if cap(tools.Slots) != decodeSlots() || tools.Threads != ffmpegThreads() || decodeSlots() < 1 || ffmpegThreads() < 1 || ffmpegThreads() > 4 {
		t.Fatalf("tools found: %d places (want %d), %d threads (want %d)", cap(tools.Slots), decodeSlots(), tools.Threads, ffmpegThreads())
	}
	tools.Slots = make(chan struct{}, 1)
	clip := []media.Source{{Data: testMP4(t, 32, 32, 1, 0)}}
	o := video.DefaultOptions()
	o.Audio = false // one run at a time within a clip: ffprobe, then ffmpeg
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := decodeVideos(context.Background(), clip, o, f.find)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(log))
	if len(lines) != 8 {
		t.Fatalf("%d runs logged, want 4 (ffprobe and ffmpeg per video): %q", len(lines)/2, lines)
	}
	for i, l := range lines {
		if want := []string{"start", "end"}[i%2]; l != want {
			t.Fatalf("runs overlap: %q", lines)
		}
	}

	// No place free: the request's context ends while it waits.
	tools.Slots <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := decodeVideos(ctx, clip, o, f.find); !errors.Is(err, context.DeadlineExceeded) || IsRequestError(err) {
		t.Errorf("waiting for a place: %v, want context.DeadlineExceeded and no refusal", err)
	}
}
