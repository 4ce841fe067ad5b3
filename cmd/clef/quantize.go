package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine/convert"
	"github.com/clefrt/clef/quant"
)

func init() {
	var model, typ, out, towers string
	var threads int
	var quiet bool
	names := make([]string, len(convert.FileTypes))
	for i, f := range convert.FileTypes {
		names[i] = f.Name
	}
	cmd := &cobra.Command{
		Use:   "quantize --model SRC --type TYPE --out FILE.gguf",
		Short: "Write a quantized GGUF of the thinker's text decoder, and its companion",
		Long: `quantize streams a Clef-Omni model (release or MLX directory, or a
qwen3moe/qwen3vlmoe GGUF) into two files:

  FILE.gguf       the thinker's text decoder as a llama.cpp "qwen3moe" GGUF,
                  tokenizer included, quantized to TYPE
  FILE.head.gguf  the companion: joint head (never quantized), audio and
                  vision towers (source precision, or Q8_0 with --towers q8_0)
                  and the release's config files as metadata

TYPE is one of ` + strings.Join(names, ", ") + `. Norms and the router stay F32;
the _M mixtures give attn_v, part of ffn_down_exps and output more bits;
tensors whose rows do not fit a type's blocks fall back as llama.cpp does
(listed at the end). One source matrix is in memory at a time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || typ == "" || out == "" {
				return &exitError{2, fmt.Errorf("quantize: --model, --type and --out are required")}
			}
			ft, err := convert.ParseFileType(typ)
			if err != nil {
				return &exitError{2, fmt.Errorf("quantize: %w", err)}
			}
			if !strings.HasSuffix(out, ".gguf") || strings.HasSuffix(out, ".head.gguf") {
				return &exitError{2, fmt.Errorf("quantize: --out %q must end in .gguf (and not .head.gguf)", out)}
			}
			opts := convert.Options{Type: ft, Out: out, Threads: threads}
			switch towers {
			case "", "keep":
			case "q8_0":
				opts.TowerType = quant.Q8_0
			default:
				return &exitError{2, fmt.Errorf("quantize: --towers must be keep or q8_0, got %q", towers)}
			}
			if !quiet {
				opts.Progress = os.Stderr
			}
			if model, err = modelPath(model); err != nil {
				return &exitError{2, err}
			}
			res, err := convert.Quantize(model, opts)
			if err != nil {
				return &exitError{1, err}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s: %d tensors, %s\n", res.Backbone, res.BackboneTensors, humanBytes(res.BackboneBytes))
			fmt.Fprintf(w, "%s: %d tensors, %s\n", res.Companion, res.CompanionTensors, humanBytes(res.CompanionBytes))
			types := make([]quant.Type, 0, len(res.Types))
			for t := range res.Types {
				types = append(types, t)
			}
			sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
			var parts []string
			for _, t := range types {
				parts = append(parts, fmt.Sprintf("%v %d", t, res.Types[t]))
			}
			fmt.Fprintf(w, "backbone types: %s\n", strings.Join(parts, ", "))
			if len(res.Fallbacks) > 0 {
				fmt.Fprintf(w, "%d tensors fell back to another type (rows not a multiple of the block size):\n", len(res.Fallbacks))
				for _, f := range res.Fallbacks {
					fmt.Fprintf(w, "  %s\n", f)
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "source: release or MLX directory, or a qwen3moe/qwen3vlmoe .gguf")
	fl.StringVar(&typ, "type", "", "quantization: "+strings.Join(names, ", "))
	fl.StringVar(&out, "out", "", "backbone GGUF to write (the companion goes to FILE.head.gguf)")
	fl.StringVar(&towers, "towers", "keep", "audio/vision towers in the companion: keep (source precision) or q8_0")
	fl.IntVar(&threads, "threads", 0, "quantization threads (0: all cores)")
	fl.BoolVar(&quiet, "quiet", false, "no progress bar")
	rootCmd.AddCommand(cmd)
}

// humanBytes formats a size in decimal units.
func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
