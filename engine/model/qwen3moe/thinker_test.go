package qwen3moe

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/cpu"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/internal/npy"
)

const omniDir = "../../../testdata/omni/"

// relErr returns max|a-b| / max|b| and ‖a-b‖₂ / ‖b‖₂.
func relErr(a, b []float32) (float64, float64) {
	var maxd, maxb, d2, b2 float64
	for i := range b {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(float64(a[i])) {
			d = math.Inf(1)
		}
		maxd = max(maxd, d)
		maxb = max(maxb, math.Abs(float64(b[i])))
		d2 += d * d
		b2 += float64(b[i]) * float64(b[i])
	}
	return maxd / maxb, math.Sqrt(d2 / b2)
}

func loadNpy(t *testing.T, name string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// parseText reads the decoder configuration of a config.json.
func parseText(data []byte) (release.Text, error) {
	th, err := release.ParseThinker(data)
	return th.Text, err
}

// readText reads the decoder configuration of the model at path.
func readText(path string) (release.Text, error) {
	c, err := release.ReadConfig(path)
	return c.Thinker.Text, err
}

// openWeights maps the model at path as the engine does.
func openWeights(path string) (weights.Model, error) {
	r, err := release.Open(path)
	if err != nil {
		return nil, err
	}
	return r.Weights, nil
}

func openOmni(t testing.TB, threads int) *Model {
	t.Helper()
	cj, err := os.ReadFile(omniDir + "config.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseText(cj)
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.OpenSafetensors(omniDir + "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	m, err := Load(w, cfg, cpu.New(backend.Options{Threads: threads, Precise: true}))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOmniConfig(t *testing.T) {
	cj, err := os.ReadFile(omniDir + "config.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseText(cj)
	if err != nil {
		t.Fatal(err)
	}
	want := release.Text{Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 8, TopK: 2, ExpertFFN: 32, Intermediate: 128, MaxPositions: 65536,
		Vocab: 512, NormEps: 1e-6, RopeTheta: 1e6, MRoPESections: [3]int{4, 2, 2}, MRoPEInterleaved: true, NormTopK: true}
	if cfg != want {
		t.Errorf("config\n got %+v\nwant %+v", cfg, want)
	}
}

// TestOmniText checks the final hidden states, both layer outputs and the
// router's top-k against transformers 4.57 (float32) on the text cases.
func TestOmniText(t *testing.T) {
	for _, run := range []struct{ threads, chunk int }{{1, 0}, {2, 0}, {2, 7}, {1, 16}} {
		threads := run.threads
		m := openOmni(t, threads)
		m.Chunk = run.chunk
		for _, cs := range []string{"text_len1", "text_len9", "text_len40"} {
			t.Run(fmt.Sprintf("%s/threads=%d/chunk=%d", cs, threads, run.chunk), func(t *testing.T) {
				ids64 := loadNpy(t, omniDir+cs+"_input_ids.npy").I
				pos := loadNpy(t, omniDir+cs+"_position_ids.npy")
				L := len(ids64)
				ids := make([]int, L)
				for i, v := range ids64 {
					ids[i] = int(v)
				}
				positions := make([][3]int, L)
				for s := 0; s < 3; s++ {
					for i := 0; i < L; i++ {
						positions[i][s] = int(pos.I[s*L+i])
					}
				}
				layerOut := map[int][]float32{}
				topk := make([][]float32, m.Config.Layers)
				out, err := m.Forward(context.Background(), Input{IDs: ids, Positions: positions}, func(name string, l int, tt *backend.Tensor) error {
					v, err := m.b.Read(context.Background(), tt)
					switch name {
					case "l_out":
						layerOut[l] = v
					case "ffn_moe_topk":
						topk[l] = append(topk[l], v...)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				got, err := m.b.Read(context.Background(), out)
				if err != nil {
					t.Fatal(err)
				}
				check := func(what string, got, want []float32) {
					t.Helper()
					if len(got) != len(want) {
						t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
					}
					mx, l2 := relErr(got, want)
					t.Logf("%s: max %.3g l2 %.3g", what, mx, l2)
					if mx > 1e-4 || l2 > 1e-4 {
						t.Errorf("%s: relative error max %.3g, l2 %.3g > 1e-4", what, mx, l2)
					}
				}
				check("last_hidden_state", got, loadNpy(t, omniDir+cs+"_last_hidden_state.npy").F)
				for l := 0; l < m.Config.Layers; l++ {
					check(fmt.Sprintf("layer%d_out", l), layerOut[l], loadNpy(t, fmt.Sprintf("%s%s_layer%d_out.npy", omniDir, cs, l)).F)
				}
				want := loadNpy(t, omniDir+cs+"_router_topk.npy").I
				k := m.Config.TopK
				for l := range topk {
					if len(topk[l]) != L*k {
						t.Fatalf("layer %d: %d expert ids, want %d", l, len(topk[l]), L*k)
					}
					for i := 0; i < L*k; i++ {
						if int64(topk[l][i]) != want[l*L*k+i] {
							t.Errorf("layer %d token %d: experts %v, want %v", l, i/k, topk[l][i/k*k:i/k*k+k], want[l*L*k+i/k*k:l*L*k+i/k*k+k])
							break
						}
					}
				}
			})
		}
	}
}

// TestOmniMedia feeds transformers' merged input embeddings, 3-D M-RoPE
// positions and DeepStack features of the media prompts and checks the
// final hidden states: this exercises the interleaved M-RoPE with unequal
// position streams and the DeepStack additions.
func TestOmniMedia(t *testing.T) {
	m := openOmni(t, 2)
	m.Chunk = 6 // chunks that split the image tokens
	for _, cs := range []string{"image", "mixed", "audio"} {
		t.Run(cs, func(t *testing.T) {
			ids64 := loadNpy(t, omniDir+cs+"_input_ids.npy").I
			L := len(ids64)
			pos := loadNpy(t, omniDir+cs+"_position_ids.npy")
			in := Input{IDs: make([]int, L), Positions: make([][3]int, L), Embeds: loadNpy(t, omniDir+cs+"_inputs_embeds.npy").F}
			unequal := false
			for i, v := range ids64 {
				in.IDs[i] = int(v)
				for s := 0; s < 3; s++ {
					in.Positions[i][s] = int(pos.I[s*L+i])
				}
				if in.Positions[i][1] != in.Positions[i][0] || in.Positions[i][2] != in.Positions[i][0] {
					unequal = true
				}
				if v == 507 || v == 508 { // image_token_id, video_token_id
					in.VisualRows = append(in.VisualRows, i)
				}
			}
			if cs != "audio" {
				if !unequal {
					t.Fatal("media case has plain 1-D positions")
				}
				for l := 0; l < 2; l++ {
					in.Deepstack = append(in.Deepstack, loadNpy(t, fmt.Sprintf("%s%s_visual_deepstack%d.npy", omniDir, cs, l)).F)
				}
			}
			topk := make([][]float32, m.Config.Layers)
			out, err := m.Forward(context.Background(), in, func(name string, l int, tt *backend.Tensor) error {
				if name == "ffn_moe_topk" {
					v, err := m.b.Read(context.Background(), tt)
					topk[l] = append(topk[l], v...)
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.b.Read(context.Background(), out)
			if err != nil {
				t.Fatal(err)
			}
			mx, l2 := relErr(got, loadNpy(t, omniDir+cs+"_last_hidden_state.npy").F)
			t.Logf("last_hidden_state: max %.3g l2 %.3g", mx, l2)
			if mx > 1e-4 || l2 > 1e-4 {
				t.Errorf("last_hidden_state: relative error max %.3g, l2 %.3g > 1e-4", mx, l2)
			}
			want := loadNpy(t, omniDir+cs+"_router_topk.npy").I
			for l := range topk {
				for i := range topk[l] {
					if int64(topk[l][i]) != want[l*len(topk[l])+i] {
						t.Fatalf("layer %d token %d: experts differ from transformers", l, i/m.Config.TopK)
					}
				}
			}
		})
	}
}
