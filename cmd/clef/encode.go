package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/pyjson"
	"github.com/clefrt/clef/engine/record"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tokenizer"
)

func init() {
	var (
		tokPath   string
		ffmpeg    string
		maxLength int
		validate  bool
	)
	cmd := &cobra.Command{
		Use:   "encode --tokenizer PATH [--max-length N] [--validate] [FILE|-]",
		Short: "Encode a SystemOne request into the model's input ids and spans",
		Long: `Encode reads one SystemOne request (FILE, or stdin for - or no argument) and
prints, on one line, the Clef record encoding:
{"input_ids": [...], "questions": [{"question_id", "question_type",
"question_span", "option_spans", "option_ids"}]}.

A request with images, audio or videos is decoded and processed as the
model would read it (with the processor settings of the --tokenizer
directory when it is a release, else the release's defaults; videos with
ffmpeg, see --ffmpeg), its placeholders expanded in the ids, and the line
gains "media": {"image_tokens": [...], "audio_tokens": [...], "start": S,
"end": E} (the media block is ids [S, E)). With videos it also holds
"videos": one {"frames", "temporal_patches", "tokens_per_patch",
"video_tokens", "audio_tokens", "seconds_per_grid"} per video (frames as the
processor reads them, an odd count padded by one; audio_tokens are the
soundtrack's, 0 unheard) and "heard": whether the soundtracks are heard
(every video has one).

Without --validate it does what the reference encode_record does and fails
where it fails; --validate first applies the reference request checks of
systemone(). A failure exits 1 with a one-line error on stderr.
--tokenizer names a tokenizer.json or a model directory holding one.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tokPath == "" {
				return &exitError{1, errors.New("encode: --tokenizer is required")}
			}
			if maxLength <= 0 {
				return &exitError{1, fmt.Errorf("encode: --max-length must be positive, got %d", maxLength)}
			}
			var body []byte
			var err error
			if len(args) == 0 || args[0] == "-" {
				body, err = io.ReadAll(cmd.InOrStdin())
			} else {
				body, err = os.ReadFile(args[0])
			}
			if err != nil {
				return &exitError{1, fmt.Errorf("encode: %w", err)}
			}
			tok, err := tokenizer.Load(tokPath)
			if err != nil {
				return &exitError{1, fmt.Errorf("encode: %w", err)}
			}
			req, err := api.ParseRequest(body)
			if err != nil {
				return &exitError{1, fmt.Errorf("encode: %w", err)}
			}
			if validate {
				if err := req.Validate(); err != nil {
					return &exitError{1, fmt.Errorf("encode: invalid request: %w", err)}
				}
			}
			var line []byte
			if req.Images.Truthy() || req.Audio.Truthy() || req.Videos.Truthy() {
				proc := release.DefaultProcessor()
				if cfg, err := release.ReadConfig(tokPath); err == nil && cfg.Processor != nil {
					proc = cfg.Processor
				}
				ctx := cmd.Context()
				if ctx == nil {
					ctx = context.Background()
				}
				m, err := engine.MediaCountsContext(ctx, req, proc, ffmpeg)
				if err != nil {
					return &exitError{1, fmt.Errorf("encode: %w", err)}
				}
				enc, pl, err := record.EncodeMedia(tok, req, maxLength, m)
				if err != nil {
					return &exitError{1, fmt.Errorf("encode: %w", err)}
				}
				line = appendEncoded(nil, enc)
				line = appendMedia(line[:len(line)-1], m, pl, proc.Image.TemporalPatchSize)
			} else {
				enc, err := record.Encode(tok, req, maxLength)
				if err != nil {
					return &exitError{1, fmt.Errorf("encode: %w", err)}
				}
				line = appendEncoded(nil, enc)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			w.Write(line)
			w.WriteByte('\n')
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&tokPath, "tokenizer", "", "tokenizer.json, or a model directory holding one")
	cmd.Flags().IntVar(&maxLength, "max-length", record.DefaultMaxLength, "context length; the state is cut to fit")
	cmd.Flags().BoolVar(&validate, "validate", false, "apply the reference request checks first")
	cmd.Flags().StringVar(&ffmpeg, "ffmpeg", "", ffmpegHelp)
	rootCmd.AddCommand(cmd)
}

// appendEncoded writes an encoding in the fixtures' schema, compactly.
func appendEncoded(dst []byte, enc *record.Encoded) []byte {
	dst = append(dst, `{"input_ids":`...)
	dst = appendInts(dst, enc.InputIDs)
	dst = append(dst, `,"questions":[`...)
	for i, q := range enc.Questions {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"question_id":`...)
		dst = pyjson.AppendString(dst, q.ID, false)
		dst = append(dst, `,"question_type":`...)
		dst = strconv.AppendInt(dst, int64(q.Type), 10)
		dst = append(dst, `,"question_span":`...)
		dst = appendInts(dst, q.Span[:])
		dst = append(dst, `,"option_spans":[`...)
		for k, s := range q.OptionSpans {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendInts(dst, s[:])
		}
		dst = append(dst, `],"option_ids":[`...)
		for k, id := range q.OptionIDs {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = pyjson.AppendString(dst, id, false)
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...)
}

// appendMedia appends the media member (and the closing brace) of an
// encoding line; temporal is the processor's temporal patch size (frames
// per temporal patch).
func appendMedia(dst []byte, m record.Media, pl *record.Placement, temporal int) []byte {
	dst = append(dst, `,"media":{"image_tokens":`...)
	dst = appendInts(dst, m.ImageTokens)
	dst = append(dst, `,"audio_tokens":`...)
	dst = appendInts(dst, m.AudioTokens)
	if len(m.Videos) > 0 {
		dst = appendVideos(dst, m.Videos, temporal)
	}
	dst = append(dst, `,"start":`...)
	dst = strconv.AppendInt(dst, int64(pl.Start), 10)
	dst = append(dst, `,"end":`...)
	dst = strconv.AppendInt(dst, int64(pl.End), 10)
	return append(dst, "}}"...)
}

// appendVideos appends the "videos" and "heard" members of the media
// object.
func appendVideos(dst []byte, videos []record.Video, temporal int) []byte {
	heard := false
	dst = append(dst, `,"videos":[`...)
	for i, v := range videos {
		if i > 0 {
			dst = append(dst, ',')
		}
		heard = heard || v.AudioTokens > 0
		dst = append(dst, `{"frames":`...)
		dst = strconv.AppendInt(dst, int64(v.Frames*temporal), 10)
		dst = append(dst, `,"temporal_patches":`...)
		dst = strconv.AppendInt(dst, int64(v.Frames), 10)
		dst = append(dst, `,"tokens_per_patch":`...)
		dst = strconv.AppendInt(dst, int64(v.FrameTokens), 10)
		dst = append(dst, `,"video_tokens":`...)
		dst = strconv.AppendInt(dst, int64(v.Frames*v.FrameTokens), 10)
		dst = append(dst, `,"audio_tokens":`...)
		dst = strconv.AppendInt(dst, int64(v.AudioTokens), 10)
		dst = append(dst, `,"seconds_per_grid":`...)
		dst = strconv.AppendFloat(dst, v.SecondsPerGrid, 'g', -1, 64)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"heard":`...)
	return strconv.AppendBool(dst, heard)
}

// appendInts appends xs as a JSON array.
func appendInts(dst []byte, xs []int) []byte {
	dst = append(dst, '[')
	for i, x := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return append(dst, ']')
}
