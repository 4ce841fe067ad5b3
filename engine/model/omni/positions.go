// Package omni composes a Clef-Omni record's media with its text for the
// thinker's decoder (spec qwen3-omni-thinker.md §6-§7): the 3-D M-RoPE
// position ids of text, images, videos and audio (get_rope_index), the
// decoder input with the towers' rows in place of the pad tokens and the
// DeepStack features at the visual positions, and the digest of the media
// a prefix-cache key must cover.
package omni

import (
	"errors"
	"fmt"
	"math"

	"github.com/clefrt/clef/engine/release"
)

// Media describes a record's media in sequence order, as get_rope_index
// reads them: per image and per video its grid, and per audio item its
// token count. Audio items are consumed in the order their pads appear:
// every clip, then the soundtrack of every heard video.
type Media struct {
	Images [][3]int // per image: grid (t, h, w) in patches
	Videos []Video  // per video
	Audio  []int    // per audio item: N_audio of its mel frames (spec §5.4)
}

// Video is one video's grid and the time each temporal patch covers.
type Video struct {
	Grid           [3]int  // (t, h, w) in patches
	SecondsPerGrid float64 // video_second_per_grid: temporal_patch_size / fps
}

// maxPosition bounds every position id: the decoder turns them into float32
// rotation angles, and a grid or time scale that leads past it is refused.
const maxPosition = 1 << 30

// Positions returns the three M-RoPE position streams (t, h, w) of every
// token of ids, exactly as transformers' get_rope_index computes them
// (spec §6) for one unpadded record: text runs and markers count up from the
// next free id; an image's merged patch (r, c) of temporal patch k gets
// (s + k·perSecond, s + r, s + c) and a video's (s + k·SecondsPerGrid·perSecond,
// s + r, s + c), s being the first id after its opening marker; an audio
// item's tokens count up from s; a heard video's video and audio ids both
// start at s and its tokens take them in the order the processor
// interleaved them (by temporal id, video first on a tie). The next free id
// after an item is one past the largest id of the last piece emitted (the
// closing markers, or text), which for a heard video whose sound ends below
// its frames' h/w ids is below the body's maximum, as in transformers.
//
// merge is the vision tower's spatial_merge_size and perSecond the
// thinker's position_id_per_seconds. Without images and videos the ids are
// plain text positions (0, 1, 2, ...), as get_rope_index returns then.
//
// Every item must appear in ids as the processor writes it: its opening
// marker(s), exactly its pad tokens (for a heard video in the interleaved
// order), its closing marker(s); every grid and audio count given must be
// used, and no pad token may stand outside an item. Where transformers
// would fail or silently misalign, Positions returns an error.
func Positions(ids []int, tok release.Tokens, m Media, merge int, perSecond float64) ([][3]int, error) {
	if len(m.Images) == 0 && len(m.Videos) == 0 {
		pos := make([][3]int, len(ids))
		for i := range pos {
			pos[i] = [3]int{i, i, i}
		}
		return pos, nil
	}
	if merge <= 0 {
		return nil, fmt.Errorf("omni: spatial merge size %d", merge)
	}
	if !(perSecond > 0) || perSecond > maxPosition {
		return nil, fmt.Errorf("omni: position_id_per_seconds %v is not a positive number", perSecond)
	}
	if err := checkTokens(tok); err != nil {
		return nil, err
	}
	w := walker{ids: ids, tok: tok, m: m, merge: merge, perSecond: perSecond, last: -1, pos: make([][3]int, 0, len(ids))}
	if err := w.walk(); err != nil {
		return nil, err
	}
	return w.pos, nil
}

// checkTokens refuses a configuration without the media token ids
// (release.Tokens are 0 when absent) or with two markers on one id.
func checkTokens(tok release.Tokens) error {
	seen := map[int]string{}
	for _, x := range []struct {
		name string
		id   int
	}{
		{"image_token_id", tok.Image}, {"video_token_id", tok.Video}, {"audio_token_id", tok.Audio},
		{"vision_start_token_id", tok.VisionStart}, {"vision_end_token_id", tok.VisionEnd},
		{"audio_start_token_id", tok.AudioStart}, {"audio_end_token_id", tok.AudioEnd},
	} {
		if x.id <= 0 {
			return fmt.Errorf("omni: the thinker configuration has no %s", x.name)
		}
		if other, ok := seen[x.id]; ok {
			return fmt.Errorf("omni: %s and %s are both token %d", other, x.name, x.id)
		}
		seen[x.id] = x.name
	}
	return nil
}

// walker is one pass of get_rope_index over a record.
type walker struct {
	ids       []int
	tok       release.Tokens
	m         Media
	merge     int
	perSecond float64

	pos               [][3]int // positions emitted so far
	last              int      // the largest id of the last piece emitted; -1 before any
	image, video, aud int      // items of each kind consumed
}

// kind is what starts at a token.
type kind int

const (
	text kind = iota
	image
	video
	heard // a video with its soundtrack (use_audio_in_video)
	audio
)

// at classifies the token at i.
func (w *walker) at(i int) kind {
	t := w.tok
	switch w.ids[i] {
	case t.VisionStart:
		if i+1 < len(w.ids) {
			switch w.ids[i+1] {
			case t.Image:
				return image
			case t.Video:
				return video
			case t.AudioStart:
				return heard
			}
		}
	case t.AudioStart:
		return audio
	}
	return text
}

// walk emits every token's position: text runs, then each item.
func (w *walker) walk() error {
	run := 0 // start of the current text run
	for i := 0; i < len(w.ids); {
		k := w.at(i)
		if k == text {
			switch w.ids[i] {
			case w.tok.Image, w.tok.Video, w.tok.Audio:
				return fmt.Errorf("omni: token %d is a media pad (%d) outside any media item", i, w.ids[i])
			}
			i++
			continue
		}
		w.text(i - run)
		n, err := w.item(k, i)
		if err != nil {
			return err
		}
		i += n
		run = i
	}
	w.text(len(w.ids) - run)
	if w.image != len(w.m.Images) || w.video != len(w.m.Videos) || w.aud != len(w.m.Audio) {
		return fmt.Errorf("omni: the ids hold %d images, %d videos and %d audio items; given %d, %d and %d",
			w.image, w.video, w.aud, len(w.m.Images), len(w.m.Videos), len(w.m.Audio))
	}
	return nil
}

// next is the next free id.
func (w *walker) next() int { return w.last + 1 }

// text emits a run of n text tokens (or markers): ids counting up from the
// next free one on all three streams. The run is one piece.
func (w *walker) text(n int) {
	s := w.next()
	for j := range n {
		w.pos = append(w.pos, [3]int{s + j, s + j, s + j})
	}
	if n > 0 {
		w.last = s + n - 1
	}
}

// item emits the item of kind k whose opening marker is at i and returns
// its length in tokens.
func (w *walker) item(k kind, i int) (int, error) {
	open, closing := 1, []int{w.tok.VisionEnd}
	switch k {
	case heard:
		open, closing = 2, []int{w.tok.AudioEnd, w.tok.VisionEnd}
	case audio:
		closing = []int{w.tok.AudioEnd}
	}
	w.text(open)
	n, err := w.body(k, w.next(), i+open)
	if err != nil {
		return 0, err
	}
	end := i + open + n
	for j, want := range closing {
		if end+j >= len(w.ids) || w.ids[end+j] != want {
			return 0, fmt.Errorf("omni: the %s at token %d does not close with token %d after its %d pads", k, i, want, n)
		}
	}
	w.text(len(closing))
	return open + n + len(closing), nil
}

func (k kind) String() string {
	return [...]string{"text", "image", "video", "heard video", "audio"}[k]
}

// piece is a run of positions get_rope_index emits at once; the next free
// id after an item is one past the largest id of its last piece. audio
// marks a heard video's audio tokens.
type piece struct {
	ids   [][3]int
	audio bool
}

// body emits the positions of an item's pads, which start at token i and
// at id s, checks that ids holds exactly those pads there, and sets last
// to the largest id of its last piece. It returns the number of pads.
func (w *walker) body(k kind, s, i int) (int, error) {
	var pieces []piece
	switch k {
	case audio:
		a, err := w.audioIDs(s, i-1)
		if err != nil {
			return 0, err
		}
		pieces = []piece{{a, true}}
	case image:
		if w.image >= len(w.m.Images) {
			return 0, fmt.Errorf("omni: image %d at token %d: only %d image grids given", w.image+1, i-1, len(w.m.Images))
		}
		v, err := w.visionIDs(s, w.m.Images[w.image], 1, fmt.Sprintf("image %d", w.image))
		if err != nil {
			return 0, err
		}
		w.image++
		pieces = []piece{{v, false}}
	case video, heard:
		if w.video >= len(w.m.Videos) {
			return 0, fmt.Errorf("omni: video %d at token %d: only %d video grids given", w.video+1, i-1, len(w.m.Videos))
		}
		vd := w.m.Videos[w.video]
		if !(vd.SecondsPerGrid > 0) || vd.SecondsPerGrid > maxPosition {
			return 0, fmt.Errorf("omni: video %d: second_per_grid %v is not a positive number", w.video, vd.SecondsPerGrid)
		}
		v, err := w.visionIDs(s, vd.Grid, vd.SecondsPerGrid, fmt.Sprintf("video %d", w.video))
		if err != nil {
			return 0, err
		}
		w.video++
		if k == video {
			pieces = []piece{{v, false}}
			break
		}
		a, err := w.audioIDs(s, i-2)
		if err != nil {
			return 0, err
		}
		pieces = interleave(v, a)
	}
	n := 0
	for _, p := range pieces {
		n += len(p.ids)
	}
	if i+n > len(w.ids) {
		return 0, fmt.Errorf("omni: the %s at token %d needs %d pads; the record ends after %d", k, i, n, len(w.ids)-i)
	}
	// The pads: an image's, a video's, or an audio pad where a heard
	// video's sound took its turn.
	j := i
	for _, p := range pieces {
		want := w.tok.Image
		switch {
		case p.audio:
			want = w.tok.Audio
		case k == video || k == heard:
			want = w.tok.Video
		}
		for range p.ids {
			if w.ids[j] != want {
				return 0, fmt.Errorf("omni: token %d of the %s at token %d is %d, want pad %d", j, k, i, w.ids[j], want)
			}
			j++
		}
		w.pos = append(w.pos, p.ids...)
	}
	w.last = maxID(pieces[len(pieces)-1].ids)
	return n, nil
}

// audioIDs returns the ids of the next audio item (its opening marker at
// token at), starting at s: s, s+1, … on all three streams.
func (w *walker) audioIDs(s, at int) ([][3]int, error) {
	if w.aud >= len(w.m.Audio) {
		return nil, fmt.Errorf("omni: audio item %d at token %d: only %d audio items given", w.aud+1, at, len(w.m.Audio))
	}
	n := w.m.Audio[w.aud]
	if n <= 0 || n > len(w.ids) {
		return nil, fmt.Errorf("omni: audio item %d has %d tokens (the record has %d)", w.aud, n, len(w.ids))
	}
	w.aud++
	out := make([][3]int, n)
	for j := range out {
		out[j] = [3]int{s + j, s + j, s + j}
	}
	return out, nil
}

// visionIDs returns the ids of an image or video of grid g starting at s:
// per temporal patch k, merged row r, merged column c, (s + t_k, s + r,
// s + c) with t_k = k·secondsPerGrid·perSecond rounded as transformers
// rounds it (float32), which must be a whole number.
func (w *walker) visionIDs(s int, g [3]int, secondsPerGrid float64, what string) ([][3]int, error) {
	t, h, wd := g[0], g[1], g[2]
	if t <= 0 || h <= 0 || wd <= 0 || h%w.merge != 0 || wd%w.merge != 0 {
		return nil, fmt.Errorf("omni: %s: grid %v is not whole merge blocks of %d", what, g, w.merge)
	}
	h, wd = h/w.merge, wd/w.merge
	if t > len(w.ids) || h > len(w.ids) || wd > len(w.ids) || t*h*wd > len(w.ids) {
		return nil, fmt.Errorf("omni: %s: grid %v needs more tokens than the record's %d", what, g, len(w.ids))
	}
	if s+len(w.ids) > maxPosition {
		return nil, errors.New("omni: position ids past the decoder's range")
	}
	out := make([][3]int, 0, t*h*wd)
	for k := range t {
		// torch: arange(t) × second_per_grid (float32) × position_id_per_seconds, in float32.
		tk := float32(float32(k)*float32(secondsPerGrid)) * float32(w.perSecond)
		if float64(tk) != math.Trunc(float64(tk)) || float64(tk)+float64(s) > maxPosition {
			return nil, fmt.Errorf("omni: %s: temporal position %v of patch %d is not a whole number below %d (second_per_grid %v, position_id_per_seconds %v)",
				what, tk, k, maxPosition, secondsPerGrid, w.perSecond)
		}
		for r := range h {
			for c := range wd {
				out = append(out, [3]int{s + int(tk), s + r, s + c})
			}
		}
	}
	return out, nil
}

// interleave merges a heard video's video ids v and audio ids a (both
// starting at the same id) into the order get_rope_index emits them: the
// next video token while its temporal id is at most the next audio token's
// id, else the next audio token; then the rest of whichever is left. Each
// token taken in the merge is a piece of its own; a rest is one piece.
func interleave(v, a [][3]int) []piece {
	var pieces []piece
	iv, ia := 0, 0
	for iv < len(v) && ia < len(a) {
		if v[iv][0] <= a[ia][0] {
			pieces = append(pieces, piece{v[iv : iv+1], false})
			iv++
		} else {
			pieces = append(pieces, piece{a[ia : ia+1], true})
			ia++
		}
	}
	if iv < len(v) {
		pieces = append(pieces, piece{v[iv:], false})
	}
	if ia < len(a) {
		pieces = append(pieces, piece{a[ia:], true})
	}
	return pieces
}

// maxID is the largest id of a piece over the three streams.
func maxID(p [][3]int) int {
	m := math.MinInt
	for _, q := range p {
		m = max(m, q[0], q[1], q[2])
	}
	return m
}
