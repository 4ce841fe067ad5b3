package cpu

import "github.com/clefrt/clef/quant"

// formatDecoder decodes the block formats through the quant format table.
func formatDecoder(t quant.Type) (decoder, error) {
	f, err := quant.FormatOf(t)
	if err != nil {
		return decoder{}, err
	}
	q8 := f.VecDotType == quant.Q8_0 || f.VecDotType == quant.Q8_1 || f.VecDotType == quant.Q8_K
	return decoder{blockElems: f.BlockElems, blockBytes: f.BlockBytes, fn: f.Dequantize, q8: q8}, nil
}
