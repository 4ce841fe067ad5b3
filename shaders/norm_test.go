package shaders_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// normCase checks rms_norm_f32, or layer_norm_f32 with or without its bias
// (without, the bias buffer holds NaN: it must not be read).
func normCase(layer, bias bool) kernelCase {
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, sh := range []struct{ rows, cols, threads int }{{3, 128, 32}, {5, 2048, 256}, {2, 1153, 256}, {1, 72, 64}} {
			xs, ys := sh.cols+3, sh.cols+5
			x := randF32(rng, sh.rows*xs, 1.5)
			w := randF32(rng, sh.cols, 1)
			b := randF32(rng, sh.cols, 1)
			y := make([]float32, sh.rows*ys)
			for i := range y {
				y[i] = float32(math.NaN())
			}
			args := shaders.KargsNorm{Rows: int32(sh.rows), Cols: int32(sh.cols), XStride: int32(xs), YStride: int32(ys), Eps: 1e-6}
			if bias {
				args.HasBias = 1
			} else {
				b = nanF32(sh.cols)
			}
			name := "rms_norm_f32"
			bufs := []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.F32(w)}}
			if layer {
				name = "layer_norm_f32"
				bufs = append(bufs, mslemu.Buffer{Index: 3, Data: mslemu.F32(b)}, mslemu.Buffer{Index: 4, Data: mslemu.F32(y)})
			} else {
				bufs = append(bufs, mslemu.Buffer{Index: 3, Data: mslemu.F32(y)})
			}
			out := runJob(t, h, &mslemu.Job{Kernel: name, Grid: [3]int{sh.rows, 1, 1}, Group: [3]int{sh.threads, 1, 1}, Buffers: bufs})
			got := mslemu.ToF32(out[len(out)-1])
			for r := 0; r < sh.rows; r++ {
				xr := x[r*xs : r*xs+sh.cols]
				var mean, ss float64
				if layer {
					for _, v := range xr {
						mean += float64(v)
					}
					mean /= float64(sh.cols)
				}
				for _, v := range xr {
					ss += (float64(v) - mean) * (float64(v) - mean)
				}
				scale := 1 / math.Sqrt(ss/float64(sh.cols)+1e-6)
				want := make([]float64, sh.cols)
				for c := range want {
					want[c] = (float64(xr[c]) - mean) * scale * float64(w[c])
					if bias {
						want[c] += float64(b[c])
					}
				}
				checkClose(t, name, got[r*ys:r*ys+sh.cols], want, 1e-5, 1e-5)
				for c := sh.cols; c < ys; c++ {
					if !math.IsNaN(float64(got[r*ys+c])) {
						t.Fatalf("%s wrote into the row padding", name)
					}
				}
			}
		}
	}
}

// ropeRef rotates x[tokens][heads][dim] like the thinker's reference: NeoX
// pairing, the position stream of each frequency, float32 inv_freq and angle.
func ropeRef(x []float32, pos []int32, invFreq []float32, streams []int32, tokens, heads, dim, stride int) []float64 {
	out := make([]float64, len(x))
	for i := range x {
		out[i] = float64(x[i])
	}
	half := dim / 2
	for t := 0; t < tokens; t++ {
		for h := 0; h < heads; h++ {
			base := t*stride + h*dim
			for i := 0; i < half; i++ {
				ang := float64(float32(pos[3*t+int(streams[i])]) * invFreq[i])
				a, b := float64(x[base+i]), float64(x[base+i+half])
				out[base+i] = a*math.Cos(ang) - b*math.Sin(ang)
				out[base+i+half] = b*math.Cos(ang) + a*math.Sin(ang)
			}
		}
	}
	return out
}

func invFreq(theta float64, dim int) []float32 {
	f := make([]float32, dim/2)
	for i := range f {
		f[i] = float32(1 / math.Pow(theta, float64(2*i)/float64(dim)))
	}
	return f
}

// interleavedStreams is the thinker's M-RoPE map: THW repeated, then T.
func interleavedStreams(half, secH, secW int) []int32 {
	s := make([]int32, half)
	for i := range s {
		switch {
		case i%3 == 1 && i < 3*secH:
			s[i] = 1
		case i%3 == 2 && i < 3*secW:
			s[i] = 2
		}
	}
	return s
}

func ropeCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, sh := range []struct {
		tokens, heads, dim int
		mrope, inPlace     bool
	}{{7, 3, 128, true, false}, {5, 2, 64, false, true}, {3, 4, 128, false, false}} {
		stride := sh.heads*sh.dim + 4
		x := randF32(rng, sh.tokens*stride, 1)
		pos := make([]int32, 3*sh.tokens)
		for t := 0; t < sh.tokens; t++ {
			base := int32(rng.Intn(70000))
			pos[3*t], pos[3*t+1], pos[3*t+2] = base, base+int32(rng.Intn(9)), base+int32(rng.Intn(13))
		}
		streams := make([]int32, sh.dim/2)
		if sh.mrope {
			streams = interleavedStreams(sh.dim/2, 20, 20)
		}
		inv := invFreq(1e6, sh.dim)
		yStride := stride
		if !sh.inPlace {
			yStride = stride + 3
		}
		args := shaders.KargsRope{Tokens: int32(sh.tokens), Heads: int32(sh.heads), HeadDim: int32(sh.dim), XStride: int32(stride), YStride: int32(yStride)}
		bufs := []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.I32(pos)},
			{Index: 3, Data: mslemu.F32(inv)}, {Index: 4, Data: mslemu.I32(streams)}}
		job := &mslemu.Job{Kernel: "rope_f32", Grid: [3]int{groups(sh.dim/2, 32), sh.heads, sh.tokens}, Group: [3]int{32, 1, 1}, Buffers: bufs}
		yi := 1
		if sh.inPlace {
			job.Alias = map[int]int{5: 1} // y is x
		} else {
			job.Buffers = append(job.Buffers, mslemu.Buffer{Index: 5, Data: mslemu.F32(nanF32(sh.tokens * yStride))})
			yi = 5
		}
		out := runJob(t, h, job)
		want := ropeRef(x, pos, inv, streams, sh.tokens, sh.heads, sh.dim, stride)
		got := mslemu.ToF32(out[map[int]int{1: 1, 5: 5}[yi]])
		for tk := 0; tk < sh.tokens; tk++ {
			checkClose(t, "rope_f32", got[tk*yStride:tk*yStride+sh.heads*sh.dim], want[tk*stride:tk*stride+sh.heads*sh.dim], 2e-5, 1e-5)
		}
	}
}

// ropeVisionCase checks the vision encoder's 2-D table: head_dim/4
// frequencies of theta 1e4 over head_dim/2, once for the row (stream 1), once
// for the column (stream 2), over the patches of a grid (two frames).
func ropeVisionCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, sh := range []struct{ dim, gh, gw, heads int }{{72, 4, 6, 16}, {40, 3, 5, 3}} {
		q := sh.dim / 4
		f := invFreq(1e4, sh.dim/2)
		inv := append(append([]float32(nil), f...), f...)
		streams := make([]int32, sh.dim/2)
		for j := q; j < 2*q; j++ {
			streams[j-q], streams[j] = 1, 2
		}
		var pos []int32
		for tf := 0; tf < 2; tf++ {
			for y := 0; y < sh.gh; y++ {
				for x := 0; x < sh.gw; x++ {
					pos = append(pos, int32(tf), int32(y), int32(x))
				}
			}
		}
		tokens := len(pos) / 3
		stride := sh.heads * sh.dim
		x := randF32(rng, tokens*stride, 1)
		args := shaders.KargsRope{Tokens: int32(tokens), Heads: int32(sh.heads), HeadDim: int32(sh.dim), XStride: int32(stride), YStride: int32(stride)}
		out := runJob(t, h, &mslemu.Job{Kernel: "rope_f32", Grid: [3]int{groups(sh.dim/2, 32), sh.heads, tokens}, Group: [3]int{32, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.I32(pos)},
				{Index: 3, Data: mslemu.F32(inv)}, {Index: 4, Data: mslemu.I32(streams)}, {Index: 5, Data: mslemu.F32(nanF32(tokens * stride))}}})
		want := ropeRef(x, pos, inv, streams, tokens, sh.heads, sh.dim, stride)
		checkClose(t, "rope_f32 2-D", mslemu.ToF32(out[5]), want, 2e-6, 1e-5)
	}
}

func init() {
	register("rms_norm_f32", normCase(false, false))
	register("layer_norm_f32", normCase(true, true))
	register("layer_norm_f32", normCase(true, false))
	register("rope_f32", ropeCase)
	register("rope_f32", ropeVisionCase)
}
