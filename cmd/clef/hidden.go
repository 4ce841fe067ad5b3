package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine/backend"
	_ "github.com/clefrt/clef/engine/cpu" // registers the "cpu" backend
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/internal/npy"
)

func init() {
	var (
		model, ids, out, backendName string
		threads                      int
		precise                      bool
	)
	cmd := &cobra.Command{
		Use:   "hidden --model PATH --ids 1,2,3 --out FILE.npy",
		Short: "Write the thinker's final normed hidden states for token ids as a float32 .npy [L, hidden]",
		Long: `hidden runs the thinker's text decoder on the given token ids (plain text
positions 0..L-1) and writes the final normed hidden state of every position
as a float32 .npy array of shape [L, hidden]. PATH is a release directory
(f32/bf16 safetensors shards + config.json), a .safetensors file with a
config.json beside it, or a qwen3moe/qwen3vlmoe .gguf file. Block-quantized
GGUF weights multiply 8-bit activations as llama.cpp does unless --precise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || ids == "" || out == "" {
				return &exitError{2, fmt.Errorf("hidden: --model, --ids and --out are required")}
			}
			tok, err := parseIDs(ids)
			if err != nil {
				return &exitError{2, fmt.Errorf("hidden: --ids: %w", err)}
			}
			if threads < 0 {
				return &exitError{2, fmt.Errorf("hidden: --threads must be >= 0, got %d", threads)}
			}
			h, hidden, err := runHidden(cmd.Context(), model, backend.Options{Threads: threads, Precise: precise}, backendName, tok)
			if err != nil {
				return &exitError{1, fmt.Errorf("hidden: %w", err)}
			}
			f, err := os.Create(out)
			if err != nil {
				return &exitError{1, fmt.Errorf("hidden: %w", err)}
			}
			w := bufio.NewWriter(f)
			if err := npy.WriteFloat32(w, h, len(tok), hidden); err != nil {
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
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "release directory, .safetensors or .gguf file")
	fl.StringVar(&ids, "ids", "", "comma-separated token ids")
	fl.StringVar(&out, "out", "", "output .npy file")
	fl.StringVar(&backendName, "backend", "cpu", "compute backend")
	fl.IntVar(&threads, "threads", 0, "CPU threads (0: all cores)")
	fl.BoolVar(&precise, "precise", false, "float32 activations for block-quantized weights (slower)")
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
