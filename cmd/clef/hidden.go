package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu" // registers the "cpu" backend
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/internal/npy"
)

func init() {
	var (
		model, ids, request, out, backendName string
		ffmpeg                                string
		threads, maxLength                    int
		precise                               bool
	)
	cmd := &cobra.Command{
		Use:   "hidden (--request FILE | --model PATH --ids 1,2,3) --out FILE.npy",
		Short: "Write the thinker's final normed hidden states (of a request, or of token ids) as a float32 .npy [L, hidden]",
		Long: `hidden writes the final normed hidden state of every position of the
thinker as a float32 .npy array of shape [L, hidden].

With --request FILE (a SystemOne request, "-" for stdin) it encodes the whole
record as clef decide does, media included (images, audio and videos
through their decoders, processors and towers, placed and positioned as the
reference does; videos are decoded with ffmpeg, see --ffmpeg), and writes
the hidden states of all L record tokens: the input of the joint head.
--model defaults to $CLEF_MODEL, else the embedded synthetic tiny model;
--max-length is the record's token budget.

With --ids it runs the text decoder alone on the given token ids (plain text
positions 0..L-1). PATH is then a release directory (f32/bf16 safetensors
shards + config.json), a .safetensors file with a config.json beside it, or a
qwen3moe/qwen3vlmoe .gguf file.

Block-quantized GGUF weights multiply 8-bit activations as llama.cpp does
unless --precise (--ids only).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" || (request == "") == (ids == "") {
				return &exitError{2, fmt.Errorf("hidden: --out and one of --request or --ids are required")}
			}
			if threads < 0 {
				return &exitError{2, fmt.Errorf("hidden: --threads must be >= 0, got %d", threads)}
			}
			if request != "" {
				return runHiddenRequest(cmd, request, engine.Options{Backend: backendName, Threads: threads, MaxLength: maxLength, FFmpeg: ffmpeg}, model, out)
			}
			if model == "" {
				return &exitError{2, fmt.Errorf("hidden: --ids needs --model")}
			}
			tok, err := parseIDs(ids)
			if err != nil {
				return &exitError{2, fmt.Errorf("hidden: --ids: %w", err)}
			}
			if model, err = modelPath(model); err != nil {
				return &exitError{2, err}
			}
			h, hidden, err := runHidden(cmd.Context(), model, backend.Options{Threads: threads, Precise: precise}, backendName, tok)
			if err != nil {
				return &exitError{1, fmt.Errorf("hidden: %w", err)}
			}
			return writeHidden(out, h, len(tok), hidden)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "release directory, .safetensors or .gguf file (with --request: default $CLEF_MODEL, else the embedded tiny model)")
	fl.StringVar(&request, "request", "", `SystemOne request file ("-": stdin): the hidden states of its whole record, media included`)
	fl.IntVar(&maxLength, "max-length", engine.DefaultMaxLength, "with --request: the record's token budget")
	fl.StringVar(&ids, "ids", "", "comma-separated token ids (the text decoder alone)")
	fl.StringVar(&out, "out", "", "output .npy file")
	fl.StringVar(&backendName, "backend", "cpu", "compute backend")
	fl.IntVar(&threads, "threads", 0, "CPU threads (0: all cores)")
	fl.BoolVar(&precise, "precise", false, "float32 activations for block-quantized weights (slower)")
	fl.StringVar(&ffmpeg, "ffmpeg", "", "with --request: "+ffmpegHelp)
	rootCmd.AddCommand(cmd)
}

// parseIDs parses "1,2,3" into token ids.
func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a non-negative integer token id", f)
		}
		ids = append(ids, v)
	}
	return ids, nil
}

// runHidden loads the decoder at path on the named backend and returns the
// final normed hidden states of ids and the hidden size.
func runHidden(ctx context.Context, path string, opts backend.Options, backendName string, ids []int) ([]float32, int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := release.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	b, err := backend.Open(backendName, opts)
	if err != nil {
		return nil, 0, err
	}
	defer b.Close()
	cfg := r.Config.Thinker.Text
	m, err := qwen3moe.Load(r.Weights, cfg, b)
	if err != nil {
		return nil, 0, err
	}
	h, err := m.Hidden(ctx, ids, nil)
	return h, cfg.Hidden, err
}

// writeHidden writes hidden [rows, cols] to out as a float32 .npy file.
func writeHidden(out string, hidden []float32, rows, cols int) error {
	f, err := os.Create(out)
	if err != nil {
		return &exitError{1, fmt.Errorf("hidden: %w", err)}
	}
	w := bufio.NewWriter(f)
	if err := npy.WriteFloat32(w, hidden, rows, cols); err != nil {
		f.Close()
		return &exitError{1, fmt.Errorf("hidden: %w", err)}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return &exitError{1, fmt.Errorf("hidden: %s: %w", out, err)}
	}
	if err := f.Close(); err != nil {
		return &exitError{1, fmt.Errorf("hidden: %s: %w", out, err)}
	}
	return nil
}

// runHiddenRequest writes the hidden states of a whole request's record,
// on the engine opened with opts.
func runHiddenRequest(cmd *cobra.Command, request string, opts engine.Options, model, out string) error {
	if opts.MaxLength <= 0 {
		return &exitError{2, fmt.Errorf("hidden: --max-length must be positive, got %d", opts.MaxLength)}
	}
	body, err := readRequest(cmd.InOrStdin(), request)
	if err != nil {
		return err
	}
	req, err := api.ParseRequest(body)
	if err != nil {
		return &exitError{exitBadRequest, fmt.Errorf("hidden: %w", err)}
	}
	path, synthetic, cleanup, err := resolveModel(model)
	if err != nil {
		return err
	}
	defer cleanup()
	if synthetic {
		fmt.Fprintln(cmd.ErrOrStderr(), "clef: note:", tinymodel.Warning)
	}
	if opts.Backend == "cpu" && !cmd.Flags().Changed("backend") {
		opts.Backend = "" // the best available, as clef decide
	}
	e, err := engine.Open(path, opts)
	if err != nil {
		return &exitError{1, fmt.Errorf("hidden: %w", err)}
	}
	defer e.Close()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	hidden, rows, err := e.Hidden(ctx, req)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return &exitError{exitBadRequest, fmt.Errorf("hidden: request refused (%d): %w", ae.Status, err)}
		}
		return &exitError{1, fmt.Errorf("hidden: %w", err)}
	}
	return writeHidden(out, hidden, rows, e.DecoderConfig().Hidden)
}
