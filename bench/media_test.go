package bench

import (
	"context"
	"testing"

	"github.com/clefrt/clef/engine"
	"github.com/clefrt/clef/engine/record"
)

// The media scenarios run in process on the tiny model: the records' token
// counts (built from the processors' formulas) are what the engine reads,
// and the media stages are timed.
func TestRunMediaScenarios(t *testing.T) {
	kinds, err := ParseMedia("image,audio,image+audio")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseMedia("video"); err == nil {
		t.Error("an unknown media scenario was accepted")
	}
	build := func(tok record.Tokenizer) ([]*Scenario, []Skipped, error) {
		s, err := BuildMedia(tok, kinds, 0, 7)
		return s, nil, err
	}
	cfg := Config{Models: []ModelSpec{{Path: tinyRelease}}, Reps: 1, Engine: engine.Options{Backend: "cpu"}}
	rep, err := Run(context.Background(), cfg, nil, build)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Models) != 1 || len(rep.Models[0].Scenarios) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Models[0].Scenarios {
		st := s.Stages
		if st == nil || st.Decode <= 0 || st.Processor <= 0 || st.Towers <= 0 || st.Towers > st.Thinker || s.InputTokens < 100 {
			t.Errorf("%s: %d tokens, stages %+v", s.Scenario, s.InputTokens, st)
		}
	}
}
