//go:build !amd64 || purego

package kernels

import "github.com/clefrt/clef/quant"

// packedKernels returns nil: there are no packed-weight kernels here.
func packedKernels(typ quant.Type) *pkKernels { return nil }

// flush2x4 reports false: there is no fast flush here.
func flush2x4(acc *[64]float32, out []float32, ldOut int) bool { return false }

// decodePkRowFast reports false: there is no assembly decoder here.
func decodePkRowFast(typ quant.Type, rt, wr []byte, nb, bb int) bool { return false }
