// Package kernels holds the CPU backend's hot loops: the quantized GEMM of
// the prefill ([m x k] activations, already quantized to the weight type's
// VecDotType, times [n x k] quantized weight rows) and the activation
// quantizer feeding it. Every fast kernel has a pure-Go generic twin
// (…Generic); building with -tags purego forces the generic ones. See
// README.md for the kernels and their speed.
// Kernels are single-threaded: the caller splits the weight rows.
package kernels

import (
	"fmt"

	"github.com/clefrt/clef/quant"
)

// GEMM computes out[i*ldOut+j] = Σ_k w[j,k]·x[i,k] for i < m, j < n: w holds
// n rows of k values of type typ, xq holds m rows of k activations already
// quantized to FormatOf(typ).VecDotType (see QuantizeActivations). Only the
// first n entries of each of the m output rows are written.
func GEMM(typ quant.Type, w []byte, n, k int, xq []byte, m int, out []float32, ldOut int) error {
	f, err := quant.FormatOf(typ)
	if err != nil {
		return err
	}
	if n < 0 || m < 0 || k < 0 {
		return fmt.Errorf("kernels: GEMM %v: negative size n=%d m=%d k=%d", typ, n, m, k)
	}
	wRow, err := quant.RowBytes(typ, k)
	if err != nil {
		return err
	}
	xRow, err := quant.RowBytes(f.VecDotType, k)
	if err != nil {
		return err
	}
	if n > 0 && len(w)/n < wRow {
		return fmt.Errorf("kernels: GEMM %v: %d weight rows of %d values need %d bytes, have %d", typ, n, k, n*wRow, len(w))
	}
	if m > 0 && len(xq)/m < xRow {
		return fmt.Errorf("kernels: GEMM %v: %d activation rows of %d values need %d bytes, have %d", typ, m, k, m*xRow, len(xq))
	}
	if m > 0 && (ldOut < n || (len(out)-n)/ldOut < m-1 || len(out) < n) {
		return fmt.Errorf("kernels: GEMM %v: output of %d rows of %d (stride %d) does not fit %d floats", typ, m, n, ldOut, len(out))
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		// Empty dot products.
		for i := 0; i < m; i++ {
			clear(out[i*ldOut : i*ldOut+n])
		}
		return nil
	}
	switch typ {
	case quant.Q8_0:
		gemmQ8_0(w, wRow, n, k, xq, xRow, m, out, ldOut)
		return nil
	case quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1:
		gemmLegacy(typ, w, wRow, n, k, xq, xRow, m, out, ldOut)
		return nil
	case quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K:
		if kern := packedKernels(typ); kern != nil {
			gemmPacked(typ, kern, w, wRow, n, k, xq, xRow, m, out, ldOut)
		} else {
			gemmK(typ, w, wRow, n, k, xq, xRow, m, out, ldOut)
		}
		return nil
	case quant.F32, quant.F16, quant.BF16:
		gemmFloat(typ, w, wRow, n, k, xq, xRow, m, out, ldOut)
		return nil
	}
	dot, err := quant.VecDotFunc(typ)
	if err != nil {
		return fmt.Errorf("kernels: GEMM: %w", err)
	}
	gemmGeneric(dot, w, wRow, n, k, xq, xRow, m, out, ldOut)
	return nil
}

// QuantizeActivations quantizes m rows of k activations x to the format the
// dot product of weight type typ reads (FormatOf(typ).VecDotType), writing
// m rows of ActivationRowBytes(typ, k) bytes to dst.
func QuantizeActivations(typ quant.Type, x []float32, m, k int, dst []byte) error {
	n, err := ActivationRowBytes(typ, k)
	if err != nil {
		return err
	}
	if m < 0 || len(x)/max(k, 1) < m || len(dst)/max(n, 1) < m {
		return fmt.Errorf("kernels: QuantizeActivations %v: %d rows of %d need %d floats and %d bytes, have %d and %d", typ, m, k, m*k, m*n, len(x), len(dst))
	}
	f, _ := quant.FormatOf(typ)
	switch f.VecDotType {
	case quant.Q8_0:
		for i := 0; i < m; i++ {
			quantizeQ8_0Row(dst[i*n:(i+1)*n], x[i*k:(i+1)*k])
		}
		return nil
	case quant.Q8_K:
		for i := 0; i < m; i++ {
			if err := quantizeQ8_KRow(dst[i*n:(i+1)*n], x[i*k:(i+1)*k]); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; i < m; i++ {
		if err := quant.QuantizeActivations(f.VecDotType, dst[i*n:(i+1)*n], x[i*k:(i+1)*k]); err != nil {
			return err
		}
	}
	return nil
}

// Accelerated names the kernel level in use: "avx512" or "avx2" on amd64,
// "i8mm" or "neon" on arm64, or "generic" (-tags purego, another
// architecture, or a CPU without the needed features); CLEF_CPU_ISA
// forces a lower level.
func Accelerated() string { return accelerated }

// ActivationRowBytes returns the bytes of one row of k activations quantized
// for weight type typ.
func ActivationRowBytes(typ quant.Type, k int) (int, error) {
	f, err := quant.FormatOf(typ)
	if err != nil {
		return 0, err
	}
	return quant.RowBytes(f.VecDotType, k)
}
