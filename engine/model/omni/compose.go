package omni

import (
	"context"
	"fmt"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/release"
)

// Visual is a vision tower's output for some images or videos, on the
// decoder's backend: Rows [tokens, hidden], one row per merged patch in
// item order, and the DeepStack levels, each [tokens, hidden].
type Visual struct {
	Rows      *backend.Tensor
	Deepstack []*backend.Tensor
}

// Towers are the tower outputs of one record's media, each list in
// sequence order; the rows of a list's parts, concatenated, replace that
// kind's pad tokens in order. Any part may hold several items (the vision
// tower runs on all images at once) or one.
type Towers struct {
	Images []Visual
	Videos []Visual
	Audio  []*backend.Tensor // per part [tokens, hidden]: the clips, then the heard videos' soundtracks
}

// Compose builds the decoder input of a record with media (spec §7): the
// token embeddings of ids with the rows at the image, video and audio pads
// replaced by the towers' rows, in order; VisualRows, the image and video
// pad positions; Deepstack, each level's rows gathered at those positions.
// The caller sets Positions (see Positions). The towers' tensors are read,
// not freed. Pad counts that differ from the towers' row counts are an
// error (transformers checks images and videos, and silently misaligns
// audio).
func Compose(ctx context.Context, m *qwen3moe.Model, ids []int, tok release.Tokens, t Towers) (qwen3moe.Input, error) {
	b := m.Backend()
	hidden := m.Config.Hidden
	var r Rows
	read := func(x *backend.Tensor, what string) ([]float32, error) {
		if x == nil {
			return nil, fmt.Errorf("omni: no %s tensor", what)
		}
		if x.Cols() != hidden || len(x.Shape) != 2 {
			return nil, fmt.Errorf("omni: %s tensor of shape %v, want [tokens, %d]", what, x.Shape, hidden)
		}
		v, err := b.Read(ctx, x)
		if err != nil {
			return nil, fmt.Errorf("omni: %s: %w", what, err)
		}
		return v, nil
	}
	readVisual := func(parts []Visual, what string) (rows []float32, deep [][]float32, err error) {
		for i, p := range parts {
			v, err := read(p.Rows, fmt.Sprintf("%s part %d", what, i))
			if err != nil {
				return nil, nil, err
			}
			rows = append(rows, v...)
			if i == 0 {
				deep = make([][]float32, len(p.Deepstack))
			} else if len(p.Deepstack) != len(deep) {
				return nil, nil, fmt.Errorf("omni: %s part %d has %d DeepStack levels, part 0 %d", what, i, len(p.Deepstack), len(deep))
			}
			for l, d := range p.Deepstack {
				v, err := read(d, fmt.Sprintf("%s part %d DeepStack level %d", what, i, l))
				if err != nil {
					return nil, nil, err
				}
				if len(v) != p.Rows.Rows()*hidden {
					return nil, nil, fmt.Errorf("omni: %s part %d DeepStack level %d has %d rows, its output %d", what, i, l, len(v)/hidden, p.Rows.Rows())
				}
				deep[l] = append(deep[l], v...)
			}
		}
		return rows, deep, nil
	}
	var err error
	if r.Image, r.ImageDeep, err = readVisual(t.Images, "image"); err != nil {
		return qwen3moe.Input{}, err
	}
	if r.Video, r.VideoDeep, err = readVisual(t.Videos, "video"); err != nil {
		return qwen3moe.Input{}, err
	}
	for i, a := range t.Audio {
		v, err := read(a, fmt.Sprintf("audio part %d", i))
		if err != nil {
			return qwen3moe.Input{}, err
		}
		r.Audio = append(r.Audio, v...)
	}
	embeds, err := m.EmbedTokens(ctx, ids) // [L, hidden]
	if err != nil {
		return qwen3moe.Input{}, err
	}
	visual, deep, err := Merge(embeds, hidden, ids, tok, r)
	if err != nil {
		return qwen3moe.Input{}, err
	}
	return qwen3moe.Input{IDs: ids, Embeds: embeds, VisualRows: visual, Deepstack: deep}, nil
}

// Rows are tower outputs on the host, row-major [tokens*hidden], each kind's
// items concatenated in sequence order.
type Rows struct {
	Image     []float32
	ImageDeep [][]float32 // per DeepStack level, like Image
	Video     []float32
	VideoDeep [][]float32 // per DeepStack level, like Video
	Audio     []float32
}

// Merge is Compose on the host: it overwrites the rows of embeds
// [len(ids)*hidden] at the image, video and audio pads of ids with r's rows
// of that kind, in order (a float32 copy), and returns the image and video
// pad positions in sequence order and, per DeepStack level, the image or
// video level's row for each of them. Every kind's pad count must equal its
// row count, and images and videos with DeepStack rows must have as many
// levels (a kind with none present needs none).
func Merge(embeds []float32, hidden int, ids []int, tok release.Tokens, r Rows) (visual []int, deep [][]float32, err error) {
	if hidden <= 0 || len(embeds) != len(ids)*hidden {
		return nil, nil, fmt.Errorf("omni: %d embedding values for %d tokens of %d", len(embeds), len(ids), hidden)
	}
	kinds := []struct {
		name string
		id   int
		rows []float32
		deep [][]float32
		n    int // pads seen
	}{
		{"image", tok.Image, r.Image, r.ImageDeep, 0},
		{"video", tok.Video, r.Video, r.VideoDeep, 0},
		{"audio", tok.Audio, r.Audio, nil, 0},
	}
	levels := -1 // DeepStack levels of the visual kinds present
	for i := range kinds {
		k := &kinds[i]
		if len(k.rows)%hidden != 0 {
			return nil, nil, fmt.Errorf("omni: %d %s values are not rows of %d", len(k.rows), k.name, hidden)
		}
		if len(k.rows) > 0 && k.id <= 0 {
			return nil, nil, fmt.Errorf("omni: %s rows but the thinker configuration has no %s token id", k.name, k.name)
		}
		for l, d := range k.deep {
			if len(d) != len(k.rows) {
				return nil, nil, fmt.Errorf("omni: %s DeepStack level %d has %d values, the %s rows %d", k.name, l, len(d), k.name, len(k.rows))
			}
		}
		if i < 2 && len(k.rows) > 0 {
			if levels >= 0 && len(k.deep) != levels {
				return nil, nil, fmt.Errorf("omni: images have %d DeepStack levels and videos %d", levels, len(k.deep))
			}
			levels = len(k.deep)
		}
	}
	if tok.Image == tok.Video && tok.Image > 0 || tok.Image == tok.Audio && tok.Image > 0 || tok.Video == tok.Audio && tok.Video > 0 {
		return nil, nil, fmt.Errorf("omni: media pad ids %d, %d, %d are not distinct", tok.Image, tok.Video, tok.Audio)
	}

	// Count first: nothing is written unless every kind's count matches.
	for _, id := range ids {
		for i := range kinds {
			if id == kinds[i].id && kinds[i].id > 0 {
				kinds[i].n++
			}
		}
	}
	for _, k := range kinds {
		if k.n*hidden != len(k.rows) {
			return nil, nil, fmt.Errorf("omni: %d %s pad tokens but %d %s rows", k.n, k.name, len(k.rows)/hidden, k.name)
		}
	}
	nv := kinds[0].n + kinds[1].n
	if nv > 0 && levels > 0 {
		deep = make([][]float32, levels)
		for l := range deep {
			deep[l] = make([]float32, 0, nv*hidden)
		}
	}
	visual = make([]int, 0, nv)
	for i := range kinds {
		kinds[i].n = 0
	}
	for p, id := range ids {
		for i := range kinds {
			k := &kinds[i]
			if id != k.id || k.id <= 0 {
				continue
			}
			src := k.rows[k.n*hidden : (k.n+1)*hidden]
			copy(embeds[p*hidden:(p+1)*hidden], src)
			if i < 2 {
				visual = append(visual, p)
				for l := range deep {
					deep[l] = append(deep[l], k.deep[l][k.n*hidden:(k.n+1)*hidden]...)
				}
			}
			k.n++
		}
	}
	return visual, deep, nil
}
