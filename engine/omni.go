package engine

// A record's pictures and sound: decoded (engine/media), processed
// (engine/processor), measured for the record's placeholders, then run
// through the towers and composed with the text (engine/model/omni) when
// the decision runs.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/media"
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
	// image and sound are the processors' settings: the release's, with
	// the reference's IMAGE_SIZE limits for pictures.
	image release.ImageProcessor
	sound release.AudioProcessor
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
	t.image, t.sound = processorSettings(r.Config.Processor)
	t.merge, t.perSecond = t.image.MergeSize, float64(cfg.PositionIDPerSeconds)
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
	clips  []processor.AudioFeatures
	// images and clips are the items' encoded bytes, for the prefix cache
	// key (digest, computed only for a record the cache can take).
	imageBytes, clipBytes [][]byte
	// decode and process are the time the decoders and processors took.
	decode, process time.Duration
}

// digest is the SHA-256 of the media's bytes (omni.MediaDigest).
func (m *mediaInput) digest() [32]byte {
	return omni.MediaDigest(m.imageBytes, m.clipBytes, nil, false)
}

// counts are the placeholder counts of the record encoding.
func (m *mediaInput) counts(merge int) record.Media {
	var rm record.Media
	for _, p := range m.images {
		rm.ImageTokens = append(rm.ImageTokens, p.Tokens(merge))
	}
	for _, c := range m.clips {
		rm.AudioTokens = append(rm.AudioTokens, processor.AudioTokens(c.Frames))
	}
	return rm
}

// layout is what the 3-D positions need of the media.
func (m *mediaInput) layout() omni.Media {
	var om omni.Media
	for _, p := range m.images {
		om.Images = append(om.Images, p.Grid)
	}
	for _, c := range m.clips {
		om.Audio = append(om.Audio, processor.AudioTokens(c.Frames))
	}
	return om
}

// readMedia decodes and processes req's images and audio (nil when it has
// none). Every refusal is a 422 naming the item. Videos are refused: this
// runtime does not read them yet.
func (e *Engine) readMedia(req *api.Request) (*mediaInput, error) {
	if err := req.RefuseMedia("video input is not supported yet by this runtime (images and audio are)", "videos"); err != nil {
		return nil, err
	}
	if e.towers.vision == nil {
		if err := req.RefuseMedia(e.towers.noVision, "images"); err != nil {
			return nil, err
		}
	}
	if e.towers.audio == nil {
		if err := req.RefuseMedia(e.towers.noAudio, "audio"); err != nil {
			return nil, err
		}
	}
	return readMedia(req, e.towers.image, e.towers.sound)
}

// MediaCounts decodes and processes req's images and audio with the
// release's processor settings (proc; nil: release.DefaultProcessor, the
// reference's IMAGE_SIZE limits applied as the engine does) and returns the
// placeholder counts the record encoding needs (clef encode): what the
// model would read, without running it. Refusals are 422 api.Errors naming
// the item; videos are refused as Decide refuses them.
func MediaCounts(req *api.Request, proc *release.Processor) (record.Media, error) {
	if err := req.RefuseMedia("video input is not supported yet by this runtime (images and audio are)", "videos"); err != nil {
		return record.Media{}, err
	}
	image, sound := processorSettings(proc)
	m, err := readMedia(req, image, sound)
	if err != nil || m == nil {
		return record.Media{}, err
	}
	return m.counts(image.MergeSize), nil
}

// processorSettings are the processors' settings of a release (nil: the
// release's defaults) as the reference calls them: the image processor
// with its IMAGE_SIZE pixel limits.
func processorSettings(proc *release.Processor) (release.ImageProcessor, release.AudioProcessor) {
	if proc == nil {
		proc = release.DefaultProcessor()
	}
	image := proc.Image
	image.MinPixels, image.MaxPixels = processor.ImageSize.MinPixels, processor.ImageSize.MaxPixels
	return image, proc.Audio
}

// readMedia decodes and processes req's images and audio (nil when it has
// none) with the given processor settings.
func readMedia(req *api.Request, image release.ImageProcessor, sound release.AudioProcessor) (*mediaInput, error) {
	imgItems, clipItems := req.MediaItems("images"), req.MediaItems("audio")
	if len(imgItems)+len(clipItems) == 0 {
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
	m.imageBytes, m.clipBytes = bytesOf(imgSrc), bytesOf(clipSrc)
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
	m.decode = time.Since(start)

	start = time.Now()
	for i, img := range imgs {
		p, err := processor.Image(img, image)
		if err != nil {
			return nil, itemRefusal("images", i, err)
		}
		m.images = append(m.images, p)
	}
	if len(clips) > 0 {
		samples := make([][]float32, len(clips))
		for i, c := range clips {
			samples[i] = c.Samples
		}
		// One processor call for all clips, as the reference makes it (the
		// shorter clips are padded to the longest).
		if m.clips, err = processor.LogMelBatch(samples, sound); err != nil {
			return nil, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeValidation, Field: "audio", Message: "audio: " + err.Error()}
		}
		for i, c := range m.clips {
			if c.Frames <= 0 {
				return nil, itemRefusal("audio", i, errors.New("too short: no whole 10 ms frame of sound"))
			}
		}
	}
	m.process = time.Since(start)
	return m, nil
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
		for _, v := range tw.Images {
			b.Free(v.Rows)
			b.Free(v.Deepstack...)
		}
		b.Free(tw.Audio...)
	}()
	m := p.media
	if len(m.images) > 0 {
		var pixels []float32
		grids := make([][3]int, len(m.images))
		for i, img := range m.images {
			pixels = append(pixels, img.Pixels...)
			grids[i] = img.Grid
		}
		out, err := e.towers.vision.Forward(ctx, pixels, grids)
		if err != nil {
			return qwen3moe.Input{}, fmt.Errorf("vision tower: %w", err)
		}
		tw.Images = []omni.Visual{{Rows: out.Embeds, Deepstack: out.Deepstack}}
	}
	for i, c := range m.clips {
		out, err := e.towers.audio.Forward(ctx, c.Mel, c.Frames, e.towers.audioAttention)
		if err != nil {
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

// Hidden runs req's record through the thinker alone (the towers and the
// decoder; no head) and returns the final normed hidden state of every
// position, [rows, hidden] row-major: what clef hidden --request writes.
func (e *Engine) Hidden(ctx context.Context, req *api.Request) (hidden []float32, rows int, err error) {
	p, err := e.Prepare(req)
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
