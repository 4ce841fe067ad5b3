package release_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
)

// The vision table names exactly the thinker.visual.* tensors a checkpoint
// stores (the tiny Qwen3-Omni of testdata/omni and the clef-tiny release),
// with their shapes, and Lookup finds every row.
func TestVisionTableMatchesCheckpoints(t *testing.T) {
	for _, m := range towerCheckpoints(t) {
		t.Run(m.name, func(t *testing.T) {
			if m.thinker.Vision == nil {
				t.Fatal("no vision_config")
			}
			c := *m.thinker.Vision
			rows := release.VisionTensors(c)
			if len(rows) != 3+12*c.Depth+6+6*len(c.DeepstackVisualIndexes) {
				t.Fatalf("%d rows for %d blocks and %d deepstack mergers", len(rows), c.Depth, len(c.DeepstackVisualIndexes))
			}
			checkTowerTable(t, m.w, release.VisionPrefix, rows, checkVisionRow)
		})
	}
}

// checkVisionRow checks the documented Layer/Key/Role convention of a row.
func checkVisionRow(t *testing.T, row release.Tensor) {
	t.Helper()
	if row.GGUF != "" || row.Optional || row.Stacked() {
		t.Errorf("%s: GGUF %q, optional %v", row.Name, row.GGUF, row.Optional)
	}
	prefix := release.VisionPrefix
	merger := strings.HasPrefix(row.Key, "merger_list.")
	switch {
	case merger && !strings.HasPrefix(row.Key, fmt.Sprintf("merger_list.%d.", row.Layer)):
		t.Errorf("%s: deepstack merger key %q in layer %d", row.Name, row.Key, row.Layer)
	case !merger && row.Layer >= 0:
		prefix = fmt.Sprintf("%sblocks.%d.", release.VisionPrefix, row.Layer)
	case !merger && row.Layer != -1:
		t.Errorf("%s: layer %d", row.Name, row.Layer)
	}
	if row.Name != prefix+row.Key || release.TowerOf(row.Name) != "vision" {
		t.Errorf("%s: key %q layer %d", row.Name, row.Key, row.Layer)
	}
	want := release.RoleTower
	switch {
	case row.Key == "pos_embed.weight":
		want = release.RoleEmbed // read by rows, kept float
	case len(row.Shape) == 1:
		want = release.RoleNorm
	}
	if row.Role != want {
		t.Errorf("%s: role %s for shape %v, want %s", row.Name, row.Role, row.Shape, want)
	}
}

// With the released checkpoint's vision_config (spec §4.1) the table has
// the shapes of spec §3.3 and adds up to the vision tower's parameter
// count (spec §2.1), which also shows that no rotary table is listed.
func TestVisionTableReleaseShapes(t *testing.T) {
	c := release.Vision{Depth: 27, Hidden: 1152, Heads: 16, Intermediate: 4304, HiddenAct: "gelu_pytorch_tanh", InChannels: 3,
		PatchSize: 16, TemporalPatchSize: 2, SpatialMergeSize: 2, OutHidden: 2048, NumPositionEmbeddings: 2304,
		DeepstackVisualIndexes: []int{8, 16, 24}}
	want := map[string][]int{
		"thinker.visual.patch_embed.proj.weight":        {1152, 3, 2, 16, 16},
		"thinker.visual.patch_embed.proj.bias":          {1152},
		"thinker.visual.pos_embed.weight":               {2304, 1152},
		"thinker.visual.blocks.0.norm1.weight":          {1152},
		"thinker.visual.blocks.26.norm2.bias":           {1152},
		"thinker.visual.blocks.3.attn.qkv.weight":       {3456, 1152},
		"thinker.visual.blocks.3.attn.qkv.bias":         {3456},
		"thinker.visual.blocks.12.attn.proj.weight":     {1152, 1152},
		"thinker.visual.blocks.7.mlp.linear_fc1.weight": {4304, 1152},
		"thinker.visual.blocks.7.mlp.linear_fc1.bias":   {4304},
		"thinker.visual.blocks.7.mlp.linear_fc2.weight": {1152, 4304},
		"thinker.visual.merger.ln_q.weight":             {1152},
		"thinker.visual.merger.mlp.0.weight":            {4608, 4608},
		"thinker.visual.merger.mlp.2.weight":            {2048, 4608},
		"thinker.visual.merger.mlp.2.bias":              {2048},
		"thinker.visual.merger_list.0.ln_q.bias":        {4608},
		"thinker.visual.merger_list.2.mlp.0.weight":     {4608, 4608},
		"thinker.visual.merger_list.1.mlp.2.weight":     {2048, 4608},
		"thinker.visual.merger_list.2.mlp.2.bias":       {2048},
	}
	rows := release.VisionTensors(c)
	if len(rows) != 3+12*27+6+6*3 {
		t.Errorf("%d rows, want %d", len(rows), 3+12*27+6+6*3)
	}
	params := 0
	for _, row := range rows {
		checkVisionRow(t, row)
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
		if strings.Contains(row.Name, "rotary") || strings.Contains(row.Name, "inv_freq") {
			t.Errorf("%s: the rotary table is computed, not stored", row.Name)
		}
	}
	for n := range want {
		t.Errorf("%s: missing", n)
	}
	if params != 538631408 {
		t.Errorf("%d vision tower parameters, want 538631408", params)
	}
	// The spec's order: patch embedding, position table, blocks, merger,
	// deepstack mergers.
	if rows[0].Key != "patch_embed.proj.weight" || rows[2].Key != "pos_embed.weight" || rows[3].Name != "thinker.visual.blocks.0.norm1.weight" ||
		rows[len(rows)-1].Name != "thinker.visual.merger_list.2.mlp.2.bias" {
		t.Errorf("table order: %s, %s, %s ... %s", rows[0].Name, rows[2].Name, rows[3].Name, rows[len(rows)-1].Name)
	}
}

// An MLX conversion stores the tower as visual.* or vision_tower.*; Lookup
// finds a vision row under either spelling.
func TestVisionTableMLXSpelling(t *testing.T) {
	row := release.VisionTensors(release.Vision{Depth: 1, Hidden: 4, Heads: 1, Intermediate: 8, InChannels: 3, PatchSize: 2,
		TemporalPatchSize: 2, SpatialMergeSize: 2, OutHidden: 8, NumPositionEmbeddings: 4})[3] // blocks.0.norm1.weight
	for _, name := range []string{"visual.blocks.0.norm1.weight", "vision_tower.blocks.0.norm1.weight"} {
		m := mapModel{name: &weights.Tensor{Name: name, Shape: []int{4}, Data: make([]byte, 16)}}
		w, names, err := release.Lookup(m, row)
		if err != nil || w == nil || !reflect.DeepEqual(names, []string{name}) {
			t.Errorf("%s: %v %v", name, names, err)
		}
	}
}
