package record

import (
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/clefrt/clef/engine/api"
)

// Media is what a record's media add to it, as their processors measured
// them: per image, per audio clip and per video, in request order, the
// number of placeholder tokens each expands to. The encoder writes their
// placeholder runs right after the prefix, before the state (spec §1.2):
// every image as <|vision_start|><|image_pad|>…<|vision_end|>\n, then every
// clip as <|audio_start|><|audio_pad|>…<|audio_end|>\n, then every video as
// <|vision_start|><|video_pad|>…<|vision_end|>\n, or, heard
// (use_audio_in_video), as <|vision_start|><|audio_start|>, its video and
// soundtrack pads interleaved by time, <|audio_end|><|vision_end|>\n.
type Media struct {
	ImageTokens []int   // per image: its merged patches, t·(h/merge)·(w/merge)
	AudioTokens []int   // per clip: N_audio of its mel frames (spec §5.4)
	Videos      []Video // per video
	// PositionIDPerSeconds is the thinker's position_id_per_seconds: the
	// time scale on which a heard video's frames and sound are interleaved.
	// Only read for heard videos.
	PositionIDPerSeconds float64
}

// Video is one video's placeholder measure.
type Video struct {
	Frames      int // temporal patches (grid t)
	FrameTokens int // merged patches of one temporal patch, (h/merge)·(w/merge)
	// SecondsPerGrid is the time one temporal patch covers
	// (temporal_patch_size / fps); only read when the video is heard.
	SecondsPerGrid float64
	// AudioTokens is the soundtrack's N_audio when the video is heard
	// (use_audio_in_video); 0 for a silent video.
	AudioTokens int
}

// Placement says where a record's media sit in Encoded.InputIDs: the media
// block [Start, End) (Start is the prefix's length; the state follows at
// End), and per item the run of its pad tokens, [start, end): the rows the
// towers' outputs replace. A heard video's run holds its video and audio
// pads interleaved.
type Placement struct {
	Start, End int
	Images     [][2]int
	Audio      [][2]int
	Videos     [][2]int
}

// Marker texts of the media placeholders (special tokens of the Qwen3-Omni
// tokenizer).
const (
	VisionStart = "<|vision_start|>"
	VisionEnd   = "<|vision_end|>"
	ImagePad    = "<|image_pad|>"
	VideoPad    = "<|video_pad|>"
	AudioStart  = "<|audio_start|>"
	AudioEnd    = "<|audio_end|>"
	AudioPad    = "<|audio_pad|>"
)

// EncodeMedia encodes a request with media: the prefix, m's placeholders
// (see Media), the state (cut from its end to fit), the schema and the
// suffix, and says where the media went. The media count toward maxLength
// (<= 0: DefaultMaxLength) and are never cut: only the state is. Media
// needing more than maxLength tokens on their own, or leaving no room for
// the prompt and schema, are a 413 api.Error; text that would be taken for
// media (see strayMarkers) a 422. It fails as Encode does otherwise; the
// request's media fields themselves are not looked at (m describes them).
// Encoded.FixedLength includes the media block. A count no processor can
// produce (an item of no tokens) or a tokenizer without the media markers
// is an error of the caller.
func EncodeMedia(tok Tokenizer, req *api.Request, maxLength int, m Media) (*Encoded, *Placement, error) {
	if maxLength <= 0 {
		maxLength = DefaultMaxLength
	}
	ids, pl, mk, err := placeholders(tok, m, maxLength)
	if err != nil {
		return nil, nil, err
	}
	enc, prefix, err := encode(tok, req, maxLength, ids)
	if err != nil {
		return nil, nil, err
	}
	pl.shift(prefix)
	visual := len(m.ImageTokens)+len(m.Videos) > 0
	if err := strayMarkers(enc, pl.End, mk, visual); err != nil {
		return nil, nil, err
	}
	return enc, pl, nil
}

// strayMarkers refuses a record whose text after the media block (the
// state as kept, the schema) holds a media pad, or, with images or videos,
// an <|audio_start|>: transformers would take them for media (and fail, or
// put a tower's rows in the wrong place). The other markers are harmless
// text there, as in transformers.
func strayMarkers(enc *Encoded, from int, mk markers, visual bool) error {
	names := map[int]string{mk.imagePad: ImagePad, mk.videoPad: VideoPad, mk.audioPad: AudioPad}
	if visual {
		names[mk.audioStart] = AudioStart
	}
	for i := from; i < len(enc.InputIDs); i++ {
		name, ok := names[enc.InputIDs[i]]
		if !ok {
			continue
		}
		field, where := "questions", "schema"
		if i < from+enc.StateTokens {
			field, where = "state", "state"
		}
		return refErr(http.StatusUnprocessableEntity, api.CodeValidation, field, "ValueError",
			fmt.Sprintf("the %s holds the media token %s, which a record with media cannot carry in its text", where, name), "")
	}
	return nil
}

// shift moves every span of p by d.
func (p *Placement) shift(d int) {
	p.Start += d
	p.End += d
	for _, runs := range [][][2]int{p.Images, p.Audio, p.Videos} {
		for i := range runs {
			runs[i][0] += d
			runs[i][1] += d
		}
	}
}

// markers are the ids of the placeholder markers in one tokenizer.
type markers struct {
	visionStart, visionEnd, imagePad, videoPad, audioStart, audioEnd, audioPad int
	newline                                                                    []int
}

// markerIDs looks the markers up in tok: each must be one token.
func markerIDs(tok Tokenizer) (markers, error) {
	var mk markers
	for _, x := range []struct {
		text string
		id   *int
	}{
		{VisionStart, &mk.visionStart}, {VisionEnd, &mk.visionEnd}, {ImagePad, &mk.imagePad}, {VideoPad, &mk.videoPad},
		{AudioStart, &mk.audioStart}, {AudioEnd, &mk.audioEnd}, {AudioPad, &mk.audioPad},
	} {
		ids := tok.Encode(x.text)
		if len(ids) != 1 {
			return mk, fmt.Errorf("record: the tokenizer has no %s token (it encodes to %d ids)", x.text, len(ids))
		}
		*x.id = ids[0]
	}
	mk.newline = tok.Encode("\n")
	return mk, nil
}

// errMediaCount is returned for a count no processor produces.
var errMediaCount = errors.New("record: impossible media measure")

// satAdd and satMul are + and × of non-negative counts, saturating at
// math.MaxInt instead of overflowing.
func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

func satMul(a, b int) int {
	if b != 0 && a > math.MaxInt/b {
		return math.MaxInt
	}
	return a * b
}

// placeholders builds the media block of m and where its pad runs sit,
// counted from the block's start. Its size is checked against maxLength
// before anything is allocated for it.
func placeholders(tok Tokenizer, m Media, maxLength int) ([]int, *Placement, markers, error) {
	if len(m.ImageTokens)+len(m.AudioTokens)+len(m.Videos) == 0 {
		return nil, nil, markers{}, errors.New("record: EncodeMedia without media (use Encode)")
	}
	mk, err := markerIDs(tok)
	if err != nil {
		return nil, nil, mk, err
	}
	marks := 2 + len(mk.newline) // start, end, newline
	total := 0
	for i, n := range m.ImageTokens {
		if n <= 0 {
			return nil, nil, mk, fmt.Errorf("%w: image %d has %d tokens", errMediaCount, i, n)
		}
		total = satAdd(total, satAdd(marks, n))
	}
	for i, n := range m.AudioTokens {
		if n <= 0 {
			return nil, nil, mk, fmt.Errorf("%w: audio clip %d has %d tokens", errMediaCount, i, n)
		}
		total = satAdd(total, satAdd(marks, n))
	}
	for i, v := range m.Videos {
		if v.Frames <= 0 || v.FrameTokens <= 0 || v.AudioTokens < 0 {
			return nil, nil, mk, fmt.Errorf("%w: video %d has %d frames of %d tokens and %d audio tokens",
				errMediaCount, i, v.Frames, v.FrameTokens, v.AudioTokens)
		}
		n := satAdd(satMul(v.Frames, v.FrameTokens), v.AudioTokens)
		if v.AudioTokens > 0 {
			if !(v.SecondsPerGrid > 0) || math.IsInf(v.SecondsPerGrid, 0) {
				return nil, nil, mk, fmt.Errorf("%w: heard video %d has second_per_grid %v", errMediaCount, i, v.SecondsPerGrid)
			}
			if p := m.PositionIDPerSeconds; !(p > 0) || math.IsInf(p, 0) {
				return nil, nil, mk, fmt.Errorf("%w: a heard video needs a positive position_id_per_seconds, got %v", errMediaCount, p)
			}
			n = satAdd(n, 2) // <|audio_start|>, <|audio_end|>
		}
		total = satAdd(total, satAdd(marks, n))
	}
	if total > maxLength {
		return nil, nil, mk, refErr(http.StatusRequestEntityTooLarge, api.CodeTooLong, "", "ValueError",
			fmt.Sprintf("media need %d tokens, more than max_length %d", total, maxLength), "")
	}

	ids := make([]int, 0, total)
	pl := &Placement{}
	run := func(pad, n int) [2]int {
		s := len(ids)
		for range n {
			ids = append(ids, pad)
		}
		return [2]int{s, len(ids)}
	}
	for _, n := range m.ImageTokens {
		ids = append(ids, mk.visionStart)
		pl.Images = append(pl.Images, run(mk.imagePad, n))
		ids = append(append(ids, mk.visionEnd), mk.newline...)
	}
	for _, n := range m.AudioTokens {
		ids = append(ids, mk.audioStart)
		pl.Audio = append(pl.Audio, run(mk.audioPad, n))
		ids = append(append(ids, mk.audioEnd), mk.newline...)
	}
	for _, v := range m.Videos {
		if v.AudioTokens == 0 {
			ids = append(ids, mk.visionStart)
			pl.Videos = append(pl.Videos, run(mk.videoPad, v.Frames*v.FrameTokens))
			ids = append(append(ids, mk.visionEnd), mk.newline...)
			continue
		}
		ids = append(ids, mk.visionStart, mk.audioStart)
		s := len(ids)
		for _, isVideo := range Interleave(v, m.PositionIDPerSeconds) {
			if isVideo {
				ids = append(ids, mk.videoPad)
			} else {
				ids = append(ids, mk.audioPad)
			}
		}
		pl.Videos = append(pl.Videos, [2]int{s, len(ids)})
		ids = append(append(ids, mk.audioEnd, mk.visionEnd), mk.newline...)
	}
	pl.End = len(ids)
	return ids, pl, mk, nil
}

// Interleave returns the order of a heard video's pads, true for a video
// pad and false for an audio pad, as the processor writes them: the video
// pads of temporal patch k stand at time k·SecondsPerGrid·perSecond, audio
// pad j at time j, and the earlier comes first, video first on a tie; the
// rest of the longer stream follows. get_rope_index gives them the same
// order.
func Interleave(v Video, perSecond float64) []bool {
	nv, na := 0, max(v.AudioTokens, 0)
	if v.Frames > 0 && v.FrameTokens > 0 {
		nv = v.Frames * v.FrameTokens
	}
	out := make([]bool, 0, nv+na)
	iv, ia := 0, 0
	for iv < nv && ia < na {
		if t := float64(iv/v.FrameTokens) * v.SecondsPerGrid * perSecond; t <= float64(ia) {
			out = append(out, true)
			iv++
		} else {
			out = append(out, false)
			ia++
		}
	}
	for ; iv < nv; iv++ {
		out = append(out, true)
	}
	for ; ia < na; ia++ {
		out = append(out, false)
	}
	return out
}
