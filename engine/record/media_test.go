package record

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/api"
)

// markerTok is byteTok that knows the media markers: each is one id from
// 1000 on, in the order of markerNames.
type markerTok struct{}

var markerNames = []string{VisionStart, VisionEnd, ImagePad, VideoPad, AudioStart, AudioEnd, AudioPad}

const (
	vs = 1000 + iota
	ve
	ip
	vp
	as
	ae
	ap
)

func (markerTok) Encode(s string) []int {
	var ids []int
	for len(s) > 0 {
		at, which := len(s), -1
		for i, m := range markerNames {
			if j := strings.Index(s, m); j >= 0 && j < at {
				at, which = j, i
			}
		}
		ids = append(ids, byteTok{}.Encode(s[:at])...)
		if which < 0 {
			break
		}
		ids = append(ids, 1000+which)
		s = s[at+len(markerNames[which]):]
	}
	return ids
}

// repeat returns n copies of id.
func repeat(id, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = id
	}
	return out
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var nl = []int{'\n'}

// TestMediaLayout checks the placeholder block: every image, then every
// clip, then every video, each with its markers and newline, right after the
// prefix and before the state; the runs the towers' rows go to; the spans
// shifted past the media.
func TestMediaLayout(t *testing.T) {
	req := mustParse(t, `{"model":"m","state":"abcdef","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	m := Media{ImageTokens: []int{3, 2}, AudioTokens: []int{4}, Videos: []Video{{Frames: 2, FrameTokens: 2}}}
	enc, pl, err := EncodeMedia(markerTok{}, req, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	P := len(Prefix)
	block := cat([]int{vs}, repeat(ip, 3), []int{ve}, nl, []int{vs}, repeat(ip, 2), []int{ve}, nl,
		[]int{as}, repeat(ap, 4), []int{ae}, nl, []int{vs}, repeat(vp, 4), []int{ve}, nl)
	if text(enc.InputIDs[:P]) != Prefix {
		t.Fatal("prefix changed")
	}
	if got := enc.InputIDs[P : P+len(block)]; !equalInts(got, block) {
		t.Fatalf("media block %v, want %v", got, block)
	}
	if got := text(enc.InputIDs[P+len(block) : P+len(block)+6]); got != "abcdef" {
		t.Errorf("state after the media: %q", got)
	}
	want := Placement{Start: P, End: P + len(block),
		Images: [][2]int{{P + 1, P + 4}, {P + 7, P + 9}}, Audio: [][2]int{{P + 12, P + 16}}, Videos: [][2]int{{P + 19, P + 23}}}
	if pl.Start != want.Start || pl.End != want.End || !equalSpans(pl.Images, want.Images) ||
		!equalSpans(pl.Audio, want.Audio) || !equalSpans(pl.Videos, want.Videos) {
		t.Errorf("placement %+v, want %+v", *pl, want)
	}
	if enc.FixedLength+enc.StateTokens != len(enc.InputIDs) || enc.StateTruncated {
		t.Errorf("fixed %d + state %d != %d", enc.FixedLength, enc.StateTokens, len(enc.InputIDs))
	}
	q := enc.Questions[0]
	if text(enc.InputIDs[q.Span[0]:q.Span[1]]) != "?" {
		t.Error("question span not shifted by the media")
	}

	// Without media, EncodeMedia is the wrong call.
	if _, _, err := EncodeMedia(markerTok{}, req, 0, Media{}); err == nil {
		t.Error("EncodeMedia without media accepted")
	}
}

func equalSpans(a, b [][2]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMediaTruncation: with media the state is what is cut, never the
// media; media over max_length on their own, or leaving no room for the
// prompt and schema, are refused with a 413.
func TestMediaTruncation(t *testing.T) {
	req := mustParse(t, `{"model":"m","state":"0123456789","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	m := Media{ImageTokens: []int{5}, AudioTokens: []int{7}}
	full, pl, err := EncodeMedia(markerTok{}, req, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	media := pl.End - pl.Start
	if media != 5+7+2*3 || full.StateTokens != 10 || full.StateTruncated {
		t.Fatalf("media %d, state %d/%v", media, full.StateTokens, full.StateTruncated)
	}
	fixed := full.FixedLength
	for _, keep := range []int{9, 3, 0} {
		enc, pl, err := EncodeMedia(markerTok{}, req, fixed+keep, m)
		if err != nil {
			t.Fatalf("keep %d: %v", keep, err)
		}
		if len(enc.InputIDs) != fixed+keep || enc.StateTokens != keep || !enc.StateTruncated {
			t.Errorf("keep %d: %d ids, state %d/%v", keep, len(enc.InputIDs), enc.StateTokens, enc.StateTruncated)
		}
		if !equalInts(enc.InputIDs[pl.Start:pl.End], full.InputIDs[pl.Start:pl.End]) {
			t.Errorf("keep %d: media changed", keep)
		}
		if got := text(enc.InputIDs[pl.End : pl.End+keep]); got != "0123456789"[:keep] {
			t.Errorf("keep %d: state %q", keep, got)
		}
		q := enc.Questions[0]
		if text(enc.InputIDs[q.Span[0]:q.Span[1]]) != "?" {
			t.Errorf("keep %d: span not shifted", keep)
		}
	}
	tooLong := func(max int, msg string) {
		t.Helper()
		_, _, err := EncodeMedia(markerTok{}, req, max, m)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != 413 || ae.Code != api.CodeTooLong || ae.Message != msg {
			t.Errorf("max %d: err = %v, want the 413 %q", max, err, msg)
		}
	}
	tooLong(fixed-1, "media need 18 tokens and the prompt and schema "+strconv.Itoa(fixed-18)+" more: "+strconv.Itoa(fixed)+" tokens before state; maximum is "+strconv.Itoa(fixed-1))
	tooLong(media, "media need 18 tokens and the prompt and schema "+strconv.Itoa(fixed-18)+" more: "+strconv.Itoa(fixed)+" tokens before state; maximum is 18")
	tooLong(media-1, "media need 18 tokens, more than max_length 17")
	// Counts no real prompt can hold are refused before anything is
	// allocated, without overflowing.
	huge := Media{ImageTokens: []int{1 << 62, 1 << 62}, Videos: []Video{{Frames: 1 << 40, FrameTokens: 1 << 40}}}
	if _, _, err := EncodeMedia(markerTok{}, req, 0, huge); err == nil || !strings.Contains(err.Error(), "more than max_length 64000") {
		t.Errorf("huge media: err = %v", err)
	}
}

// TestMediaBadMeasures: counts no processor makes and a tokenizer without
// the markers are the caller's errors, not panics.
func TestMediaBadMeasures(t *testing.T) {
	req := mustParse(t, `{"model":"m","state":"s","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	for _, m := range []Media{
		{ImageTokens: []int{0}},
		{AudioTokens: []int{3, -1}},
		{Videos: []Video{{Frames: 0, FrameTokens: 4}}},
		{Videos: []Video{{Frames: 2, FrameTokens: 4, AudioTokens: -3}}},
		{Videos: []Video{{Frames: 2, FrameTokens: 4, AudioTokens: 3}}, PositionIDPerSeconds: 13}, // no second_per_grid
		{Videos: []Video{{Frames: 2, FrameTokens: 4, AudioTokens: 3, SecondsPerGrid: 1}}},        // no time scale
		{Videos: []Video{{Frames: 2, FrameTokens: 4, AudioTokens: 3, SecondsPerGrid: 1}}, PositionIDPerSeconds: -1},
	} {
		if _, _, err := EncodeMedia(markerTok{}, req, 0, m); !errors.Is(err, errMediaCount) {
			t.Errorf("%+v: err = %v, want an impossible-measure error", m, err)
		}
	}
	if _, _, err := EncodeMedia(byteTok{}, req, 0, Media{ImageTokens: []int{1}}); err == nil || !strings.Contains(err.Error(), "<|vision_start|>") {
		t.Errorf("tokenizer without markers: err = %v", err)
	}
}

// TestHeardVideo checks the interleaving of a heard video's pads: by time,
// the video pads of temporal patch k at k·second_per_grid·position_id_per_seconds,
// audio pad j at j, video first on a tie, then what is left.
func TestHeardVideo(t *testing.T) {
	v := Video{Frames: 3, FrameTokens: 2, SecondsPerGrid: 0.5, AudioTokens: 10}
	// Video times 0 0 6.5 6.5 13 13; audio 0..9.
	const want = "VVAAAAAAAVVAAAVV"
	var got strings.Builder
	for _, isVideo := range Interleave(v, 13) {
		if isVideo {
			got.WriteByte('V')
		} else {
			got.WriteByte('A')
		}
	}
	if got.String() != want {
		t.Errorf("order %s, want %s", got.String(), want)
	}

	req := mustParse(t, `{"model":"m","state":"s","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	enc, pl, err := EncodeMedia(markerTok{}, req, 0, Media{Videos: []Video{v}, AudioTokens: []int{2}, PositionIDPerSeconds: 13})
	if err != nil {
		t.Fatal(err)
	}
	var body []int
	for _, c := range want {
		if c == 'V' {
			body = append(body, vp)
		} else {
			body = append(body, ap)
		}
	}
	block := cat([]int{as, ap, ap, ae}, nl, []int{vs, as}, body, []int{ae, ve}, nl)
	if got := enc.InputIDs[pl.Start:pl.End]; !equalInts(got, block) {
		t.Errorf("media block %v, want %v", got, block)
	}
	if len(pl.Videos) != 1 || pl.Videos[0] != [2]int{pl.Start + 7, pl.Start + 7 + len(want)} {
		t.Errorf("video run %v", pl.Videos)
	}
}

// FuzzEncodeMedia: arbitrary counts and max lengths give a 413 api.Error
// for what cannot fit, an impossible-measure error for a count of 0, or a
// record within max_length whose media block holds every pad and whose runs
// hold only pads.
func FuzzEncodeMedia(f *testing.F) {
	f.Add(uint16(60), uint16(5), uint16(7), uint16(3), uint16(2), uint16(4))
	f.Add(uint16(400), uint16(70), uint16(17), uint16(2), uint16(4), uint16(52))
	req := mustParse(f, `{"model":"m","state":"0123456789abcdef","questions":{"q":{"type":"noul","instructions":"?"}}}`)
	f.Fuzz(func(t *testing.T, maxLen, img, clip, frames, frameTokens, sound uint16) {
		m := Media{ImageTokens: []int{int(img)}, AudioTokens: []int{int(clip)},
			Videos: []Video{{Frames: int(frames), FrameTokens: int(frameTokens), SecondsPerGrid: 1, AudioTokens: int(sound)}}, PositionIDPerSeconds: 13}
		enc, pl, err := EncodeMedia(markerTok{}, req, int(maxLen)+1, m)
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				if ae.Status != 413 || ae.Code != api.CodeTooLong || ae.Message == "" {
					t.Fatalf("incomplete error %+v", ae)
				}
			} else if !errors.Is(err, errMediaCount) {
				t.Fatalf("err = %v", err)
			}
			return
		}
		if len(enc.InputIDs) > int(maxLen)+1 || enc.FixedLength+enc.StateTokens != len(enc.InputIDs) {
			t.Fatalf("%d ids for max %d", len(enc.InputIDs), int(maxLen)+1)
		}
		pads := map[int]bool{ip: true, ap: true, vp: true}
		n := 0
		for _, id := range enc.InputIDs[pl.Start:pl.End] {
			if pads[id] {
				n++
			}
		}
		if want := int(img) + int(clip) + int(frames)*int(frameTokens) + int(sound); n != want {
			t.Fatalf("%d pads in the block, want %d", n, want)
		}
		for _, runs := range [][][2]int{pl.Images, pl.Audio, pl.Videos} {
			for _, r := range runs {
				for _, id := range enc.InputIDs[r[0]:r[1]] {
					if !pads[id] {
						t.Fatalf("run %v holds %d", r, id)
					}
				}
			}
		}
	})
}

// TestMediaStrayMarkers: a media record whose text (state as kept, schema)
// holds a media pad, or with pictures an <|audio_start|>, is refused (422):
// those would be taken for media. Other markers, and markers the
// truncation cut off, are text.
func TestMediaStrayMarkers(t *testing.T) {
	body := func(state, instr string) *api.Request {
		return mustParse(t, `{"model":"m","state":"`+state+`","questions":{"q":{"type":"noul","instructions":"`+instr+`"}}}`)
	}
	img := Media{ImageTokens: []int{2}}
	clip := Media{AudioTokens: []int{2}}
	for _, c := range []struct {
		name  string
		req   *api.Request
		m     Media
		field string // "" accepted
	}{
		{"image pad in state", body("a<|image_pad|>b", "?"), clip, "state"},
		{"audio pad in state", body("a<|audio_pad|>b", "?"), img, "state"},
		{"video pad in instructions", body("s", "<|video_pad|>?"), img, "questions"},
		{"audio start with an image", body("a<|audio_start|>b", "?"), img, "state"},
		{"audio start with audio only", body("a<|audio_start|>b", "?"), clip, ""},
		{"vision markers", body("<|vision_start|>a<|vision_end|><|audio_end|>", "?"), img, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := EncodeMedia(markerTok{}, c.req, 0, c.m)
			if c.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != 422 || ae.Field != c.field || !strings.Contains(ae.Message, "media token") {
				t.Fatalf("err = %v, want a 422 on %s", err, c.field)
			}
		})
	}
	// The marker past the kept state is gone: accepted.
	req := body("ab<|image_pad|>", "?")
	if _, _, err := EncodeMedia(markerTok{}, req, 0, clip); err == nil {
		t.Fatal("image pad in the state accepted")
	}
	enc, _, err := EncodeMedia(markerTok{}, body("ab", "?"), 0, clip)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := EncodeMedia(markerTok{}, req, enc.FixedLength+2, clip); err != nil {
		t.Errorf("marker cut off by the truncation: %v", err)
	}
}
