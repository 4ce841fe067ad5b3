package audio

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// memModel is an in-memory weights.Model of float32 tensors.
type memModel map[string]*weights.Tensor

func (m memModel) Tensor(name string) (*weights.Tensor, error) {
	if t, ok := m[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("no tensor %s", name)
}
func (m memModel) Has(name string) bool { _, ok := m[name]; return ok }
func (m memModel) Names() []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}
func (m memModel) Close() error { return nil }

// synthWeights gives every row of the audio table seeded random float32
// values: matrices and kernels N(0, 1/fan_in), LayerNorm weights 1,
// biases small.
func synthWeights(c release.Audio, seed uint64) memModel {
	r := rand.New(rand.NewPCG(seed, 1))
	m := memModel{}
	for _, t := range release.AudioTensors(c) {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		std := 0.02
		if len(t.Shape) > 1 {
			std = 1 / math.Sqrt(float64(n/t.Shape[0]))
		}
		data := make([]byte, 4*n)
		for i := range n {
			v := float32(r.NormFloat64() * std)
			if len(t.Shape) == 1 && t.Role == release.RoleNorm && t.Key[len(t.Key)-6:] == "weight" {
				v = 1
			}
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		m[t.Name] = &weights.Tensor{Name: t.Name, Type: quant.F32, Shape: slices.Clone(t.Shape), Data: data}
	}
	return m
}

// BenchmarkAudioTower runs the tower with the release's layer shapes
// (d_model 1280, 20 heads, ffn 5120, downsample 480, 128 mel bins) but 2
// layers, random weights, on 10 s of mel (1000 frames, 130 tokens), and
// reports the time per audio token.
func BenchmarkAudioTower(b *testing.B) {
	cfg := release.Audio{MelBins: 128, DModel: 1280, Layers: 2, Heads: 20, FFN: 5120, Activation: "gelu", DownsampleHidden: 480,
		OutputDim: 2048, NWindow: 50, NWindowInfer: 800, ConvChunkSize: 500, MaxSourcePositions: 1500}
	be, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	m, err := Load(synthWeights(cfg, 1), cfg, be)
	if err != nil {
		b.Fatal(err)
	}
	const frames = 1000
	r := rand.New(rand.NewPCG(2, 2))
	mel := make([]float32, cfg.MelBins*frames)
	for i := range mel {
		mel[i] = float32(r.NormFloat64()*0.3 - 0.2)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		out, err := m.Forward(ctx, mel, frames, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := be.Read(ctx, out); err != nil {
			b.Fatal(err)
		}
		be.Free(out)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(Tokens(frames))/1e3, "µs/token")
}
