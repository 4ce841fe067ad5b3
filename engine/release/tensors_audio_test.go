package release_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
)

// The audio table names exactly the thinker.audio_tower.* tensors a
// checkpoint stores (the tiny Qwen3-Omni of testdata/omni and the clef-tiny
// release), with their shapes, and Lookup finds every row.
func TestAudioTableMatchesCheckpoints(t *testing.T) {
	for _, m := range towerCheckpoints(t) {
		t.Run(m.name, func(t *testing.T) {
			cfg := m.thinker.Audio
			if cfg == nil {
				t.Fatal("no audio_config")
			}
			rows := release.AudioTensors(*cfg)
			if len(rows) != 7+16*cfg.Layers+6 {
				t.Fatalf("%d rows for %d layers", len(rows), cfg.Layers)
			}
			checkTowerTable(t, m.w, release.AudioPrefix, rows, checkAudioRow)
		})
	}
}

// checkAudioRow checks the documented Layer/Key/Role convention of a row.
func checkAudioRow(t *testing.T, row release.Tensor) {
	t.Helper()
	if row.GGUF != "" || row.Optional || row.Stacked() {
		t.Errorf("%s: GGUF %q, optional %v", row.Name, row.GGUF, row.Optional)
	}
	prefix := release.AudioPrefix
	if row.Layer >= 0 {
		prefix = fmt.Sprintf("%slayers.%d.", release.AudioPrefix, row.Layer)
	}
	if row.Name != prefix+row.Key || release.TowerOf(row.Name) != "audio" {
		t.Errorf("%s: key %q layer %d", row.Name, row.Key, row.Layer)
	}
	want := release.RoleTower
	if len(row.Shape) == 1 {
		want = release.RoleNorm
	}
	if row.Role != want {
		t.Errorf("%s: role %s for shape %v, want %s", row.Name, row.Role, row.Shape, want)
	}
}

// With the released checkpoint's audio_config (spec §5.2) the table has the
// shapes of spec §3.2 and adds up to the audio tower's parameter count
// (spec §2.1), which also shows that no sinusoid table is listed.
func TestAudioTableReleaseShapes(t *testing.T) {
	c := release.Audio{MelBins: 128, DModel: 1280, Layers: 32, Heads: 20, FFN: 5120, Activation: "gelu", DownsampleHidden: 480,
		OutputDim: 2048, NWindow: 50, NWindowInfer: 800, ConvChunkSize: 500, MaxSourcePositions: 1500}
	if f := release.AudioConvFreq(c.MelBins); f != 16 {
		t.Errorf("AudioConvFreq(128) = %d, want 16", f)
	}
	want := map[string][]int{
		"thinker.audio_tower.conv2d1.weight":                   {480, 1, 3, 3},
		"thinker.audio_tower.conv2d2.weight":                   {480, 480, 3, 3},
		"thinker.audio_tower.conv2d3.bias":                     {480},
		"thinker.audio_tower.conv_out.weight":                  {1280, 7680},
		"thinker.audio_tower.layers.31.self_attn.k_proj.bias":  {1280},
		"thinker.audio_tower.layers.3.self_attn.q_proj.weight": {1280, 1280},
		"thinker.audio_tower.layers.0.fc1.weight":              {5120, 1280},
		"thinker.audio_tower.layers.0.fc2.weight":              {1280, 5120},
		"thinker.audio_tower.ln_post.bias":                     {1280},
		"thinker.audio_tower.proj2.weight":                     {2048, 1280},
		"thinker.audio_tower.proj2.bias":                       {2048},
	}
	params := 0
	for _, row := range release.AudioTensors(c) {
		n := 1
		for _, d := range row.Shape {
			n *= d
		}
		params += n
		if s, ok := want[row.Name]; ok {
			if !reflect.DeepEqual(row.Shape, s) {
				t.Errorf("%s: shape %v, want %v", row.Name, row.Shape, s)
			}
			delete(want, row.Name)
		}
		if strings.Contains(row.Name, "positional") {
			t.Errorf("%s: the sinusoid table is computed, not stored", row.Name)
		}
	}
	for n := range want {
		t.Errorf("%s: missing", n)
	}
	if params != 647927168 {
		t.Errorf("%d audio tower parameters, want 647927168", params)
	}
	for bins, f := range map[int]int{1: 1, 8: 1, 9: 2, 80: 10, 127: 16, 129: 17} {
		if got := release.AudioConvFreq(bins); got != f {
			t.Errorf("AudioConvFreq(%d) = %d, want %d", bins, got, f)
		}
	}
}
