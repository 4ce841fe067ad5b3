//go:build !amd64 || purego

package kernels

import "github.com/clefrt/clef/quant"

// packedKernels returns nil: there are no packed-weight kernels here.
func packedKernels(typ quant.Type) *pkKernels { return nil }
