package weights

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/clefrt/clef/internal/untrusted"
	"github.com/clefrt/clef/quant"
)

// MLX quantized checkpoints (mlx-community/clef-omni-4bit, -8bit).
//
// A quantized Linear or Embedding stores three tensors: "P.weight" (U32,
// codes packed little-endian along the row, 32/bits per word), "P.scales" and
// "P.biases" (one per group of group_size values), with w = scale*q + bias.
// config.json's "quantization" gives the default {group_size, bits} and may
// override them per module path ("P": {...}) or exclude a module ("P": false).
//
// The logical tensor takes the packed one's name ("P.weight"); stacked
// experts (mlp.switch_mlp.{gate,up,down}_proj) stay one [E, out, in] tensor
// with [E, out, groups] scales and biases. Which model tensor a name is, is
// for the model's table (engine/release) to say.

type mlxQuant struct {
	GroupSize int    `json:"group_size"`
	Bits      int    `json:"bits"`
	Mode      string `json:"mode"`
}

// mlxConfig parses the "quantization" entry of config.json.
func mlxConfig(raw json.RawMessage) (def mlxQuant, over map[string]*mlxQuant, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return def, nil, fmt.Errorf("config.json quantization: %s", untrusted.Error(err))
	}
	over = map[string]*mlxQuant{}
	for k, v := range m {
		switch k {
		case "group_size":
			err = json.Unmarshal(v, &def.GroupSize)
		case "bits":
			err = json.Unmarshal(v, &def.Bits)
		case "mode":
			err = json.Unmarshal(v, &def.Mode)
		default:
			if string(v) == "false" {
				over[k] = nil
				continue
			}
			var q mlxQuant
			if e := json.Unmarshal(v, &q); e != nil {
				err = fmt.Errorf("override %s: %s", untrusted.Quote(k), untrusted.Error(e))
			} else {
				over[k] = &q
			}
		}
		if err != nil {
			return def, nil, fmt.Errorf("config.json quantization: %v", err)
		}
	}
	return def, over, nil
}

func openMLX(dir string, o Options) (Model, error) {
	def, over, err := mlxConfig(o.MLX)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %v", dir, err)
	}
	shards, err := modelShards(dir, o.Extra, o.Keep)
	if err != nil {
		return nil, fmt.Errorf("weights: %v", err)
	}
	raw := newSet("mlx", dir)
	for _, sh := range shards.files {
		if err := raw.addSafetensors(sh, o.Keep); err != nil {
			raw.Close()
			return nil, fmt.Errorf("weights: %v", err)
		}
	}
	if err := shards.check(raw, o.Keep); err != nil {
		raw.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	s := newSet("mlx", dir)
	s.files = raw.files
	if err := mlxAssemble(s, raw, def, over); err != nil {
		s.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	if err := s.addExtra(o.Extra); err != nil {
		s.Close()
		return nil, fmt.Errorf("weights: %v", err)
	}
	return s, nil
}

// mlxAssemble builds the logical tensors of s from the stored ones of raw.
func mlxAssemble(s, raw *Set, def mlxQuant, over map[string]*mlxQuant) error {
	// Pass 1: the packed modules and the scales/biases they consume.
	packed := map[string]bool{}
	used := map[string]bool{}
	for _, name := range raw.Names() {
		module, ok := strings.CutSuffix(name, ".weight")
		if ok && raw.tensors[name].Type == quant.U32 && raw.Has(module+".scales") {
			packed[name] = true
			used[module+".scales"], used[module+".biases"] = true, true
		}
	}
	for _, name := range raw.Names() {
		if used[name] {
			continue
		}
		t := raw.tensors[name]
		file := raw.origin[name]
		if !packed[name] {
			if err := s.add(t, file); err != nil {
				return err
			}
			continue
		}
		module := strings.TrimSuffix(name, ".weight")
		q := def
		if o, ok := over[module]; ok {
			if o == nil {
				return fmt.Errorf("%s: tensor %s is packed but quantization excludes module %s", file, untrusted.Quote(name), untrusted.Quote(module))
			}
			q = *o
		}
		if q.Mode != "" && q.Mode != "affine" {
			return fmt.Errorf("%s: tensor %s: MLX quantization mode %s is not supported (affine only)", file, untrusted.Quote(name), untrusted.Quote(q.Mode))
		}
		var typ quant.Type
		switch q.Bits {
		case 4:
			typ = quant.MLXAffine4
		case 8:
			typ = quant.MLXAffine8
		default:
			return fmt.Errorf("%s: tensor %s: MLX %d-bit quantization is not supported (4 or 8)", file, untrusted.Quote(name), q.Bits)
		}
		sc, bi := raw.tensors[module+".scales"], raw.tensors[module+".biases"]
		if bi == nil {
			return fmt.Errorf("%s: tensor %s has scales but no %s", file, untrusted.Quote(name), untrusted.Quote(module+".biases"))
		}
		qt, err := mlxTensor(t, sc, bi, typ, q.GroupSize)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %v", file, untrusted.Quote(name), err)
		}
		if err := s.add(qt, file); err != nil {
			return err
		}
	}
	return nil
}

// mlxTensor checks the packed weight against its scales and biases and
// returns the logical tensor.
func mlxTensor(w, sc, bi *Tensor, typ quant.Type, g int) (*Tensor, error) {
	bits := 4
	if typ == quant.MLXAffine8 {
		bits = 8
	}
	if g <= 0 || g%(32/bits) != 0 {
		return nil, fmt.Errorf("bad MLX group size %d", g)
	}
	if len(w.Shape) < 2 {
		return nil, fmt.Errorf("packed weight of shape %v: want at least 2 dimensions", w.Shape)
	}
	shape := append([]int(nil), w.Shape...)
	shape[len(shape)-1] = w.Shape[len(w.Shape)-1] * 32 / bits
	gshape := append([]int(nil), shape...)
	gshape[len(gshape)-1] = shape[len(shape)-1] / g
	if shape[len(shape)-1]%g != 0 {
		return nil, fmt.Errorf("row of %d values is not a multiple of group size %d", shape[len(shape)-1], g)
	}
	for _, p := range []*Tensor{sc, bi} {
		if p.Type != quant.F16 && p.Type != quant.BF16 && p.Type != quant.F32 {
			return nil, fmt.Errorf("%s is %s, want F16, BF16 or F32", untrusted.Quote(p.Name), typeName(p.Type))
		}
		if !slices.Equal(p.Shape, gshape) {
			return nil, fmt.Errorf("%s has shape %v, want %v for %d-bit groups of %d", untrusted.Quote(p.Name), p.Shape, gshape, bits, g)
		}
	}
	return &Tensor{Name: w.Name, Type: typ, Shape: shape, Data: w.Data, Scales: sc, Biases: bi, GroupSize: g}, nil
}
