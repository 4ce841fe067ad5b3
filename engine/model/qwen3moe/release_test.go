package qwen3moe

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/internal/npy"
)

const tinyDir = "../../../testdata/clef-tiny/"

// TestClefTinyRelease runs the text records of the clef-tiny goldens through
// the release directories (float32 and bf16 shards) and compares the final
// normed hidden states with transformers' to 1e-5 absolute.
func TestClefTinyRelease(t *testing.T) {
	for _, rel := range []struct{ dir, cases string }{
		{"release", "cases.jsonl"},
		{"release-bf16", "cases-bf16.jsonl"},
	} {
		dir := tinyDir + rel.dir
		cfg, err := readText(dir)
		if err != nil {
			t.Fatal(err)
		}
		w, err := openWeights(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		m, err := Load(w, cfg, cpu.New(backend.Options{Threads: 2, Precise: true}))
		if err != nil {
			t.Fatal(err)
		}
		m.Chunk = 100 // several chunks per record
		f, err := os.Open(tinyDir + rel.cases)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		n := 0
		for sc.Scan() {
			var c struct {
				Name     string         `json:"name"`
				Request  map[string]any `json:"request"`
				InputIDs []int          `json:"input_ids"`
				Hidden   string         `json:"hidden_file"`
				Shape    [2]int         `json:"hidden_shape"`
			}
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatal(err)
			}
			if c.Request["audio"] != nil || c.Request["images"] != nil || c.Request["videos"] != nil {
				continue // media records need the encoders
			}
			n++
			t.Run(rel.dir+"/"+c.Name, func(t *testing.T) {
				got, err := m.Hidden(context.Background(), c.InputIDs, nil)
				if err != nil {
					t.Fatal(err)
				}
				want, err := npy.ReadFile(tinyDir + c.Hidden)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want.F) || c.Shape[0] != len(c.InputIDs) {
					t.Fatalf("%d values, want %d", len(got), len(want.F))
				}
				var mx float64
				for i := range got {
					mx = max(mx, math.Abs(float64(got[i])-float64(want.F[i])))
				}
				if mx > 1e-5 || math.IsNaN(mx) {
					t.Errorf("max abs error %.3g > 1e-5", mx)
				}
			})
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if n != 17 {
			t.Errorf("%s: %d text records, want 17", rel.cases, n)
		}
	}
}
