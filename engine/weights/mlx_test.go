package weights

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/clefrt/clef/quant"
)

// writeSafetensors writes tensors (name -> dtype, shape, raw bytes) as one
// safetensors file.
type rawTensor struct {
	dtype string
	shape []int
	data  []byte
}

func writeSafetensors(t *testing.T, path string, ts map[string]rawTensor) {
	t.Helper()
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "mlx"}}
	var data []byte
	for _, n := range names {
		e := ts[n]
		header[n] = map[string]any{"dtype": e.dtype, "shape": e.shape, "data_offsets": []int{len(data), len(data) + len(e.data)}}
		data = append(data, e.data...)
	}
	if err := os.WriteFile(path, stFile(header, data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mlxQuantize is an independent affine quantizer: per group of g values,
// bias = min, scale = (max-min)/(2^bits-1), q = round((w-bias)/scale); scales
// and biases are stored as BF16 and the codes use the stored values.
func mlxQuantize(w []float32, rows, cols, bits, g int) (packed, scales, biases []byte, deq []float32) {
	levels := float32(int(1)<<bits - 1)
	deq = make([]float32, len(w))
	codes := make([]uint32, len(w))
	for r := 0; r < rows; r++ {
		for c0 := 0; c0 < cols; c0 += g {
			grp := w[r*cols+c0 : r*cols+c0+g]
			lo, hi := grp[0], grp[0]
			for _, v := range grp {
				lo, hi = min(lo, v), max(hi, v)
			}
			sb := quant.Float32ToBF16((hi - lo) / levels)
			bb := quant.Float32ToBF16(lo)
			s, b := quant.BF16ToFloat32(sb), quant.BF16ToFloat32(bb)
			scales = binary.LittleEndian.AppendUint16(scales, sb)
			biases = binary.LittleEndian.AppendUint16(biases, bb)
			for j, v := range grp {
				q := float32(0)
				if s != 0 {
					q = float32(math.Round(float64((v - b) / s)))
				}
				q = max(0, min(levels, q))
				codes[r*cols+c0+j] = uint32(q)
				deq[r*cols+c0+j] = float32(s*q) + b
			}
		}
	}
	per := 32 / bits
	for i := 0; i < len(codes); i += per {
		var word uint32
		for k := 0; k < per; k++ {
			word |= codes[i+k] << (uint(k) * uint(bits))
		}
		packed = binary.LittleEndian.AppendUint32(packed, word)
	}
	return
}

// TestMLXSynthetic builds an MLX-style 4-bit checkpoint of the tiny release
// (text model under language_model.model., experts stacked in switch_mlp,
// the router at 8 bits by override, lm_head excluded) and checks that it
// opens with the expected values under its stored names: packed triples
// become one MLX affine tensor, a switch_mlp stack stays one [E, out, in]
// tensor whose Slice(e) is expert e. (engine/release maps these names onto
// the decoder's table.)
func TestMLXSynthetic(t *testing.T) {
	rel, err := Open(tinyRelease, releaseOptions(tinyRelease))
	if err != nil {
		t.Fatal(err)
	}
	defer rel.Close()
	const g = 32
	dir := t.TempDir()
	out := map[string]rawTensor{}
	want := map[string][]float32{} // stored name -> expected dequantized values
	shape := map[string][]int{}    // stored name -> logical shape
	bitsOf := func(name string) int {
		if strings.HasSuffix(name, ".mlp.gate.weight") {
			return 8
		}
		return 4
	}
	stacked := map[string][][]float32{}
	for _, n := range rel.Names() {
		if !strings.HasPrefix(n, "thinker.model.") && n != "thinker.lm_head.weight" {
			continue
		}
		ten, _ := rel.Tensor(n)
		vals, err := Float32(ten)
		if err != nil {
			t.Fatal(err)
		}
		stored := "language_model.model." + strings.TrimPrefix(n, "thinker.model.")
		if n == "thinker.lm_head.weight" {
			stored = "language_model.lm_head.weight"
		}
		if strings.Contains(n, ".mlp.experts.") {
			// Gather experts in order; quantized after the loop.
			pre, rest, _ := strings.Cut(stored, ".mlp.experts.")
			var e int
			var proj string
			fmt.Sscanf(rest, "%d.%s", &e, &proj)
			key := pre + ".mlp.switch_mlp." + proj
			for len(stacked[key]) <= e {
				stacked[key] = append(stacked[key], nil)
			}
			stacked[key][e] = vals
			continue
		}
		shape[stored] = ten.Shape
		if len(ten.Shape) != 2 || n == "thinker.lm_head.weight" {
			out[stored] = rawTensor{"F32", ten.Shape, ten.Data}
			want[stored] = vals
			continue
		}
		bits := bitsOf(n)
		p, sc, bi, deq := mlxQuantize(vals, ten.Shape[0], ten.Shape[1], bits, g)
		mod := strings.TrimSuffix(stored, ".weight")
		out[stored] = rawTensor{"U32", []int{ten.Shape[0], ten.Shape[1] * bits / 32}, p}
		out[mod+".scales"] = rawTensor{"BF16", []int{ten.Shape[0], ten.Shape[1] / g}, sc}
		out[mod+".biases"] = rawTensor{"BF16", []int{ten.Shape[0], ten.Shape[1] / g}, bi}
		want[stored] = deq
		checkClose(t, n, vals, deq, g, bits)
	}
	expert := map[string][][]float32{} // stacked stored name -> expected values of each expert
	for key, experts := range stacked {
		ref, _ := rel.Tensor("thinker.model." + strings.TrimPrefix(strings.Replace(key, ".mlp.switch_mlp.", ".mlp.experts.0.", 1), "language_model.model."))
		rows, cols := ref.Shape[0], ref.Shape[1]
		var all []float32
		for _, e := range experts {
			all = append(all, e...)
		}
		p, sc, bi, deq := mlxQuantize(all, rows*len(experts), cols, 4, g)
		checkClose(t, key, all, deq, g, 4)
		mod := strings.TrimSuffix(key, ".weight")
		out[key] = rawTensor{"U32", []int{len(experts), rows, cols / 8}, p}
		out[mod+".scales"] = rawTensor{"BF16", []int{len(experts), rows, cols / g}, sc}
		out[mod+".biases"] = rawTensor{"BF16", []int{len(experts), rows, cols / g}, bi}
		want[key] = deq
		shape[key] = []int{len(experts), rows, cols}
		for e := range experts {
			expert[key] = append(expert[key], deq[e*rows*cols:(e+1)*rows*cols])
		}
	}
	out["talker.codec_head.weight"] = rawTensor{"F32", []int{1}, make([]byte, 4)}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), out)
	q := map[string]any{"group_size": g, "bits": 4, "mode": "affine", "language_model.lm_head": false}
	for n := range out {
		if strings.HasSuffix(n, ".mlp.gate.weight") {
			q[strings.TrimSuffix(n, ".weight")] = map[string]any{"group_size": g, "bits": 8}
		}
	}
	head, _ := os.ReadFile(filepath.Join(tinyRelease, headFile))
	os.WriteFile(filepath.Join(dir, headFile), head, 0o644)
	skipSpeech := func(n string) (bool, error) {
		return !strings.HasPrefix(n, "talker.") && !strings.HasPrefix(n, "code2wav."), nil
	}
	opts := func(q map[string]any) Options {
		raw, _ := json.Marshal(q)
		return Options{Keep: skipSpeech, Extra: []string{filepath.Join(dir, headFile)}, MLX: raw}
	}

	m, err := Open(dir, opts(q))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(want) != 27 || len(expert) != 6 { // embed, norm, lm_head + 2 layers x (9 + 3 stacked experts)
		t.Fatalf("built %d text tensors, %d stacks", len(want), len(expert))
	}
	if n := len(m.Names()) - 86; n != len(want) { // the head's 86 tensors beside them
		t.Errorf("opened %d text tensors, want %d", n, len(want))
	}
	for n, w := range want {
		ten, err := m.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ten.Shape, shape[n]) {
			t.Errorf("%s: shape %v, want %v", n, ten.Shape, shape[n])
		}
		got, err := Float32(ten)
		if err != nil {
			t.Fatal(err)
		}
		for i := range w {
			if math.Float32bits(got[i]) != math.Float32bits(w[i]) {
				t.Fatalf("%s[%d] = %v, want %v (%s)", n, i, got[i], w[i], typeName(ten.Type))
			}
		}
	}
	for n, experts := range expert {
		ten, _ := m.Tensor(n)
		if ten.Type != quant.MLXAffine4 || ten.GroupSize != g || ten.Scales == nil || len(ten.Scales.Shape) != 3 || len(ten.Biases.Shape) != 3 {
			t.Fatalf("%s: %s stacked with scales %v", n, typeName(ten.Type), ten.Scales)
		}
		for e, w := range experts {
			v := ten.Slice(e)
			if !slices.Equal(v.Shape, ten.Shape[1:]) || !slices.Equal(v.Scales.Shape, ten.Scales.Shape[1:]) || !slices.Equal(v.Biases.Shape, ten.Biases.Shape[1:]) {
				t.Fatalf("%s expert %d: shapes %v %v %v", n, e, v.Shape, v.Scales.Shape, v.Biases.Shape)
			}
			got, err := Float32(v)
			if err != nil {
				t.Fatal(err)
			}
			for i := range w {
				if math.Float32bits(got[i]) != math.Float32bits(w[i]) {
					t.Fatalf("%s expert %d [%d] = %v, want %v", n, e, i, got[i], w[i])
				}
			}
		}
	}
	gate, _ := m.Tensor("language_model.model.layers.0.mlp.gate.weight")
	if gate.Type != quant.MLXAffine8 {
		t.Errorf("router override: %s", typeName(gate.Type))
	}
	if lm, _ := m.Tensor("language_model.lm_head.weight"); lm.Type != quant.F32 {
		t.Errorf("excluded lm_head: %s", typeName(lm.Type))
	}
	if m.Has("talker.codec_head.weight") || !m.Has("memory_projection.weight") {
		t.Error("talker kept or head missing")
	}
	for _, n := range m.Names() {
		if strings.HasSuffix(n, ".scales") || strings.HasSuffix(n, ".biases") {
			t.Errorf("%s left beside its packed weight", n)
		}
	}
	rows, err := Rows(gate, []int{3})
	if err != nil || rows[0][5] != want["language_model.model.layers.0.mlp.gate.weight"][3*64+5] {
		t.Errorf("Rows on MLX: %v", err)
	}

	// Damage: scales of the wrong shape.
	bad := out["language_model.model.layers.0.self_attn.q_proj.scales"]
	out["language_model.model.layers.0.self_attn.q_proj.scales"] = rawTensor{"BF16", []int{bad.shape[0], 1}, bad.data[:bad.shape[0]*2]}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), out)
	if _, err := Open(dir, opts(q)); err == nil || !strings.Contains(err.Error(), `q_proj.scales" has shape`) {
		t.Errorf("bad scales: %v", err)
	}
	out["language_model.model.layers.0.self_attn.q_proj.scales"] = bad
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), out)
	q["bits"] = 3
	if _, err := Open(dir, opts(q)); err == nil || !strings.Contains(err.Error(), "3-bit") {
		t.Errorf("3 bits: %v", err)
	}
}

func checkClose(t *testing.T, name string, w, deq []float32, g, bits int) {
	for i := 0; i < len(w); i += g {
		lo, hi := w[i], w[i]
		for _, v := range w[i : i+g] {
			lo, hi = min(lo, v), max(hi, v)
		}
		step := (hi - lo) / float32(int(1)<<bits-1)
		// Half a step, plus what the BF16 scale and bias rounding can add.
		tol := step*0.5 + step*float32(int(1)<<bits)/128 + abs32(lo)/128 + 1e-7
		for j := i; j < i+g; j++ {
			if d := abs32(w[j] - deq[j]); d > tol {
				t.Fatalf("%s[%d]: %v vs %v (step %v)", name, j, w[j], deq[j], step)
			}
		}
	}
}
