package bench

// Media scenarios: records carrying a picture, a clip, a video or several,
// generated from a seed (videos with the system's ffmpeg), so the time of the
// decoders, processors and towers shows next to the decoder's.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/processor"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
)

// MediaKind is one media scenario: how many synthetic pictures (1280×800
// JPEGs, about 1 MP, photo-like: gradients, shapes and noise), seconds of a
// synthetic clip (a 16 kHz mono 16-bit WAV of voice-like tones and noise)
// and synthetic videos (BenchVideo: an H.264 MP4, with an AAC soundtrack
// when VideoSound) its record carries.
type MediaKind struct {
	Name         string
	Images       int
	AudioSeconds int
	Videos       int
	VideoSound   bool
}

// MediaKinds are the media scenarios clef bench knows.
var MediaKinds = []MediaKind{
	{Name: "image", Images: 1},
	{Name: "audio", AudioSeconds: 30},
	{Name: "image+audio", Images: 1, AudioSeconds: 30},
	{Name: "audio300", AudioSeconds: 300},
	{Name: "video", Videos: 1},
	{Name: "video+audio", Videos: 1, VideoSound: true},
}

// ParseMedia parses a list such as "image,audio".
func ParseMedia(list string) ([]MediaKind, error) {
	var out []MediaKind
	for _, f := range splitList(list) {
		found := false
		for _, k := range MediaKinds {
			if strings.EqualFold(f, k.Name) {
				out = append(out, k)
				found = true
			}
		}
		if !found {
			names := make([]string, len(MediaKinds))
			for i, k := range MediaKinds {
				names[i] = k.Name
			}
			return nil, fmt.Errorf("bench: media scenario %q: want one of %s", f, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// Synthetic media sizes.
const (
	benchImageW, benchImageH = 1280, 800
	// imageFactor is the release's processor unit: patch 16 × merge 2.
	imageFactor = 32
	// hop is the log-mel's hop (10 ms at 16 kHz).
	hop = 160
)

// MediaOptions are how BuildMedia builds its records.
type MediaOptions struct {
	// MaxLength is the records' token budget; Seed the media's seed.
	MaxLength int
	Seed      uint64
	// FFmpeg names the ffmpeg executable that makes the synthetic videos
	// and measures them ("": $CLEF_FFMPEG, then PATH); without one the
	// video scenarios are skipped.
	FFmpeg string
	// Processor is the model's processor settings (nil: the release's
	// defaults), with which a video record's tokens are counted.
	Processor *release.Processor
}

// BuildMedia makes one scenario per kind: a one-question record whose
// short state follows the media. Token counts of pictures and clips are
// those of the release's processors (the reference's IMAGE_SIZE, 13 audio
// tokens per second); a video's are measured by decoding it as the engine
// does. Video scenarios are skipped, and listed, when no ffmpeg is found.
func BuildMedia(tok record.Tokenizer, kinds []MediaKind, o MediaOptions) ([]*Scenario, []Skipped, error) {
	var out []*Scenario
	var skipped []Skipped
	videos := newVideoMaker(o.FFmpeg)
	defer videos.close()
	for _, k := range kinds {
		name := "media-" + k.Name
		var imgs, clips, vids []string
		var m record.Media
		for i := 0; i < k.Images; i++ {
			data, err := benchJPEG(o.Seed + uint64(i))
			if err != nil {
				return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			imgs = append(imgs, "data:image/jpeg;base64,"+base64.StdEncoding.EncodeToString(data))
			h, w, err := processor.SmartResize(benchImageH, benchImageW, imageFactor, processor.ImageSize.MinPixels, processor.ImageSize.MaxPixels)
			if err != nil {
				return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
			}
			m.ImageTokens = append(m.ImageTokens, (h/imageFactor)*(w/imageFactor))
		}
		if k.AudioSeconds > 0 {
			n := k.AudioSeconds * 16000
			clips = append(clips, "data:audio/wav;base64,"+base64.StdEncoding.EncodeToString(benchWAV(n, o.Seed)))
			m.AudioTokens = append(m.AudioTokens, processor.AudioTokens(n/hop))
		}
		if k.Videos > 0 {
			if err := videos.find(); err != nil {
				skipped = append(skipped, Skipped{name, err.Error()})
				continue
			}
			for i := 0; i < k.Videos; i++ {
				data, err := videos.clip(BenchVideo(k.VideoSound, o.Seed+uint64(i)))
				if err != nil {
					return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
				}
				vids = append(vids, "data:video/mp4;base64,"+base64.StdEncoding.EncodeToString(data))
			}
		}
		body := mediaBody(imgs, clips, vids)
		req, err := api.ParseRequest(body)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
		}
		if err := req.Validate(); err != nil {
			return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
		}
		if k.Videos > 0 {
			// What the engine reads of the videos (and of everything else):
			// decoded and processed once here.
			if m, err = videos.counts(req, o.Processor); err != nil {
				return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
			}
		}
		enc, _, err := record.EncodeMedia(tok, req, o.MaxLength, m)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %s: %w", name, err)
		}
		rec := &Record{ID: name, Body: body, Req: req, InputTokens: len(enc.InputIDs), StateTokens: enc.StateTokens, StateTruncated: enc.StateTruncated, Media: &m}
		for _, q := range enc.Questions {
			rec.QuestionTypes = append(rec.QuestionTypes, q.Type)
		}
		sc := &Scenario{Name: name, Source: "synthetic", Questions: 1, Options: 2, Types: map[string]int{}, Records: []*Record{rec}}
		for _, t := range rec.QuestionTypes {
			sc.Types[api.QuestionType(t).String()]++
		}
		out = append(out, sc)
	}
	return out, skipped, nil
}

// mediaBody is a one-question request carrying the media.
func mediaBody(imgs, clips, vids []string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"clef-omni","state":"A customer sent the attached picture and voice note about a damaged parcel.",`)
	b.WriteString(`"questions":{"damaged":{"type":"noul","instructions":"Is the parcel damaged?"}}`)
	for _, f := range []struct {
		name  string
		items []string
	}{{"images", imgs}, {"audio", clips}, {"videos", vids}} {
		if len(f.items) == 0 {
			continue
		}
		fmt.Fprintf(&b, `,%q:[`, f.name)
		for i, it := range f.items {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q", it)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.Bytes()
}

// benchJPEG draws a seeded photo-like picture and encodes it (quality 90,
// 4:2:0 as cameras write it).
func benchJPEG(seed uint64) ([]byte, error) {
	rng := rand.New(rand.NewPCG(seed, 0x1a9e))
	img := image.NewRGBA(image.Rect(0, 0, benchImageW, benchImageH))
	type disc struct {
		x, y, r float64
		c       color.RGBA
	}
	discs := make([]disc, 12)
	for i := range discs {
		discs[i] = disc{rng.Float64() * benchImageW, rng.Float64() * benchImageH, 40 + rng.Float64()*160,
			color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255}}
	}
	for y := 0; y < benchImageH; y++ {
		for x := 0; x < benchImageW; x++ {
			c := color.RGBA{uint8(x * 255 / benchImageW), uint8(y * 255 / benchImageH), 128, 255}
			for _, d := range discs {
				if dx, dy := float64(x)-d.x, float64(y)-d.y; dx*dx+dy*dy < d.r*d.r {
					c = d.c
				}
			}
			n := rng.IntN(17) - 8
			img.SetRGBA(x, y, color.RGBA{clampByte(int(c.R) + n), clampByte(int(c.G) + n), clampByte(int(c.B) + n), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func clampByte(v int) uint8 { return uint8(max(0, min(255, v))) }

// benchWAV writes n samples of a seeded voice-like signal (a gliding tone
// with harmonics, syllable envelopes and noise) as a 16 kHz mono 16-bit
// PCM WAV file.
func benchWAV(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0xa0d10))
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	w(uint32(36 + 2*n))
	b.WriteString("WAVEfmt ")
	w(uint32(16))
	w(uint16(1))     // PCM
	w(uint16(1))     // mono
	w(uint32(16000)) // rate
	w(uint32(32000)) // bytes per second
	w(uint16(2))     // block align
	w(uint16(16))    // bits
	b.WriteString("data")
	w(uint32(2 * n))
	phase := 0.0
	for i := 0; i < n; i++ {
		t := float64(i) / 16000
		f0 := 140 + 40*math.Sin(2*math.Pi*0.7*t)
		phase += 2 * math.Pi * f0 / 16000
		env := 0.5 + 0.5*math.Sin(2*math.Pi*4*t)
		v := env*(0.3*math.Sin(phase)+0.15*math.Sin(2*phase)+0.08*math.Sin(3*phase)) + 0.02*rng.NormFloat64()
		w(int16(max(-32768, min(32767, math.Round(v*32767)))))
	}
	return b.Bytes()
}
