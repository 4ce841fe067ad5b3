package engine

// A record's pictures, sound and videos: decoded (engine/media,
// engine/media/video), processed (engine/processor), measured for the
// record's placeholders, then run through the towers and composed with the
// text (engine/model/omni) when the decision runs.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/media"
	"github.com/clefrt/clef/engine/media/video"
	"github.com/clefrt/clef/engine/model/audio"
	"github.com/clefrt/clef/engine/model/omni"
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/model/vision"
	"github.com/clefrt/clef/engine/processor"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// towers are the thinker's encoders and the processors that feed them; a
// tower is nil when the model has none (a GGUF without its companion, a
// text-only conversion), and requests needing it are refused.
type towers struct {
	vision *vision.Model
	audio  *audio.Model
	// settings are the processors' settings: the release's, with the
	// reference's IMAGE_SIZE limits for pictures and VIDEO_SIZE for videos.
	settings mediaSettings
	// merge is the vision tower's spatial merge size (the positions' unit)
	// and perSecond the thinker's position_id_per_seconds.
	merge     int
	perSecond float64
	// audioAttention is how the audio tower attends (Options).
	audioAttention audio.Options
	// noVision and noAudio say why a tower is missing: the text decoder
	// serves on without it, and media needing it are refused saying so.
	noVision, noAudio string
}

// loadTowers binds the towers the configuration describes and the weights
// hold.
func loadTowers(r *release.Release, b backend.Backend, opts Options) (towers, error) {
	cfg := r.Config.Thinker
	t := towers{audioAttention: audio.Options{FullAttention: opts.AudioFullAttention}}
	t.settings = processorSettings(r.Config.Processor)
	t.merge, t.perSecond = t.settings.image.MergeSize, float64(cfg.PositionIDPerSeconds)
	if cfg.Vision != nil {
		t.merge = cfg.Vision.SpatialMergeSize
	}
	// A tower that is absent, or that cannot be bound (a checkpoint whose
	// tower layout this runtime does not read, such as a convolution stored
	// channels-last), leaves the text path working; requests needing it
	// are refused with the reason.
	const absent = "this model has no %s tower (a GGUF needs the companion file clef quantize writes beside it)"
	switch {
	case cfg.Vision == nil || !hasTower(r.Weights, "vision"):
		t.noVision = fmt.Sprintf(absent, "vision")
	default:
		if m, err := vision.Load(r.Weights, *cfg.Vision, b); err != nil {
			t.noVision = "this model's vision tower cannot be used: " + err.Error()
		} else {
			t.vision = m
		}
	}
	switch {
	case cfg.Audio == nil || !hasTower(r.Weights, "audio"):
		t.noAudio = fmt.Sprintf(absent, "audio")
	default:
		if m, err := audio.Load(r.Weights, *cfg.Audio, b); err != nil {
			t.noAudio = "this model's audio tower cannot be used: " + err.Error()
		} else {
			t.audio = m
		}
	}
	return t, nil
}

// hasTower reports whether the weights hold any tensor of the named tower.
func hasTower(w weights.Model, tower string) bool {
	for _, n := range w.Names() {
		if release.TowerOf(n) == tower {
			return true
		}
	}
	return false
}

// mediaInput is a request's media, decoded and processed: what the towers
// read, and what the record's placeholders and positions need.
type mediaInput struct {
	images []processor.ImagePatches
	videos []processor.VideoPatches
	// clips are the audio batch the towers read, as the reference's
	// processor call receives it: the request's own clips (the first
	// ownClips), then, when the videos are heard, each video's soundtrack.
	clips    []processor.AudioFeatures
	ownClips int
	// heard is use_audio_in_video: at least one video, and every video has
	// a soundtrack.
	heard bool
	// imageBytes, clipBytes and videoBytes are the items' encoded bytes,
	// for the prefix cache key (digest, computed only for a record the
	// cache can take).
	imageBytes, clipBytes, videoBytes [][]byte
	// decode and process are the time the decoders and processors took.
	decode, process time.Duration
}

// digest is the SHA-256 of the media's bytes and of whether the videos
// are heard (omni.MediaDigest).
func (m *mediaInput) digest() [32]byte {
	return omni.MediaDigest(m.imageBytes, m.clipBytes, m.videoBytes, m.heard)
}

// counts are the placeholder counts of the record encoding.
func (m *mediaInput) counts(merge int) record.Media {
	rm := record.Media{PositionIDPerSeconds: processor.PositionIDPerSeconds}
	for _, p := range m.images {
		rm.ImageTokens = append(rm.ImageTokens, p.Tokens(merge))
	}
	for _, c := range m.clips[:m.ownClips] {
		rm.AudioTokens = append(rm.AudioTokens, processor.AudioTokens(c.Frames))
	}
	for i, v := range m.videos {
		rv := record.Video{Frames: v.Grid[0], FrameTokens: v.FrameTokens(merge), SecondsPerGrid: v.SecondsPerGrid}
		if m.heard {
			rv.AudioTokens = processor.AudioTokens(m.clips[m.ownClips+i].Frames)
		}
		rm.Videos = append(rm.Videos, rv)
	}
	return rm
}

// layout is what the 3-D positions need of the media.
func (m *mediaInput) layout() omni.Media {
	var om omni.Media
	for _, p := range m.images {
		om.Images = append(om.Images, p.Grid)
	}
	for _, v := range m.videos {
		om.Videos = append(om.Videos, omni.Video{Grid: v.Grid, SecondsPerGrid: v.SecondsPerGrid})
	}
	for _, c := range m.clips {
		om.Audio = append(om.Audio, processor.AudioTokens(c.Frames))
	}
	return om
}

// readMedia decodes and processes req's images, audio and videos (nil
// when it has none). Every refusal is a 422 naming the item; ctx bounds
// the video decoders.
func (e *Engine) readMedia(ctx context.Context, req *api.Request) (*mediaInput, error) {
	if e.towers.vision == nil {
		if err := req.RefuseMedia(e.towers.noVision, "images", "videos"); err != nil {
			return nil, err
		}
	}
	if e.towers.audio == nil {
		if err := req.RefuseMedia(e.towers.noAudio, "audio"); err != nil {
			return nil, err
		}
	}
	m, err := readMedia(ctx, req, e.towers.settings, e.ffmpeg.find)
	if err != nil || m == nil {
		return m, err
	}
	if m.heard && e.towers.audio == nil {
		// Answering unheard would not be the reference's answer.
		return nil, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: "videos",
			Message: "videos: their soundtracks would be heard, but " + e.towers.noAudio}
	}
	return m, nil
}

// MediaCounts is MediaCountsContext with no deadline and the ffmpeg of
// $CLEF_FFMPEG or PATH.
func MediaCounts(req *api.Request, proc *release.Processor) (record.Media, error) {
	return MediaCountsContext(context.Background(), req, proc, "")
}

// MediaCountsContext decodes and processes req's images, audio and videos
// with the release's processor settings (proc; nil:
// release.DefaultProcessor; the reference's IMAGE_SIZE and VIDEO_SIZE
// limits applied as the engine does), videos with the ffmpeg named (""
// looks at $CLEF_FFMPEG, then PATH) under ctx, and returns the placeholder
// counts the record encoding needs (clef encode): what the model would
// read, without running it. Refusals are 422 api.Errors naming the item.
func MediaCountsContext(ctx context.Context, req *api.Request, proc *release.Processor, ffmpeg string) (record.Media, error) {
	set := processorSettings(proc)
	tools := &ffmpegTools{path: ffmpeg}
	m, err := readMedia(ctx, req, set, tools.find)
	if err != nil || m == nil {
		return record.Media{}, err
	}
	return m.counts(set.image.MergeSize), nil
}

// mediaSettings are the processors' settings as the reference calls them:
// the image processor with IMAGE_SIZE for pictures and with VIDEO_SIZE
// for videos, and the feature extractor.
type mediaSettings struct {
	image, video release.ImageProcessor
	sound        release.AudioProcessor
}

// processorSettings are the processors' settings of a release (nil: the
// release's defaults) as the reference calls them (mediaSettings).
func processorSettings(proc *release.Processor) mediaSettings {
	if proc == nil {
		proc = release.DefaultProcessor()
	}
	s := mediaSettings{image: proc.Image, video: proc.Image, sound: proc.Audio}
	s.image.MinPixels, s.image.MaxPixels = processor.ImageSize.MinPixels, processor.ImageSize.MaxPixels
	s.video.MinPixels, s.video.MaxPixels = processor.VideoSize.MinPixels, processor.VideoSize.MaxPixels
	return s
}

// ffmpegTools finds the FFmpeg executables at the first video and keeps
// them; a search that fails is tried again at the next video (ffmpeg may
// have been installed meanwhile). The tools found bound the machine taken
// by every request sharing them: at most decodeSlots() clips decode at
// once (each runs up to two ffmpeg processes and holds ~100 MB of frames;
// the others wait, until their request's context ends), each ffmpeg run
// with at most ffmpegThreads() threads. Safe for concurrent use.
type ffmpegTools struct {
	path  string // Options.FFmpeg
	mu    sync.Mutex
	tools *video.Tools
}

// find returns the executables, or an error wrapping video.ErrNoFFmpeg.
func (f *ffmpegTools) find() (*video.Tools, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tools == nil {
		t, err := video.Find(f.path)
		if err != nil {
			return nil, err
		}
		t.Threads = ffmpegThreads()
		t.Slots = make(chan struct{}, decodeSlots())
		f.tools = t
	}
	return f.tools, nil
}

// decodeSlots is how many clips may decode at once: a quarter of the
// cores, at least one.
func decodeSlots() int { return max(1, runtime.NumCPU()/4) }

// ffmpegThreads is each ffmpeg run's thread count: the cores, at most 4.
func ffmpegThreads() int { return min(runtime.NumCPU(), 4) }

// readMedia decodes and processes req's images, audio and videos (nil
// when it has none) with the given settings. Every list's count and bytes
// are checked before anything is decoded. Videos are decoded with the
// tools find returns (looked up at the first video), each under ctx with
// the reference's sampling and the hosted limits; their soundtracks join
// the audio batch, after the request's clips, when every video has one
// (use_audio_in_video), and are not used otherwise, as the reference
// answers such a record unheard.
func readMedia(ctx context.Context, req *api.Request, set mediaSettings, find func() (*video.Tools, error)) (*mediaInput, error) {
	imgItems, clipItems, vidItems := req.MediaItems("images"), req.MediaItems("audio"), req.MediaItems("videos")
	if len(imgItems)+len(clipItems)+len(vidItems) == 0 {
		return nil, nil
	}
	start := time.Now()
	m := &mediaInput{}
	lim := media.HostedLimits()
	imgSrc, err := sources("images", imgItems)
	if err != nil {
		return nil, err
	}
	clipSrc, err := sources("audio", clipItems)
	if err != nil {
		return nil, err
	}
	vidSrc, err := sources("videos", vidItems)
	if err != nil {
		return nil, err
	}
	if err := media.CheckVideos(vidSrc, clipSrc, lim); err != nil {
		return nil, mediaRefusal(err)
	}
	m.imageBytes, m.clipBytes, m.videoBytes = bytesOf(imgSrc), bytesOf(clipSrc), bytesOf(vidSrc)
	var imgs []*media.Image
	if len(imgSrc) > 0 {
		if imgs, err = media.Images(imgSrc, lim); err != nil {
			return nil, mediaRefusal(err)
		}
	}
	var clips []*media.Clip
	if len(clipSrc) > 0 {
		if clips, err = media.Audio(clipSrc, lim); err != nil {
			return nil, mediaRefusal(err)
		}
	}
	vopts := video.DefaultOptions()
	if lim.VideoSeconds > 0 {
		vopts.MaxSeconds = lim.VideoSeconds
	}
	vids, err := decodeVideos(ctx, vidSrc, vopts, find)
	if err != nil {
		return nil, err
	}
	m.decode = time.Since(start)

	start = time.Now()
	for i, img := range imgs {
		p, err := processor.Image(img, set.image)
		if err != nil {
			return nil, itemRefusal("images", i, err)
		}
		m.images = append(m.images, p)
	}
	m.heard = len(vids) > 0
	for i, v := range vids {
		p, err := processor.Video(v.Frames, set.video, vopts.FPS)
		if err != nil {
			return nil, itemRefusal("videos", i, err)
		}
		m.videos = append(m.videos, p)
		vids[i].Frames = nil // the patches hold them now
		if v.Audio == nil || len(v.Audio.Samples) == 0 {
			m.heard = false
		}
	}
	samples := make([][]float32, 0, len(clips)+len(vids))
	for _, c := range clips {
		samples = append(samples, c.Samples)
	}
	m.ownClips = len(clips)
	if m.heard {
		for _, v := range vids {
			samples = append(samples, v.Audio.Samples)
		}
	}
	if len(samples) > 0 {
		// One processor call for all clips and soundtracks, as the
		// reference makes it (the shorter ones are padded to the longest).
		if m.clips, err = processor.LogMelBatch(samples, set.sound); err != nil {
			return nil, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: "audio", Message: "audio: " + err.Error()}
		}
		for i, c := range m.clips {
			if c.Frames > 0 {
				continue
			}
			if i < m.ownClips {
				return nil, itemRefusal("audio", i, errors.New("too short: no whole 10 ms frame of sound"))
			}
			return nil, itemRefusal("videos", i-m.ownClips, errors.New("its soundtrack is too short: no whole 10 ms frame of sound"))
		}
	}
	m.process = time.Since(start)
	return m, nil
}

// decodeVideos decodes each video with the tools find returns (none is
// looked up when there are no videos). What the decoder refuses (no
// ffmpeg, a corrupt clip, no video stream, too long, a decoder that failed
// or was killed) is a 422 naming the item; ctx ending, and any other
// failure, are errors of the runtime.
func decodeVideos(ctx context.Context, srcs []media.Source, o video.Options, find func() (*video.Tools, error)) ([]*video.Clip, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	tools, err := find()
	if err != nil {
		return nil, itemRefusal("videos", 0, err)
	}
	out := make([]*video.Clip, len(srcs))
	for i, s := range srcs {
		c, err := tools.Decode(ctx, s.Data, o)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, fmt.Errorf("engine: videos[%d]: %w", i, ctx.Err())
		case errors.Is(err, video.ErrCorrupt), errors.Is(err, video.ErrNoVideoStream), errors.Is(err, video.ErrTooLong),
			errors.Is(err, video.ErrDecoder), errors.Is(err, video.ErrNoFFmpeg):
			return nil, itemRefusal("videos", i, err)
		default: // not the video's fault
			return nil, fmt.Errorf("engine: videos[%d]: %w", i, err)
		}
		out[i] = c
	}
	return out, nil
}

// sources parses the items of one media list.
func sources(field string, items []api.MediaItem) ([]media.Source, error) {
	srcs := make([]media.Source, len(items))
	for i, it := range items {
		var err error
		if it.URL != "" {
			srcs[i], err = media.ParseDataURL(it.URL)
		} else {
			srcs[i], err = media.FromBase64(it.ContentType, it.Base64)
		}
		if err != nil {
			return nil, itemRefusal(field, i, err)
		}
	}
	return srcs, nil
}

// bytesOf lists the sources' bytes.
func bytesOf(srcs []media.Source) [][]byte {
	out := make([][]byte, len(srcs))
	for i, s := range srcs {
		out[i] = s.Data
	}
	return out
}

// itemRefusal is the 422 of one media item: "images[2]: ...".
func itemRefusal(field string, i int, err error) error {
	return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: fmt.Sprintf("%s.%d", field, i),
		Message: fmt.Sprintf("%s[%d]: %v", field, i, err)}
}

// mediaRefusal turns a decoder's refusal into the request's 422.
func mediaRefusal(err error) error {
	var me *media.Error
	if !errors.As(err, &me) {
		return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Message: err.Error()}
	}
	field := me.Field
	if me.Index >= 0 {
		field = fmt.Sprintf("%s.%d", me.Field, me.Index)
	}
	return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: field, Message: me.Error()}
}

// towerInput runs the towers on a prepared record's media and composes the
// decoder's input: the token embeddings with the towers' rows in place of
// the placeholders, the DeepStack features at the visual rows, the 3-D
// positions.
func (e *Engine) towerInput(ctx context.Context, p *Prepared, st *Stats) (qwen3moe.Input, error) {
	start := time.Now()
	b := e.backend
	var tw omni.Towers
	defer func() {
		for _, v := range append(tw.Images, tw.Videos...) {
			b.Free(v.Rows)
			b.Free(v.Deepstack...)
		}
		b.Free(tw.Audio...)
	}()
	m := p.media
	// The vision tower runs once on all images and once on all videos, as
	// the reference's get_image_features and get_video_features do.
	if len(m.images) > 0 {
		pixels, grids := [][]float32{}, [][3]int{}
		for _, img := range m.images {
			pixels, grids = append(pixels, img.Pixels), append(grids, img.Grid)
		}
		v, err := e.visual(ctx, pixels, grids)
		if err != nil {
			return qwen3moe.Input{}, fmt.Errorf("vision tower, images: %w", err)
		}
		tw.Images = []omni.Visual{v}
	}
	if len(m.videos) > 0 {
		pixels, grids := [][]float32{}, [][3]int{}
		for _, vid := range m.videos {
			pixels, grids = append(pixels, vid.Pixels), append(grids, vid.Grid)
		}
		v, err := e.visual(ctx, pixels, grids)
		if err != nil {
			return qwen3moe.Input{}, fmt.Errorf("vision tower, videos: %w", err)
		}
		tw.Videos = []omni.Visual{v}
	}
	// The clips, then the heard videos' soundtracks: the order of their
	// pads in the record.
	for i, c := range m.clips {
		out, err := e.towers.audio.Forward(ctx, c.Mel, c.Frames, e.towers.audioAttention)
		if err != nil {
			if i >= m.ownClips {
				return qwen3moe.Input{}, fmt.Errorf("audio tower, soundtrack of video %d: %w", i-m.ownClips, err)
			}
			return qwen3moe.Input{}, fmt.Errorf("audio tower, clip %d: %w", i, err)
		}
		tw.Audio = append(tw.Audio, out)
	}
	in, err := omni.Compose(ctx, e.decoder, p.enc.InputIDs, e.tokens, tw)
	if err != nil {
		return qwen3moe.Input{}, err
	}
	in.Positions = p.positions
	st.Towers = time.Since(start)
	return in, nil
}

// visual runs the vision tower on items of the given patches and grids
// (their patches concatenated; a single item's are used as they are).
func (e *Engine) visual(ctx context.Context, pixels [][]float32, grids [][3]int) (omni.Visual, error) {
	all := pixels[0]
	if len(pixels) > 1 {
		n := 0
		for _, p := range pixels {
			n += len(p)
		}
		all = make([]float32, 0, n)
		for _, p := range pixels {
			all = append(all, p...)
		}
	}
	out, err := e.towers.vision.Forward(ctx, all, grids)
	if err != nil {
		return omni.Visual{}, err
	}
	return omni.Visual{Rows: out.Embeds, Deepstack: out.Deepstack}, nil
}

// Hidden runs req's record through the thinker alone (the towers and the
// decoder; no head; the media decoded under ctx) and returns the final normed hidden state of every
// position, [rows, hidden] row-major: what clef hidden --request writes.
func (e *Engine) Hidden(ctx context.Context, req *api.Request) (hidden []float32, rows int, err error) {
	p, err := e.PrepareContext(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ib, ok := e.backend.(backend.Interruptible); ok {
		defer ib.Interrupt(ctx)()
	}
	hidden, err = e.thinker(ctx, p, &Stats{}, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("engine: thinker: %w", err)
	}
	return hidden, len(p.enc.InputIDs), nil
}
