package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/clefrt/clef/metal"
)

// TestSelftestOffMac: where no Metal device is expected, selftest says
// what it cannot test; --emulate without the emulator is a failure, not a
// silent pass. (On a Mac the device checks are metal's darwin tests.)
func TestSelftestOffMac(t *testing.T) {
	if onAppleSilicon {
		t.Skip("a Mac runs the real selftest (metal's darwin tests)")
	}
	if ok, _ := metal.EmulatorAvailable(); ok {
		t.Skip("this binary holds the emulator: selftest would run it (TestSelfTestEmulated covers that)")
	}
	var out bytes.Buffer
	if err := runSelftest(context.Background(), &out, selftestOptions{timed: true}); err != nil {
		t.Fatalf("selftest without a device: %v\n%s", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "needs a Mac with Apple silicon") || !strings.Contains(s, "nothing to run here") {
		t.Errorf("selftest does not say why nothing ran:\n%s", s)
	}
	out.Reset()
	err := runSelftest(context.Background(), &out, selftestOptions{emulate: true})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code == 0 || !strings.Contains(err.Error(), "mslemu") {
		t.Errorf("selftest --emulate without the emulator: %v\n%s", err, out.String())
	}
}

// TestOpenFailedPrintsPipelines: when pipelines did not build at open,
// selftest prints every pipeline's result (the ones that built, with their
// limits, and each failure) before failing, not only the first error.
func TestOpenFailedPrintsPipelines(t *testing.T) {
	pe := &metal.PrepareError{
		Pipelines: []metal.PipelineReport{
			{Name: "add_f32", Info: metal.PipelineInfo{MaxThreads: 1024, ExecWidth: 32}},
			{Name: "rope_f32", Err: errors.New("program_source:9:2: error: expected ';'")},
			{Name: "rms_norm_f32", Err: errors.New("program_source:40:7: error: use of undeclared identifier")},
		},
		Failed: 2,
		First:  errors.New("metal: preparing pipeline rope_f32: program_source:9:2: error: expected ';'"),
	}
	var out bytes.Buffer
	err := openFailed(&out, "Apple M1", fmt.Errorf("metal: %w", pe))
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("openFailed returned %v, want exit code 1", err)
	}
	for _, want := range []string{"pipeline add_f32", "max threads 1024", "FAIL pipeline rope_f32", "FAIL pipeline rms_norm_f32",
		"undeclared identifier", "did not open on Apple M1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
