package main

import (
	"encoding/json"
	"testing"

	"github.com/clefrt/clef/hub/hubtest"
)

func TestSpeechShardSkippedLoads(t *testing.T) {
	repo := releaseRepo(t, tinyRelease)
	files := repo.Commits[commitA]
	var idx map[string]any
	json.Unmarshal(files["model.safetensors.index.json"].Data, &idx)
	idx["weight_map"].(map[string]any)["talker.extra.weight"] = "model-00003-of-00003.safetensors"
	b, _ := json.Marshal(idx)
	files["model.safetensors.index.json"] = hubtest.File{Data: b}
	files["model-00003-of-00003.safetensors"] = hubtest.File{Data: []byte("speech"), LFS: true}
	h := fakeHub(t, map[string]*hubtest.Repo{"org/sp": repo})
	hubEnv(t, h.Hub.URL)
	out, _, err := run(t, "", "pull", "org/sp", "--quiet")
	t.Log(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := modelPath("org/sp")
	if err != nil {
		t.Fatal(err)
	}
	g := goldens(t)[0]
	if _, _, err := run(t, string(g.Request), "decide", "--model", p); err != nil {
		t.Fatal(err)
	}
}
