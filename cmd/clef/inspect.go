package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/clefrt/clef/engine/convert"
)

func init() {
	var ctx int
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Describe a model: architecture, parameters, tensor types, size, memory a decision needs",
		Long: `inspect describes a Clef-Omni model at PATH (release or MLX directory, a GGUF
from clef quantize or llama.cpp with its companion, or a .safetensors file):
architecture, parameter counts, tensors per storage type with their bytes,
total size, and the memory one decision needs at --context tokens (all
weights + one layer's float32 activations + one layer of K/V; prefill only),
with a note when that exceeds this machine's RAM.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ctx <= 0 || ctx > 1<<24 {
				return &exitError{2, fmt.Errorf("inspect: --context must be between 1 and %d, got %d", 1<<24, ctx)}
			}
			p, err := modelPath(args[0])
			if err != nil {
				return &exitError{1, fmt.Errorf("inspect: %w", err)}
			}
			d, err := convert.Describe(p, ctx)
			if err != nil {
				return &exitError{1, fmt.Errorf("inspect: %w", err)}
			}
			printDescription(cmd.OutOrStdout(), d)
			return nil
		},
	}
	cmd.Flags().IntVar(&ctx, "context", convert.DefaultContext, "tokens per decision for the memory estimate")
	rootCmd.AddCommand(cmd)
}

func printDescription(w io.Writer, d *convert.Description) {
	fmt.Fprintf(w, "model         %s\n", d.Path)
	fmt.Fprintf(w, "format        %s\n", d.Format)
	fmt.Fprintf(w, "architecture  %s\n", d.Architecture)
	if c := d.Config; c != nil {
		fmt.Fprintf(w, "text model    %d layers, hidden %d, %d/%d heads x %d, %d experts (top %d) x %d, vocab %d\n",
			c.Layers, c.Hidden, c.Heads, c.KVHeads, c.HeadDim, c.Experts, c.TopK, c.ExpertFFN, c.Vocab)
	}
	p := d.Params
	fmt.Fprintf(w, "parameters    %s total\n", count(p.Total))
	fmt.Fprintf(w, "  text        %s (experts %s; active per token %s)\n", count(p.Text), count(p.Experts), count(p.Active))
	if p.Audio+p.Vision > 0 {
		fmt.Fprintf(w, "  audio       %s\n  vision      %s\n", count(p.Audio), count(p.Vision))
	}
	if p.Head > 0 {
		fmt.Fprintf(w, "  head        %s\n", count(p.Head))
	}
	fmt.Fprintf(w, "tensors       %d\n", d.Tensors)
	fmt.Fprintf(w, "  %-8s %8s %14s %12s\n", "type", "tensors", "parameters", "bytes")
	for _, t := range d.Types {
		fmt.Fprintf(w, "  %-8v %8d %14d %12s\n", t.Type, t.Tensors, t.Params, humanBytes(t.Bytes))
	}
	var disk int64
	for _, f := range d.Files {
		disk += f.Bytes
	}
	fmt.Fprintf(w, "size          %s of tensor data in %d files (%s on disk)\n", humanBytes(d.WeightBytes), len(d.Files), humanBytes(disk))
	m := d.Memory
	fmt.Fprintf(w, "memory        %s for one decision of %d tokens: weights %s + activations %s + one layer of KV %s\n",
		humanBytes(m.Total), m.Context, humanBytes(m.Weights), humanBytes(m.Activations), humanBytes(m.KV))
	switch {
	case m.Available == 0:
		fmt.Fprintf(w, "              (this machine's RAM is unknown)\n")
	case !m.Fits:
		fmt.Fprintf(w, "note          this will NOT fit in this machine's %s of RAM: use a smaller quantization (clef quantize) or a shorter --context\n", humanBytes(m.Available))
	case runtime.GOOS == "darwin" && float64(m.Total) > 0.75*float64(m.Available):
		fmt.Fprintf(w, "note          fits in RAM (%s) but exceeds the ~75%% macOS lets the GPU use; Metal may fail, the CPU backend will run\n", humanBytes(m.Available))
	default:
		fmt.Fprintf(w, "              fits in this machine's %s of RAM\n", humanBytes(m.Available))
	}
}

// count formats a parameter count (1.23B, 45.6M, 7.8K).
func count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB (%d)", float64(n)/1e9, n)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM (%d)", float64(n)/1e6, n)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK (%d)", float64(n)/1e3, n)
	}
	return fmt.Sprint(n)
}
