package quant

import (
	"math"
	"fmt"
	"testing"
)

func TestMarginDebug(t *testing.T) {
	ix := loadIndex(t)
	input := readF32(t, "input.f32.bin")
	imat := readF32(t, "imatrix.f32.bin")
	rows, cols := ix.Input.Rows, ix.Input.Cols
	for _, e := range fixtureTypes(t) {
		typ, _ := ParseType(e.Type)
		f, _ := FormatOf(typ)
		if f.BlockElems == 1 || typ == Q8_0 {
			continue
		}
		n, _ := RowBytes(typ, cols)
		s := e.Type
		for _, vname := range []string{"plain", "imatrix"} {
			v := e.Variants[vname]
			var im []float32
			if vname == "imatrix" {
				im = imat
			}
			s += " |"
			for r := 0; r < rows; r++ {
				x := input[r*cols : (r+1)*cols]
				b := make([]byte, n)
				Quantize(typ, b, x, im)
				y := make([]float32, cols)
				f.Dequantize(y, b)
				rmse, wrmse := rowErrors(x, y, imat)
				got, lim := rmse, v.Stats.Rows[r].RMSE
				if im != nil {
					got, lim = wrmse, v.Stats.Rows[r].RMSEImat
				}
				if lim > 0 {
					s += fmt.Sprintf(" %.4f", got/lim)
				} else {
					s += fmt.Sprintf(" %g/0", got)
				}
			}
		}
		t.Log(s)
	}
}

func BenchmarkRefQ4K(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.7) * math.Cos(float64(i)*0.31))
	}
	dst := make([]byte, 16*144)
	c0 := cpuTime()
	for b.Loop() {
		encodeQ4_K(dst, x, nil, true)
	}
	b.ReportMetric(float64(len(x))*float64(b.N)/(cpuTime()-c0).Seconds()/1e6, "Mvalues/cpu-s")
}
