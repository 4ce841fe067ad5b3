//go:build mslemu

package engine

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/api"
	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/metal"
)

// emuBackend is the registry name of the Metal backend over the emulated
// GPU, registered for these tests only.
const emuBackend = "metal-emu"

func init() {
	backend.Register(emuBackend, func(backend.Options) (backend.Backend, error) {
		b, err := metal.NewEmulated()
		if err != nil {
			return nil, err // not a nil *metal.Backend in a non-nil interface
		}
		return b, nil
	})
}

// TestGoldenDecideEmulatedMetal runs the media records of both clef-tiny
// releases (a WAV clip; a PNG and a WAV clip; float32 and bf16 weights)
// through Decide on the Metal backend over the emulated GPU (the mslemu
// build tag): data URLs through the decoders and processors, the vision
// and audio towers, the composed thinker and the joint head all on the
// backend's host ops and real shader source. The ids and spans are the
// reference's, the probabilities within 1e-4 of it and the response
// identical byte for byte.
func TestGoldenDecideEmulatedMetal(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates every kernel")
	}
	const probTol = 1e-4
	for _, rel := range []struct{ dir, cases string }{{"release", "cases.jsonl"}, {"release-bf16", "cases-bf16.jsonl"}} {
		var e *Engine
		var worst float64
		ran := 0
		for _, c := range readCases(t, rel.cases) {
			if !strings.HasPrefix(c.Name, "media_") {
				continue
			}
			if e == nil || e.opts.MaxLength != c.MaxLength {
				e = open(t, rel.dir, Options{Backend: emuBackend, MaxLength: c.MaxLength})
				if e.Backend() != emuBackend {
					t.Fatalf("engine runs on %q, want %q", e.Backend(), emuBackend)
				}
			}
			checkMedia(t, e, rel.dir, c, probTol, &worst)
			ran++
		}
		if ran != 2 {
			t.Errorf("%s: ran %d media cases, want 2", rel.dir, ran)
		}
		t.Logf("%s: %d media cases on %s, max |Δp| %.3g", rel.dir, ran, emuBackend, worst)
	}
}

// checkMedia decides golden case c on e and compares it with the reference.
func checkMedia(t *testing.T, e *Engine, rel string, c goldenCase, probTol float64, worst *float64) {
	t.Helper()
	req, err := api.ParseRequest(c.Request)
	if err != nil {
		t.Fatalf("%s/%s: %v", rel, c.Name, err)
	}
	d, err := e.decide(context.Background(), req)
	if err != nil {
		t.Fatalf("%s/%s: %v", rel, c.Name, err)
	}
	if !slices.Equal(d.enc.InputIDs, c.InputIDs) {
		t.Errorf("%s/%s: input ids differ from the reference", rel, c.Name)
	}
	if len(d.enc.Questions) != len(c.Questions) || len(d.probs) != len(c.Probabilities) {
		t.Fatalf("%s/%s: %d questions, %d probability rows; want %d", rel, c.Name, len(d.enc.Questions), len(d.probs), len(c.Questions))
	}
	var caseWorst float64
	for qi, q := range c.Questions {
		eq := d.enc.Questions[qi]
		if eq.ID != q.ID || eq.Type != q.Type || eq.Span != q.Span || !slices.Equal(eq.OptionSpans, q.OptionSpans) || !slices.Equal(eq.OptionIDs, q.OptionIDs) {
			t.Errorf("%s/%s: question %d encoded as %+v, want %+v", rel, c.Name, qi, eq, q)
		}
		if len(d.probs[qi]) != len(c.Probabilities[qi]) {
			t.Fatalf("%s/%s: q%d: %d probabilities, want %d", rel, c.Name, qi, len(d.probs[qi]), len(c.Probabilities[qi]))
		}
		for k, want := range c.Probabilities[qi] {
			dp := math.Abs(float64(d.probs[qi][k]) - want)
			caseWorst = max(caseWorst, dp)
			if dp > probTol {
				t.Errorf("%s/%s: q%d option %d: p %v, want %v", rel, c.Name, qi, k, d.probs[qi][k], want)
			}
		}
	}
	*worst = max(*worst, caseWorst)
	t.Logf("%s/%s: max |Δp| %.3g", rel, c.Name, caseWorst)
	got, _ := d.resp.MarshalJSON()
	if want := canonical(t, c.Response); string(got) != want {
		t.Errorf("%s/%s: response\n got %s\nwant %s", rel, c.Name, got, want)
	}
}
