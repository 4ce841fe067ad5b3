package convert

import (
	"fmt"
	"strings"

	"github.com/clefrt/clef/engine/release"
	"github.com/clefrt/clef/quant"
)

// FileType is a whole-file quantization choice of clef quantize. The _M
// mixtures give some tensors more bits; the rules are all in TensorType.
type FileType struct {
	// Name as given on the command line ("q4_k_m").
	Name string
	// Base is the type most matrices get.
	Base quant.Type
	// LlamaFtype is llama.cpp's general.file_type value for this mixture.
	LlamaFtype uint32
}

// FileTypes lists what clef quantize --type accepts.
var FileTypes = []FileType{
	{"bf16", quant.BF16, 32},
	{"q8_0", quant.Q8_0, 7},
	{"q6_k", quant.Q6_K, 18},
	{"q5_k_m", quant.Q5_K, 17},
	{"q4_k_m", quant.Q4_K, 15},
	{"q3_k_m", quant.Q3_K, 12},
	{"q2_k", quant.Q2_K, 10},
}

// ParseFileType returns the file type named name (case-insensitive).
func ParseFileType(name string) (FileType, error) {
	var names []string
	for _, f := range FileTypes {
		if strings.EqualFold(f.Name, name) {
			return f, nil
		}
		names = append(names, f.Name)
	}
	return FileType{}, fmt.Errorf("unknown quantization type %q (want one of %s)", name, strings.Join(names, ", "))
}

// useMoreBits is llama.cpp's choice of layers that get a higher type in the
// _M mixtures: the first and last eighth of the layers and every third layer
// in between.
func useMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// TensorType is the one place where the _M mixtures are defined. It returns
// the storage type of a backbone tensor of the given role in layer (of
// layers; -1 for non-layer tensors), before the block-size fallback.
//
//   - Norms and the router stay F32 whatever the file type (the router picks
//     the experts: a small error there changes which experts run).
//   - bf16, q8_0, q6_k: every matrix gets the base type, except that output
//     (lm_head, whose rows the joint head also reads) gets Q6_K in q2..q5 files.
//   - q5_k_m / q4_k_m: attn_v and ffn_down_exps get Q6_K in the useMoreBits
//     layers, the base type elsewhere; output gets Q6_K.
//   - q3_k_m: attn_v gets Q5_K in layers 0-1 and Q4_K after; ffn_down_exps
//     gets Q5_K in the first sixteenth of the layers and Q4_K after;
//     attn_output gets Q4_K; output Q6_K.
//   - q2_k: attn_v and ffn_down_exps get Q3_K (attn_v Q4_K with 4 or more
//     query heads per KV head, as llama.cpp does); attn_output Q3_K; output
//     Q6_K.
func TensorType(ft FileType, role release.Role, layer, layers, gqa int) quant.Type {
	switch role {
	case release.RoleNorm, release.RoleRouter:
		return quant.F32
	}
	base := ft.Base
	switch base {
	case quant.BF16, quant.Q8_0, quant.Q6_K:
		return base
	}
	if role == release.RoleOutput {
		return quant.Q6_K
	}
	switch base {
	case quant.Q5_K, quant.Q4_K:
		if (role == release.RoleAttnV || role == release.RoleFFNDown) && useMoreBits(layer, layers) {
			return quant.Q6_K
		}
	case quant.Q3_K:
		switch role {
		case release.RoleAttnV:
			if layer < 2 {
				return quant.Q5_K
			}
			return quant.Q4_K
		case release.RoleFFNDown:
			if layer < layers/16 {
				return quant.Q5_K
			}
			return quant.Q4_K
		case release.RoleAttnOut:
			return quant.Q4_K
		}
	case quant.Q2_K:
		switch role {
		case release.RoleAttnV:
			if gqa >= 4 {
				return quant.Q4_K
			}
			return quant.Q3_K
		case release.RoleFFNDown, release.RoleAttnOut:
			return quant.Q3_K
		}
	}
	return base
}

// Fallback returns the type a tensor with rows of cols values gets when
// want's blocks do not divide its rows, as llama.cpp does: Q2_K and Q3_K
// fall back to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, and a row
// that fits no 32-block to F16 (BF16 and F32 always fit). It returns want
// itself when it fits.
func Fallback(want quant.Type, cols int) quant.Type {
	f, err := quant.FormatOf(want)
	if err == nil && cols%f.BlockElems == 0 {
		return want
	}
	var next quant.Type
	switch want {
	case quant.Q2_K, quant.Q3_K:
		next = quant.Q4_0
	case quant.Q4_K:
		next = quant.Q5_0
	case quant.Q5_K:
		next = quant.Q5_1
	case quant.Q6_K:
		next = quant.Q8_0
	default:
		return quant.F16
	}
	return Fallback(next, cols)
}
