package convert

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/engine/weights"
	"github.com/clefrt/clef/quant"
)

// affine4 packs rows of w as MLX 4-bit affine codes with BF16 scales and
// biases per group of g values.
func affine4(w []float32, rows, cols, g int) (codes, scales, biases []byte) {
	for r := 0; r < rows; r++ {
		q := make([]uint32, cols)
		for c0 := 0; c0 < cols; c0 += g {
			grp := w[r*cols+c0 : r*cols+c0+g]
			lo, hi := grp[0], grp[0]
			for _, v := range grp {
				lo, hi = min(lo, v), max(hi, v)
			}
			s := quant.BF16ToFloat32(quant.Float32ToBF16((hi - lo) / 15))
			b := quant.BF16ToFloat32(quant.Float32ToBF16(lo))
			scales = binary.LittleEndian.AppendUint16(scales, quant.Float32ToBF16(s))
			biases = binary.LittleEndian.AppendUint16(biases, quant.Float32ToBF16(b))
			for j, v := range grp {
				if s != 0 {
					q[c0+j] = uint32(max(0, min(15, math.Round(float64((v-b)/s)))))
				}
			}
		}
		for i := 0; i < cols; i += 8 {
			var word uint32
			for k := 0; k < 8; k++ {
				word |= q[i+k] << (4 * k)
			}
			codes = binary.LittleEndian.AppendUint32(codes, word)
		}
	}
	return
}

// writeMLXTiny writes an MLX-style 4-bit copy of the tiny release: text
// matrices under language_model.model. with experts stacked in switch_mlp,
// towers and head as they are.
func writeMLXTiny(t *testing.T, dir string) {
	t.Helper()
	r, err := release.Open(tinyRelease)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rel := r.Weights
	const g = 32
	var out []*weights.Tensor
	stacked := map[string][]float32{}
	stackedShape := map[string][]int{}
	quantized := func(name string, shape []int, vals []float32) {
		rows := len(vals) / shape[len(shape)-1]
		c, s, b := affine4(vals, rows, shape[len(shape)-1], g)
		ps := append(append([]int(nil), shape[:len(shape)-1]...), shape[len(shape)-1]/8)
		gs := append(append([]int(nil), shape[:len(shape)-1]...), shape[len(shape)-1]/g)
		mod := strings.TrimSuffix(name, ".weight")
		out = append(out, &weights.Tensor{Name: name, Type: quant.U32, Shape: ps, Data: c},
			&weights.Tensor{Name: mod + ".scales", Type: quant.BF16, Shape: gs, Data: s},
			&weights.Tensor{Name: mod + ".biases", Type: quant.BF16, Shape: gs, Data: b})
	}
	for _, n := range rel.Names() {
		x, _ := rel.Tensor(n)
		rest, text := strings.CutPrefix(n, "thinker.model.")
		if !text || len(x.Shape) != 2 {
			c := *x
			out = append(out, &c)
			continue
		}
		vals, _ := weights.Float32(x)
		stored := "language_model.model." + rest
		if pre, tail, ok := strings.Cut(stored, ".mlp.experts."); ok {
			_, proj, _ := strings.Cut(tail, ".")
			key := pre + ".mlp.switch_mlp." + proj
			stacked[key] = append(stacked[key], vals...) // experts come in name order: 0..7 for 8 experts
			stackedShape[key] = x.Shape
			continue
		}
		quantized(stored, x.Shape, vals)
	}
	for key, vals := range stacked {
		s := stackedShape[key]
		quantized(key, []int{len(vals) / (s[0] * s[1]), s[0], s[1]}, vals)
	}
	if err := weights.WriteSafetensors(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(tinyRelease, "config.json"))
	json.Unmarshal(b, &cfg)
	cfg["quantization"] = map[string]any{"group_size": g, "bits": 4}
	b, _ = json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "joint_head_config.json"} {
		b, _ := os.ReadFile(filepath.Join(tinyRelease, f))
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
}

func TestMLXInspectAndQuantize(t *testing.T) {
	dir := t.TempDir()
	writeMLXTiny(t, dir)
	rel, err := Describe(tinyRelease, 1000)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Describe(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if d.Params != rel.Params || d.Tensors != rel.Tensors || !strings.Contains(d.Architecture, "MLX affine 4-bit, group 32") {
		t.Errorf("MLX description %+v %d %q; release %+v %d", d.Params, d.Tensors, d.Architecture, rel.Params, rel.Tensors)
	}
	var mlxParams int64
	for _, s := range d.Types {
		if s.Type == quant.MLXAffine4 {
			mlxParams = s.Params
			// codes are half a byte per value; one BF16 scale and bias per 32.
			if s.Bytes != s.Params/2+s.Params/32*4 {
				t.Errorf("mlx bytes %d for %d params", s.Bytes, s.Params)
			}
		}
	}
	if mlxParams == 0 {
		t.Fatal("no MLX tensors")
	}
	q8, _ := ParseFileType("q8_0")
	out := filepath.Join(t.TempDir(), "m.gguf")
	res, err := Quantize(dir, Options{Type: q8, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	checkQuantized(t, dir, out, res)
}
