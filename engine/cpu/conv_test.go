package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clefrt/clef/engine/backend"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// TestGatherBlendRounding pins GatherBlend's arithmetic bit for bit: each
// product rounded to float32, the k terms added in order in float32 (as
// torch's embed(idx) * w, then the sum), never fused into a multiply-add
// (which arm64 has) nor accumulated wider. The conformance suite's float64
// reference cannot tell these apart.
func TestGatherBlendRounding(t *testing.T) {
	const rows, n, m, k = 11, 67, 29, 4
	rng := rand.New(rand.NewPCG(3, 4))
	tv := make([]float32, rows*n)
	for i := range tv {
		tv[i] = float32(rng.NormFloat64())
	}
	ids := make([]int, m*k)
	ws := make([]float32, m*k)
	for i := range ids {
		ids[i], ws[i] = rng.IntN(rows), float32(rng.NormFloat64())
	}
	for _, threads := range []int{1, 3} {
		be := New(backend.Options{Threads: threads})
		table, err := be.Upload(tv, rows, n)
		if err != nil {
			t.Fatal(err)
		}
		out, err := be.GatherBlend(table, ids, ws, k)
		if err != nil {
			t.Fatal(err)
		}
		got := out.Handle.([]float32)
		for i := 0; i < m; i++ {
			for c := 0; c < n; c++ {
				var p [k]float32
				for j := range p {
					p[j] = float32(ws[i*k+j] * tv[ids[i*k+j]*n+c])
				}
				want := float32(float32(float32(p[0]+p[1])+p[2]) + p[3])
				if g := got[i*n+c]; math.Float32bits(g) != math.Float32bits(want) {
					t.Fatalf("threads=%d row %d col %d: %g, want %g bit for bit", threads, i, c, g, want)
				}
			}
		}
	}
}

// BenchmarkIm2Col unfolds the input of the audio tower's second
// convolution (3x3, stride 2, 480 channels) for 4 windows of 64x50, one
// worker; MB/s counts the bytes written.
func BenchmarkIm2Col(b *testing.B) {
	g := backend.Conv2D{N: 4, H: 64, W: 50, C: 480, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1}
	be := New(backend.Options{Threads: 1})
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, g.N*g.H*g.W*g.C)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	x, err := be.Upload(v, g.N*g.H*g.W, g.C)
	if err != nil {
		b.Fatal(err)
	}
	oh, ow := g.Out()
	b.SetBytes(int64(4 * g.N * oh * ow * g.C * g.KH * g.KW))
	for i := 0; i < b.N; i++ {
		out, err := be.Im2Col(x, g)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(out)
	}
}

// BenchmarkGatherBlend interpolates the vision tower's position embeddings
// (a 48x48 grid of 1152, bf16) to 1024 patches of 4 corners, one worker;
// MB/s counts the bytes written.
func BenchmarkGatherBlend(b *testing.B) {
	const grid, dim, m, k = 48, 1152, 1024, 4
	be := New(backend.Options{Threads: 1})
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 2*grid*grid*dim)
	for i := 0; i < len(data); i += 2 {
		h := quant.Float32ToBF16(float32(rng.NormFloat64()))
		data[i], data[i+1] = byte(h), byte(h>>8)
	}
	table, err := be.Weight(&weights.Tensor{Name: "pos_embed", Type: quant.BF16, Shape: []int{grid * grid, dim}, Data: data})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int, m*k)
	ws := make([]float32, m*k)
	for i := range ids {
		ids[i], ws[i] = rng.IntN(grid*grid), float32(rng.Float64())
	}
	b.SetBytes(4 * m * dim)
	for i := 0; i < b.N; i++ {
		out, err := be.GatherBlend(table, ids, ws, k)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(out)
	}
}
