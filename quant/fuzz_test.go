package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDequantize feeds arbitrary bytes to every dequantizer: no panics, and
// every value decodes (fp16 scales may hold Inf/NaN, so values may too).
func FuzzDequantize(f *testing.F) {
	f.Add([]byte{1, 2, 3}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		fs := Formats()
		ft := fs[int(which)%len(fs)]
		n := len(data) / ft.BlockBytes * ft.BlockElems
		dst := make([]float32, n)
		if err := Dequantize(ft.Type, dst, data); err != nil {
			t.Fatal(err)
		}
		if err := Dequantize(ft.Type, make([]float32, n+ft.BlockElems), data); err == nil {
			t.Fatal("short data accepted")
		}
	})
}

// FuzzQuantize quantizes arbitrary finite values with every quantizer: no
// panics, and values within fp16 range round-trip to finite values no
// further off than the block's largest magnitude.
func FuzzQuantize(f *testing.F) {
	f.Add(make([]byte, 1024), uint8(3), false)
	f.Fuzz(func(t *testing.T, data []byte, which uint8, useImat bool) {
		fs := Formats()
		ft := fs[int(which)%len(fs)]
		if ft.Quantize == nil || ft.BlockElems == 1 {
			return
		}
		if len(data) < 4 {
			return
		}
		// Two super-blocks of values, the fuzzed bytes repeated.
		n := 512
		x := make([]float32, n)
		for i := range x {
			o := 4 * i % (len(data) / 4 * 4)
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[o:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Abs(float64(v)) > 1000 {
				v = float32(math.Mod(float64(i), 7)) - 3
			}
			x[i] = v
		}
		var im []float32
		if useImat {
			im = make([]float32, ft.BlockElems)
			for i := range im {
				im[i] = float32(i%5) + 0.5
			}
		}
		rb, _ := RowBytes(ft.Type, n)
		dst := make([]byte, rb)
		if err := Quantize(ft.Type, dst, x, im); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, n)
		ft.Dequantize(y, dst)
		for b := 0; b < n; b += ft.BlockElems {
			var amax float64
			for _, v := range x[b : b+ft.BlockElems] {
				amax = max(amax, math.Abs(float64(v)))
			}
			for i := b; i < b+ft.BlockElems; i++ {
				if d := math.Abs(float64(x[i] - y[i])); !(d <= amax*1.01+1e-6) {
					t.Fatalf("%s: value %d = %g comes back as %g (block max %g)", ft.Name, i, x[i], y[i], amax)
				}
			}
		}
	})
}
