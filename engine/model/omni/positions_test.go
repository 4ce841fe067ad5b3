package omni

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/clefrt/clef/internal/golden"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tokenizer"
	"github.com/clefrt/clef/internal/npy"
)

const (
	omniDir     = "../../../testdata/omni/"
	videoDir    = "../../../testdata/omni-video/"
	clefTinyDir = "../../../testdata/clef-tiny/"
)

func loadNpy(t testing.TB, name string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// ints reads an integer .npy as ints.
func ints(t testing.TB, name string) []int {
	t.Helper()
	a := loadNpy(t, name)
	if a.I == nil {
		t.Fatalf("%s is not an integer array", name)
	}
	out := make([]int, len(a.I))
	for i, v := range a.I {
		out[i] = int(v)
	}
	return out
}

// goldenPositions reads a [3, 1, L] position file.
func goldenPositions(t testing.TB, name string) [][3]int {
	t.Helper()
	a := loadNpy(t, name)
	if len(a.Shape) != 3 || a.Shape[0] != 3 || a.Shape[1] != 1 {
		t.Fatalf("%s: shape %v, want [3, 1, L]", name, a.Shape)
	}
	L := a.Shape[2]
	pos := make([][3]int, L)
	for s := range 3 {
		for i := range L {
			pos[i][s] = int(a.I[s*L+i])
		}
	}
	return pos
}

// grids reads an [n, 3] grid file.
func grids(t testing.TB, name string) [][3]int {
	t.Helper()
	v := ints(t, name)
	out := make([][3]int, len(v)/3)
	for i := range out {
		out[i] = [3]int{v[3*i], v[3*i+1], v[3*i+2]}
	}
	return out
}

// audioTokens is N_audio of a clip's mel frames (spec §5.4), from its
// feature attention mask.
func audioTokens(t testing.TB, maskFile string) int {
	t.Helper()
	frames := 0
	for _, v := range ints(t, maskFile) {
		frames += v
	}
	n := 13 * (frames / 100)
	if r := frames % 100; r > 0 {
		n += (r + 7) / 8
	}
	return n
}

func thinker(t testing.TB, dir string) release.Thinker {
	t.Helper()
	th := golden.Thinker(t, dir)
	if th.Vision == nil {
		t.Fatal("no vision config")
	}
	return th
}

func samePositions(t *testing.T, got, want [][3]int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d positions, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("token %d: position %v, want %v (got %v, want %v around it)", i, got[i], want[i],
				got[max(0, i-2):min(len(got), i+3)], want[max(0, i-2):min(len(want), i+3)])
		}
	}
}

// goldenMedia is what each golden case of ../omni and ../omni-video holds.
func goldenMedia(t testing.TB, cs string) (ids []int, m Media, dir string) {
	t.Helper()
	switch cs {
	case "image", "mixed", "audio":
		dir = omniDir
		if cs != "audio" {
			m.Images = grids(t, dir+cs+"_image_grid_thw.npy")
		}
		if cs != "image" {
			// mixed holds the same clip as audio.
			m.Audio = []int{audioTokens(t, dir+"audio_feature_attention_mask.npy")}
		}
	case "video", "av":
		dir = videoDir
		// av's patches are video's (README), so its grid and time too.
		g := grids(t, dir+"video_video_grid_thw.npy")
		spg := loadNpy(t, dir+"video_second_per_grid.npy").F
		m.Videos = []Video{{Grid: g[0], SecondsPerGrid: float64(spg[0])}}
		if cs == "av" {
			m.Audio = []int{audioTokens(t, dir+"av_feature_attention_mask.npy")}
		}
	}
	return ints(t, dir+cs+"_input_ids.npy"), m, dir
}

// TestPositionsGolden: get_rope_index of transformers on images, audio, both,
// a video and a heard video, position for position.
func TestPositionsGolden(t *testing.T) {
	th := thinker(t, omniDir)
	for _, cs := range []string{"image", "mixed", "audio", "video", "av"} {
		t.Run(cs, func(t *testing.T) {
			ids, m, dir := goldenMedia(t, cs)
			pos, err := Positions(ids, th.Tokens, m, th.Vision.SpatialMergeSize, th.PositionIDPerSeconds)
			if err != nil {
				t.Fatal(err)
			}
			samePositions(t, pos, goldenPositions(t, dir+cs+"_position_ids.npy"))
			// The audio-only case takes the plain-text path; the walk
			// gives the same ids for well-formed audio.
			if cs == "audio" {
				w := walker{ids: ids, tok: th.Tokens, m: m, merge: 2, perSecond: 13, last: -1}
				if err := w.walk(); err != nil {
					t.Fatal(err)
				}
				samePositions(t, w.pos, pos)
			}
		})
	}
}

// tinyCase is the media part of a clef-tiny case.
type tinyCase struct {
	Name      string          `json:"name"`
	Request   json.RawMessage `json:"request"`
	MaxLength int             `json:"max_length"`
	InputIDs  []int           `json:"input_ids"`
	Media     *struct {
		ImageTokens []int             `json:"image_tokens"`
		AudioTokens []int             `json:"audio_tokens"`
		Files       map[string]string `json:"files"`
	} `json:"media"`
}

// TestClefTinyMediaPositions encodes clef-tiny's two media records with
// their media's placeholder counts (from the processors' grids and mel
// masks) and checks the ids and the positions the thinker got.
func TestClefTinyMediaPositions(t *testing.T) {
	th := thinker(t, clefTinyDir+"release/")
	merge := th.Vision.SpatialMergeSize
	tok, err := tokenizer.Load(clefTinyDir + "release/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(clefTinyDir + "cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	n := 0
	for sc.Scan() {
		var c tinyCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Media == nil {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			var m Media
			var rm record.Media
			if g, ok := c.Media.Files["image_grid_thw"]; ok {
				m.Images = grids(t, clefTinyDir+g)
				for _, g := range m.Images {
					rm.ImageTokens = append(rm.ImageTokens, g[0]*g[1]*g[2]/(merge*merge))
				}
			}
			m.Audio = []int{audioTokens(t, clefTinyDir+c.Media.Files["feature_attention_mask"])}
			rm.AudioTokens = m.Audio
			if !equal(rm.ImageTokens, c.Media.ImageTokens) || !equal(rm.AudioTokens, c.Media.AudioTokens) {
				t.Fatalf("counts %v %v, case says %v %v", rm.ImageTokens, rm.AudioTokens, c.Media.ImageTokens, c.Media.AudioTokens)
			}
			req, err := api.ParseRequest(c.Request)
			if err != nil {
				t.Fatal(err)
			}
			enc, _, err := record.EncodeMedia(tok, req, c.MaxLength, rm)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(enc.InputIDs, c.InputIDs) {
				t.Fatal("record ids differ from the golden's")
			}
			pos, err := Positions(enc.InputIDs, th.Tokens, m, merge, th.PositionIDPerSeconds)
			if err != nil {
				t.Fatal(err)
			}
			samePositions(t, pos, goldenPositions(t, clefTinyDir+c.Media.Files["position_ids"]))
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d media cases, want 2", n)
	}
}

func equal(a, b []int) bool {
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

// TestPositionsWorked is spec §6's worked example: an image of grid
// (1, 4, 6) after 5 text tokens, then 3 text tokens.
func TestPositionsWorked(t *testing.T) {
	tok := testTokens()
	ids := []int{1, 2, 3, 4, 5, tok.VisionStart, tok.Image, tok.Image, tok.Image, tok.Image, tok.Image, tok.Image, tok.VisionEnd, 6, 7, 8}
	pos, err := Positions(ids, tok, Media{Images: [][3]int{{1, 4, 6}}}, 2, 13)
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]int{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}, {5, 5, 5},
		{6, 6, 6}, {6, 6, 7}, {6, 6, 8}, {6, 7, 6}, {6, 7, 7}, {6, 7, 8},
		{9, 9, 9}, {10, 10, 10}, {11, 11, 11}, {12, 12, 12}}
	samePositions(t, pos, want)
}

// testTokens are the ids of ../omni's tiny vocabulary.
func testTokens() release.Tokens {
	return release.Tokens{Image: 507, Video: 508, Audio: 504, VisionStart: 505, VisionEnd: 506, AudioStart: 502, AudioEnd: 503}
}

// heardIDs is text, then a heard video whose pads come in the given runs
// (positive: video pads, negative: audio pads), then text.
func heardIDs(tok release.Tokens, before int, runs []int, after int) []int {
	var ids []int
	for range before {
		ids = append(ids, 1)
	}
	ids = append(ids, tok.VisionStart, tok.AudioStart)
	for _, r := range runs {
		pad := tok.Video
		if r < 0 {
			pad, r = tok.Audio, -r
		}
		for range r {
			ids = append(ids, pad)
		}
	}
	ids = append(ids, tok.AudioEnd, tok.VisionEnd)
	for range after {
		ids = append(ids, 2)
	}
	return ids
}

// TestPositionsHeardLastPiece: after a heard video the next free id is one
// past the largest id of the last piece emitted, as in transformers (the
// omni-video README's finding), not of the whole body.
func TestPositionsHeardLastPiece(t *testing.T) {
	tok := testTokens()
	// The README's case: 3 text tokens, a (1, 40, 40) frame (20×20 merged:
	// t = 5, h and w 5..24) and 3 audio tokens 5, 6, 7. The frame comes
	// first (5 <= 5), the sound is the rest: closing 8, 9 although the body
	// reaches 24; the text then 10.
	m := Media{Videos: []Video{{Grid: [3]int{1, 40, 40}, SecondsPerGrid: 1}}, Audio: []int{3}}
	ids := heardIDs(tok, 3, []int{400, -3}, 1)
	pos, err := Positions(ids, tok, m, 2, 13)
	if err != nil {
		t.Fatal(err)
	}
	n := len(ids)
	if pos[5] != [3]int{5, 5, 5} || pos[404] != [3]int{5, 24, 24} || pos[405] != [3]int{5, 5, 5} || pos[407] != [3]int{7, 7, 7} {
		t.Errorf("body %v %v %v %v", pos[5], pos[404], pos[405], pos[407])
	}
	if pos[n-3] != [3]int{8, 8, 8} || pos[n-2] != [3]int{9, 9, 9} || pos[n-1] != [3]int{10, 10, 10} {
		t.Errorf("closing %v %v, text %v; want 8, 9, 10", pos[n-3], pos[n-2], pos[n-1])
	}

	// Two temporal patches (t = 3 and 16 after 1 text token) and 3 audio
	// tokens 3..5: patch 0, the sound, then patch 1 as the rest, whose
	// largest id is 3+19 = 22: closing 23, 24.
	m = Media{Videos: []Video{{Grid: [3]int{2, 40, 40}, SecondsPerGrid: 1}}, Audio: []int{3}}
	ids = heardIDs(tok, 1, []int{400, -3, 400}, 1)
	pos, err = Positions(ids, tok, m, 2, 13)
	if err != nil {
		t.Fatal(err)
	}
	n = len(ids)
	if pos[403] != [3]int{3, 3, 3} || pos[406] != [3]int{16, 3, 3} || pos[n-3] != [3]int{23, 23, 23} || pos[n-1] != [3]int{25, 25, 25} {
		t.Errorf("audio %v, patch 1 %v, closing %v, text %v", pos[403], pos[406], pos[n-3], pos[n-1])
	}
}

// TestPositionsErrors: ids and media that do not fit each other are errors
// (where transformers fails or misaligns silently), never panics.
func TestPositionsErrors(t *testing.T) {
	tok := testTokens()
	img := func(n int) []int {
		ids := []int{1, tok.VisionStart}
		for range n {
			ids = append(ids, tok.Image)
		}
		return append(ids, tok.VisionEnd, 2)
	}
	one := Media{Images: [][3]int{{1, 4, 4}}}
	for _, c := range []struct {
		name string
		ids  []int
		m    Media
		want string
	}{
		{"too few pads", img(3), one, "want pad"},
		{"too many pads", img(5), one, "does not close"},
		{"grid not given", append(img(4), img(4)...), one, "only 1 image grids"},
		{"grid unused", img(4), Media{Images: [][3]int{{1, 4, 4}, {1, 2, 2}}}, "given 2"},
		{"odd grid", img(4), Media{Images: [][3]int{{1, 3, 4}}}, "merge blocks"},
		{"zero grid", img(4), Media{Images: [][3]int{{0, 4, 4}}}, "merge blocks"},
		{"huge grid", img(4), Media{Images: [][3]int{{1 << 40, 1 << 40, 1 << 40}}}, "more tokens"},
		{"stray pad", append(img(4), tok.Audio), one, "outside any media item"},
		{"stray audio start", append(img(4), tok.AudioStart, 3), one, "only 0 audio items"},
		{"ends open", img(4)[:4], one, "needs 4 pads"},
		{"no audio count", append(img(4), tok.AudioStart, tok.Audio, tok.AudioEnd), Media{Images: one.Images, Audio: []int{0}}, "has 0 tokens"},
		{"fractional time", []int{tok.VisionStart, tok.Video, tok.Video, tok.VisionEnd},
			Media{Videos: []Video{{Grid: [3]int{2, 2, 2}, SecondsPerGrid: 0.3}}}, "whole number"},
		{"no time", []int{tok.VisionStart, tok.Video, tok.VisionEnd}, Media{Videos: []Video{{Grid: [3]int{1, 2, 2}}}}, "second_per_grid"},
		{"heard, no sound given", []int{tok.VisionStart, tok.AudioStart, tok.Video, tok.AudioEnd, tok.VisionEnd},
			Media{Videos: []Video{{Grid: [3]int{1, 2, 2}, SecondsPerGrid: 1}}}, "only 0 audio items"},
		{"heard, wrong order", []int{tok.VisionStart, tok.AudioStart, tok.Audio, tok.Video, tok.AudioEnd, tok.VisionEnd},
			Media{Videos: []Video{{Grid: [3]int{1, 2, 2}, SecondsPerGrid: 1}}, Audio: []int{1}}, "want pad"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Positions(c.ids, tok, c.m, 2, 13)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
	if _, err := Positions(img(4), release.Tokens{}, one, 2, 13); err == nil {
		t.Error("configuration without media ids accepted")
	}
	if _, err := Positions(img(4), tok, one, 0, 13); err == nil {
		t.Error("merge 0 accepted")
	}
	if _, err := Positions(img(4), tok, one, 2, 0); err == nil {
		t.Error("position_id_per_seconds 0 accepted")
	}
}

// FuzzPositions feeds arbitrary token sequences over the media ids and
// arbitrary grids and counts: never a panic; on success one position per
// token, every stream within the decoder's range.
func FuzzPositions(f *testing.F) {
	f.Add([]byte{9, 3, 2, 2, 2, 2, 4, 9}, uint8(1), uint8(4), uint8(4), uint8(0), uint8(1), true)
	f.Add([]byte{0, 6, 1, 1, 1, 1, 5, 4, 9}, uint8(2), uint8(2), uint8(2), uint8(2), uint8(1), false)
	f.Fuzz(func(t *testing.T, raw []byte, gt, gh, gw, audioN, spg uint8, image bool) {
		tok := testTokens()
		alphabet := []int{tok.AudioStart, tok.Audio, tok.Image, tok.VisionStart, tok.VisionEnd, tok.AudioEnd, tok.Video, 1, 2, 3}
		ids := make([]int, len(raw))
		for i, c := range raw {
			ids[i] = alphabet[int(c)%len(alphabet)]
		}
		g := [3]int{int(gt), int(gh), int(gw)}
		var m Media
		if image {
			m.Images = [][3]int{g}
		} else {
			m.Videos = []Video{{Grid: g, SecondsPerGrid: float64(spg) / 4}}
		}
		if audioN > 0 {
			m.Audio = []int{int(audioN)}
		}
		pos, err := Positions(ids, tok, m, 2, 13)
		if err != nil {
			return
		}
		if len(pos) != len(ids) {
			t.Fatalf("%d positions for %d tokens", len(pos), len(ids))
		}
		for _, p := range pos {
			for _, v := range p {
				if v < 0 || v > maxPosition {
					t.Fatalf("position %v out of range", p)
				}
			}
		}
	})
}

// BenchmarkPositions: a full-length record (64,000 tokens) with four
// 1,024-token images and four 30 s clips.
func BenchmarkPositions(b *testing.B) {
	tok := testTokens()
	var ids []int
	var m Media
	for range 4 {
		ids = append(ids, tok.VisionStart)
		for range 1024 {
			ids = append(ids, tok.Image)
		}
		ids = append(ids, tok.VisionEnd, 198)
		m.Images = append(m.Images, [3]int{1, 64, 64})
	}
	for range 4 {
		ids = append(ids, tok.AudioStart)
		for range 390 {
			ids = append(ids, tok.Audio)
		}
		ids = append(ids, tok.AudioEnd, 198)
		m.Audio = append(m.Audio, 390)
	}
	for len(ids) < 64000 {
		ids = append(ids, 7)
	}
	for b.Loop() {
		if _, err := Positions(ids, tok, m, 2, 13); err != nil {
			b.Fatal(err)
		}
	}
}
