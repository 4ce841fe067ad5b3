package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/tinymodel"
	"github.com/clefrt/clef/metal"
	"github.com/spf13/cobra"
)

func init() {
	var emulate, untimed bool
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Check every GPU kernel against the CPU backend on this machine",
		Long: "selftest runs every Metal kernel on the GPU and the same op on the CPU backend with the same random\n" +
			"inputs, and prints the max error, the NMSE and the achieved GB/s and TFLOP/s next to the chip's peak;\n" +
			"then it runs a full forward of the embedded tiny model on both backends and compares the hidden states.\n" +
			"It needs a Mac with Apple silicon. Elsewhere, in a clef built with -tags mslemu, it runs the same checks\n" +
			"on the MSL emulation harness (the kernels compiled as C++ with clang++-19 and run on the CPU) if\n" +
			"clang++-19 is installed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSelftest(cmd.Context(), cmd.OutOrStdout(), emulate, !untimed)
		},
	}
	cmd.Flags().BoolVar(&emulate, "emulate", false, "run the kernels on the CPU emulation harness even on a Mac")
	cmd.Flags().BoolVar(&untimed, "untimed", false, "small shapes and no throughput figures (faster)")
	rootCmd.AddCommand(cmd)
}

func runSelftest(ctx context.Context, w io.Writer, emulate, timed bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var gpu *metal.Backend
	device := ""
	if ok, why := metal.Available(); ok && !emulate {
		b, err := metal.New()
		if err != nil {
			return &exitError{1, err}
		}
		gpu, device = b, why
		fmt.Fprintf(w, "device: %s\n", b.Device())
	} else {
		if !emulate {
			fmt.Fprintf(w, "selftest needs a Mac with Apple silicon to test the GPU: %s\n", why)
		}
		if ok, why := metal.EmulatorAvailable(); !ok {
			fmt.Fprintf(w, "%s; nothing to run here\n", why)
			return nil
		}
		fmt.Fprintln(w, "running the kernels on the MSL emulation harness instead (CPU, slow; timings meaningless)")
		b, err := metal.NewEmulated()
		if err != nil {
			return &exitError{1, err}
		}
		gpu, timed = b, false
	}
	defer gpu.Close()
	ref := cpu.New(backend.Options{Threads: runtime.NumCPU()})
	failed, err := metal.SelfTest(ctx, w, gpu, ref, metal.SelfTestOptions{Timed: timed, Device: device})
	if err != nil {
		return &exitError{1, err}
	}
	if err := tinyForward(ctx, w, gpu, ref); err != nil {
		fmt.Fprintf(w, "FAIL tiny-model forward: %v\n", err)
		failed++
	}
	if failed > 0 {
		return &exitError{1, fmt.Errorf("selftest: %d checks failed", failed)}
	}
	fmt.Fprintln(w, "selftest: all checks passed")
	return nil
}

// tinyForward runs the embedded clef-tiny thinker on both backends and
// compares the final hidden states.
func tinyForward(ctx context.Context, w io.Writer, gpu, ref backend.Backend) error {
	dir, cleanup, err := tinymodel.WriteDir()
	if err != nil {
		return err
	}
	defer cleanup()
	r, err := release.Open(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	m, cfg := r.Weights, r.Config.Thinker.Text
	ids := []int{1, 17, 42, 99, 3, 250, 7, 7, 64, 301, 12, 5, 88}
	var hs [2][]float32
	for i, b := range []backend.Backend{gpu, ref} {
		model, err := qwen3moe.Load(m, cfg, b)
		if err != nil {
			return fmt.Errorf("%s: %w", b.Name(), err)
		}
		if hs[i], err = model.Hidden(ctx, ids, nil); err != nil {
			return fmt.Errorf("%s: %w", b.Name(), err)
		}
	}
	if len(hs[0]) != len(hs[1]) || len(hs[0]) == 0 {
		return errors.New("hidden states of different sizes")
	}
	var maxErr, num, den float64
	for i := range hs[0] {
		d := float64(hs[0][i]) - float64(hs[1][i])
		maxErr = math.Max(maxErr, math.Abs(d))
		num += d * d
		den += float64(hs[1][i]) * float64(hs[1][i])
	}
	nmse := num / den
	status := "ok  "
	if !(nmse <= 1e-6) {
		status = "FAIL"
	}
	fmt.Fprintf(w, "%s %-62s max|err| %.2e  nmse %.2e (<= 1e-06)\n", status, fmt.Sprintf("tiny-model forward, %d tokens", len(ids)), maxErr, nmse)
	if status == "FAIL" {
		return fmt.Errorf("hidden-state NMSE %.2e", nmse)
	}
	return nil
}
