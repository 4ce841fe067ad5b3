//go:build mslemu

package metal

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/clefrt/clef/engine/model/qwen3moe"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/internal/npy"
)

const tinyDir = "../testdata/clef-tiny/"

// tinyCase is the first text record of the clef-tiny goldens: its input ids
// and transformers' final normed hidden states.
func tinyCase(t *testing.T) (ids []int, hidden []float32) {
	t.Helper()
	f, err := os.Open(tinyDir + "cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	if !sc.Scan() {
		t.Fatal("no case")
	}
	var c struct {
		InputIDs []int  `json:"input_ids"`
		Hidden   string `json:"hidden_file"`
	}
	if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	want, err := npy.ReadFile(tinyDir + c.Hidden)
	if err != nil {
		t.Fatal(err)
	}
	return c.InputIDs, want.F
}

// tinyRun opens the emulated device, loads the clef-tiny thinker on it,
// runs ids in row chunks of chunk, and returns the hidden states, the
// stats before Close, and the device (closed by then).
func tinyRun(t *testing.T, ids []int, chunk int) ([]float32, Stats, *emuGPU) {
	t.Helper()
	g, err := newEmuGPU()
	if err != nil {
		t.Fatal(err)
	}
	b, err := newBackend(g, "metal-emu")
	if err != nil {
		t.Fatal(err)
	}
	r, err := release.Open(tinyDir + "release")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cfg, err := release.ReadConfig(tinyDir + "release")
	if err != nil {
		t.Fatal(err)
	}
	m, err := qwen3moe.Load(r.Weights, cfg.Thinker.Text, b)
	if err != nil {
		t.Fatal(err)
	}
	m.Chunk = chunk
	out, err := m.Hidden(context.Background(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	if g.lazy != 0 {
		t.Errorf("%d launches used a pipeline not prepared at open", g.lazy)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return out, s, g
}

// TestReopenEmulatedMetal is the daemon's idle unload and reload on the
// emulated device: open, load the clef-tiny thinker, run a record in row
// chunks (Rows views and a Concat on the device), Close, and again. Both
// runs match transformers' hidden states, give the same bits and the same
// accounting; Close leaves no buffer or view alive and resets the
// counters; and every launch used a pipeline prepared at open.
func TestReopenEmulatedMetal(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates a whole forward twice")
	}
	ids, want := tinyCase(t)
	first, s1, g1 := tinyRun(t, ids, 7)
	second, s2, g2 := tinyRun(t, ids, 7)
	if len(first) != len(want) {
		t.Fatalf("%d values, want %d", len(first), len(want))
	}
	var worst float64
	for i := range first {
		if math.Float32bits(first[i]) != math.Float32bits(second[i]) {
			t.Fatalf("value %d: %g before the reopen, %g after", i, first[i], second[i])
		}
		worst = max(worst, math.Abs(float64(first[i])-float64(want[i])))
	}
	// The CPU backend's tolerance against these goldens (engine/model/qwen3moe).
	if worst > 1e-5 || math.IsNaN(worst) {
		t.Errorf("max |Δ| %.3g against transformers", worst)
	}
	t.Logf("%d tokens in chunks of 7: max |Δ| %.3g; %d command buffers, %d dispatches, peak %s (weights %s)",
		len(ids), worst, s1.Buffers, s1.Dispatches, sizeString(s1.PeakBytes), sizeString(s1.WeightBytes))
	if s1.Buffers != s2.Buffers || s1.Dispatches != s2.Dispatches || s1.LiveBytes != s2.LiveBytes || s1.CachedBytes != s2.CachedBytes ||
		s1.WeightBytes != s2.WeightBytes || s1.PeakBytes != s2.PeakBytes || s1.MaxBufferSeconds != s2.MaxBufferSeconds {
		t.Errorf("accounting differs after the reopen:\n%+v\n%+v", s1, s2)
	}
	if s1.WeightBytes == 0 || s1.Buffers < 2 || s1.Kernels["copy_f32"].Dispatches == 0 {
		t.Errorf("stats %+v: no weights counted, one command buffer, or no Concat", s1)
	}
	for i, g := range []*emuGPU{g1, g2} {
		if n := g.liveBuffers(); n != 0 || len(g.misuse) > 0 {
			t.Errorf("open %d: %d buffers alive after Close, misuse %v", i+1, n, g.misuse)
		}
	}
}

// TestWorkingSetEmulatedMetal: with the emulated device's working set set
// just above the clef-tiny weights, loading works and a record longer than
// the activations can hold fails with a MemoryError before any launch
// reaches the device; a short one runs.
func TestWorkingSetEmulatedMetal(t *testing.T) {
	if !mslemu.Available() {
		t.Skipf("%s not found: needs the emulated GPU", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: emulates a forward")
	}
	ids, _ := tinyCase(t)
	_, s, _ := tinyRun(t, ids, 0)
	g, err := newEmuGPU()
	if err != nil {
		t.Fatal(err)
	}
	g.workingSet = uint64(s.WeightBytes + 2<<20)
	b, err := newBackend(g, "metal-emu")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := release.Open(tinyDir + "release")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cfg, err := release.ReadConfig(tinyDir + "release")
	if err != nil {
		t.Fatal(err)
	}
	m, err := qwen3moe.Load(r.Weights, cfg.Thinker.Text, b)
	if err != nil {
		t.Fatal(err)
	}
	long := make([]int, 4000)
	for i := range long {
		long[i] = ids[i%len(ids)]
	}
	_, err = m.Hidden(context.Background(), long, nil)
	var me *MemoryError
	if !errors.As(err, &me) {
		t.Fatalf("a 4000-token record within %s: %v", sizeString(int64(g.workingSet)), err)
	}
	t.Log(err)
	if _, err := m.Hidden(context.Background(), ids[:8], nil); err != nil {
		t.Fatalf("a short record after the failure: %v", err)
	}
	if st := b.Stats(); st.PeakBytes > int64(g.workingSet) {
		t.Errorf("peak %s over the working set %s", sizeString(st.PeakBytes), sizeString(int64(g.workingSet)))
	}
}
