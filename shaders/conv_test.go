package shaders_test

// Emulation cases of the encoders' input-stage kernels: im2col_f32
// (eltwise.metal) and gather_blend_{f32,f16,bf16} (matmul.metal).

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/quant"
	"github.com/clefrt/clef/shaders"
)

// im2colCase checks im2col_f32 bit for bit against the definition, with a
// guard band after y.
func im2colCase(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
	for _, g := range []shaders.KargsIm2Col{
		{N: 1, H: 5, W: 7, C: 1, KH: 3, KW: 3, SH: 1, SW: 1},
		{N: 3, H: 7, W: 5, C: 3, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1},
		{N: 1, H: 9, W: 11, C: 7, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1},
		{N: 2, H: 4, W: 6, C: 1, KH: 3, KW: 2, SH: 1, SW: 2, PH: 1},
		{N: 1, H: 1, W: 1, C: 3, KH: 1, KW: 1, SH: 1, SW: 1, PH: 1, PW: 1}, // windows wholly in the padding
		{N: 3, H: 9, W: 5, C: 7, KH: 9, KW: 1, SH: 1, SW: 1},               // the reshuffle [N, F, T, C] -> [N*T, C*F]
		{N: 2, H: 17, W: 13, C: 40, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1},
	} {
		g.OH = (g.H+2*g.PH-g.KH)/g.SH + 1
		g.OW = (g.W+2*g.PW-g.KW)/g.SW + 1
		N, H, W, C := int(g.N), int(g.H), int(g.W), int(g.C)
		KH, KW, OH, OW := int(g.KH), int(g.KW), int(g.OH), int(g.OW)
		x := randF32(rng, N*H*W*C, 1)
		cols := C * KH * KW
		n := N * OH * OW * cols
		want := make([]float64, n)
		for b := range N {
			for oy := range OH {
				for ox := range OW {
					for c := range C {
						for ky := range KH {
							for kx := range KW {
								y, xx := oy*int(g.SH)-int(g.PH)+ky, ox*int(g.SW)-int(g.PW)+kx
								if y >= 0 && y < H && xx >= 0 && xx < W {
									want[((b*OH+oy)*OW+ox)*cols+(c*KH+ky)*KW+kx] = float64(x[((b*H+y)*W+xx)*C+c])
								}
							}
						}
					}
				}
			}
		}
		out := runJob(t, h, &mslemu.Job{Kernel: "im2col_f32", Grid: [3]int{groups(n, 256), 1, 1}, Group: [3]int{256, 1, 1},
			Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&g)}, {Index: 1, Data: mslemu.F32(x)}, {Index: 2, Data: mslemu.F32(guarded(n))}}})
		got := mslemu.ToF32(out[2])
		checkClose(t, "im2col_f32", got[:n], want, 0, 0)
		checkGuard(t, "im2col_f32", got, n)
	}
}

// blendTable stores v as f32, f16 or bf16 rows and returns the bytes and
// the values as stored.
func blendTable(name string, v []float32) ([]byte, []float32) {
	stored := make([]float32, len(v))
	var data []byte
	for i, f := range v {
		switch name {
		case "f32":
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(f))
			stored[i] = f
		case "f16":
			h := quant.Float32ToFloat16(f)
			data = binary.LittleEndian.AppendUint16(data, h)
			stored[i] = quant.Float16ToFloat32(h)
		case "bf16":
			h := quant.Float32ToBF16(f)
			data = binary.LittleEndian.AppendUint16(data, h)
			stored[i] = quant.BF16ToFloat32(h)
		}
	}
	return data, stored
}

// gatherBlendCase checks gather_blend_<name> bit for bit against the
// float32 products summed in order, with a guard band after y, and that an
// id outside the table gives NaN.
func gatherBlendCase(name string, elem int) kernelCase {
	kernel := "gather_blend_" + name
	return func(t *testing.T, h *mslemu.Harness, rng *rand.Rand) {
		for _, c := range []struct{ rows, cols, m, k, threads int }{
			{1, 1, 1, 1, 64}, {49, 70, 13, 4, 64}, {9, 37, 5, 1, 32}, {16, 1152, 7, 4, 64}, {5, 3, 4, 3, 64},
		} {
			data, table := blendTable(name, randF32(rng, c.rows*c.cols, 1))
			ids := make([]int32, c.m*c.k)
			wts := randF32(rng, c.m*c.k, 1)
			for i := range ids {
				ids[i] = int32(rng.Intn(c.rows))
			}
			ids[len(ids)-1] = int32(c.rows - 1)
			n := c.m * c.cols
			want := make([]float64, n)
			for i := range c.m {
				for col := range c.cols {
					var acc float32
					for j := range c.k {
						p := float32(wts[i*c.k+j] * table[int(ids[i*c.k+j])*c.cols+col])
						if j == 0 {
							acc = p
						} else {
							acc += p
						}
					}
					want[i*c.cols+col] = float64(acc)
				}
			}
			args := shaders.KargsGatherBlend{NOut: int32(c.m), Cols: int32(c.cols), K: int32(c.k), NRows: int32(c.rows), RowBytes: uint64(elem * c.cols)}
			out := runJob(t, h, &mslemu.Job{Kernel: kernel, Grid: [3]int{c.m, 1, 1}, Group: [3]int{c.threads, 1, 1},
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: data}, {Index: 2, Data: mslemu.I32(ids)},
					{Index: 3, Data: mslemu.F32(wts)}, {Index: 4, Data: mslemu.F32(guarded(n))}}})
			got := mslemu.ToF32(out[4])
			checkClose(t, kernel, got[:n], want, 0, 0)
			checkGuard(t, kernel, got, n)

			// An id outside the table: that row is NaN, the others as before.
			bad := append([]int32(nil), ids...)
			bad[c.k-1] = int32(c.rows)
			out = runJob(t, h, &mslemu.Job{Kernel: kernel, Grid: [3]int{c.m, 1, 1}, Group: [3]int{c.threads, 1, 1},
				Buffers: []mslemu.Buffer{{Index: 0, Data: shaders.Bytes(&args)}, {Index: 1, Data: data}, {Index: 2, Data: mslemu.I32(bad)},
					{Index: 3, Data: mslemu.F32(wts)}, {Index: 4, Data: mslemu.F32(make([]float32, n))}}})
			got = mslemu.ToF32(out[4])
			for col := range c.cols {
				if !math.IsNaN(float64(got[col])) {
					t.Fatalf("%s: an out-of-range id gave %g at column %d, want NaN", kernel, got[col], col)
				}
			}
			checkClose(t, kernel+" beside a bad row", got[c.cols:], want[c.cols:], 0, 0)
		}
	}
}

func init() {
	register("im2col_f32", im2colCase)
	register("gather_blend_f32", gatherBlendCase("f32", 4))
	register("gather_blend_f16", gatherBlendCase("f16", 2))
	register("gather_blend_bf16", gatherBlendCase("bf16", 2))
}
