package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/clefrt/clef/engine"
)

// BenchmarkFMAProbe measures the FMA peak probe on one thread (GFLOP/s).
func BenchmarkFMAProbe(b *testing.B) {
	const n = 1 << 12
	var out [8]float32
	for i := 0; i < b.N; i++ {
		fmaProbe(n, &out)
	}
	b.ReportMetric(float64(b.N)*n*fmaPerIter*2/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkDotProbe measures the int8 dot probe on one thread (Gop/s).
func BenchmarkDotProbe(b *testing.B) {
	const n = 1 << 12
	var out [8]int32
	for i := 0; i < b.N; i++ {
		dotProbe(n, &out)
	}
	b.ReportMetric(float64(b.N)*n*dotMACsPerIter*2/b.Elapsed().Seconds()/1e9, "Gop/s")
}

// BenchmarkDecideTiny measures one decision of the tiny model per state
// length, through the same in-process runner clef bench uses.
func BenchmarkDecideTiny(b *testing.B) {
	e, err := engine.Open(tinyRelease, engine.Options{Backend: "cpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, state := range []string{"256", "1k"} {
		states, _ := ParseStates(state)
		scs, _, err := Build(e.Tokenizer(), Grid{States: states, Questions: []int{8}, Options: []int{4}, Seed: 1}, 0)
		if err != nil {
			b.Fatal(err)
		}
		rec := scs[0].Records[0]
		r := &InProcess{E: e, MaxLength: engine.DefaultMaxLength}
		b.Run(fmt.Sprintf("state=%s", state), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := r.Decide(context.Background(), rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rec.InputTokens)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
