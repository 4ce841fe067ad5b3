//go:build !amd64 || purego

package kernels

import "github.com/clefrt/clef/quant"

// decodeLegacyRowFast reports false: there are no fast decoders here.
func decodeLegacyRowFast(typ quant.Type, dst, src []byte, nb int) bool { return false }
