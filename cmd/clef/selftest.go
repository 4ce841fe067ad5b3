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
	var emulate, untimed, trace bool
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Check every GPU kernel against the CPU backend on this machine",
		Long: "selftest opens the Metal backend (Apple's compiler builds every kernel; each pipeline's thread limit,\n" +
			"SIMD width and threadgroup memory are printed), runs every kernel on the GPU and the same op on the CPU\n" +
			"backend with the same random inputs, and prints the max error and the NMSE; then the achieved GB/s and\n" +
			"TFLOP/s per kernel next to the chip's peak; then a full forward of the embedded tiny model on both\n" +
			"backends. It exits non-zero when anything fails, including a device that does not open or shaders\n" +
			"that do not compile (the compiler's log is printed).\n\n" +
			"With --trace every dispatch is its own command buffer, waited for at once: the first GPU fault names its\n" +
			"kernel, grid, threadgroup and buffer sizes. Add Metal's validation for the exact fault:\n" +
			"  MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1 METAL_DEVICE_WRAPPER_TYPE=1 clef selftest --trace\n\n" +
			"It needs a Mac with Apple silicon. Elsewhere, in a clef built with -tags mslemu, it runs the same checks\n" +
			"on the MSL emulation harness (the kernels compiled as C++ with clang++-19 and run on the CPU) if\n" +
			"clang++-19 is installed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSelftest(cmd.Context(), cmd.OutOrStdout(), selftestOptions{emulate: emulate, timed: !untimed, trace: trace})
		},
	}
	cmd.Flags().BoolVar(&emulate, "emulate", false, "run the kernels on the CPU emulation harness even on a Mac")
	cmd.Flags().BoolVar(&untimed, "untimed", false, "small shapes and no throughput figures (faster)")
	cmd.Flags().BoolVar(&trace, "trace", false, "one command buffer per dispatch: the first GPU fault names its kernel and shapes")
	rootCmd.AddCommand(cmd)
}

// selftestOptions are selftest's flags.
type selftestOptions struct {
	emulate, timed, trace bool
}

// onAppleSilicon is whether this binary runs where a Metal device is
// expected (darwin/arm64): there, no device is a failure, not a skip.
const onAppleSilicon = runtime.GOOS == "darwin" && runtime.GOARCH == "arm64"

func runSelftest(ctx context.Context, w io.Writer, o selftestOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	gpu, device, err := openSelftestGPU(w, o)
	if err != nil || gpu == nil {
		return err
	}
	defer gpu.Close()
	if o.trace {
		gpu.SetTrace(true)
		fmt.Fprintln(w, "trace: every dispatch is its own command buffer, waited for at once (slow)")
	}
	ref := cpu.New(backend.Options{Threads: runtime.NumCPU()})
	timed := o.timed && device != ""
	failed, err := metal.SelfTest(ctx, w, gpu, ref, metal.SelfTestOptions{Timed: timed, Device: device, Trace: o.trace})
	if err != nil {
		return &exitError{1, err}
	}
	if err := tinyForward(ctx, w, gpu, ref); err != nil {
		fmt.Fprintf(w, "FAIL tiny-model forward: %v\n", err)
		if hint := metal.FaultHint(err, o.trace); hint != "" {
			fmt.Fprintln(w, hint)
		}
		failed++
	}
	if failed > 0 {
		return &exitError{1, fmt.Errorf("selftest: %d checks failed", failed)}
	}
	fmt.Fprintln(w, "selftest: all checks passed")
	return nil
}

// openFailed reports that the Metal backend did not open on device: when
// pipelines did not build, every pipeline's result first (one failure does
// not hide the others), then the error with the compiler's log.
func openFailed(w io.Writer, device string, err error) error {
	var pe *metal.PrepareError
	if errors.As(err, &pe) {
		metal.PipelineTable(w, pe.Pipelines)
	}
	fmt.Fprintf(w, "FAIL the Metal backend did not open on %s:\n%v\n", device, err)
	return &exitError{1, errors.New("selftest: the Metal backend did not open (the reason is above)")}
}

// openSelftestGPU opens the GPU backend to test: the Metal device, or the
// emulated one (--emulate, or off a Mac in a binary built with the
// emulator). device names the real GPU ("" when emulated). A nil backend
// with a nil error means there is nothing to test on this machine.
func openSelftestGPU(w io.Writer, o selftestOptions) (gpu *metal.Backend, device string, err error) {
	if !o.emulate {
		ok, why := metal.Available()
		switch {
		case ok:
			b, err := metal.New()
			if err != nil {
				return nil, "", openFailed(w, why, err)
			}
			fmt.Fprintf(w, "device: %s\n", b.Device())
			return b, why, nil
		case onAppleSilicon:
			fmt.Fprintf(w, "FAIL no usable Metal device: %s\n", why)
			return nil, "", &exitError{1, errors.New("selftest: no usable Metal device")}
		}
		fmt.Fprintf(w, "selftest needs a Mac with Apple silicon to test the GPU: %s\n", why)
	}
	if ok, why := metal.EmulatorAvailable(); !ok {
		if o.emulate {
			return nil, "", &exitError{1, fmt.Errorf("selftest --emulate: %s", why)}
		}
		fmt.Fprintf(w, "%s; nothing to run here\n", why)
		return nil, "", nil
	}
	fmt.Fprintln(w, "running the kernels on the MSL emulation harness instead (CPU, slow; timings meaningless)")
	b, err := metal.NewEmulated()
	if err != nil {
		return nil, "", &exitError{1, err}
	}
	return b, "", nil
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
