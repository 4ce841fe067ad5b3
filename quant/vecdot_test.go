package quant

import (
	"bytes"
	"math"
	"testing"
)

const vk = 4096 // values per vecdot fixture row

func TestActivationQuantization(t *testing.T) {
	act := readF32(t, "vecdot/act.f32.bin")
	for _, vt := range []Type{Q8_0, Q8_1, Q8_K, F16, BF16} {
		n, _ := RowBytes(vt, vk)
		got := make([]byte, 5*n)
		for r := 0; r < 5; r++ {
			if err := QuantizeActivations(vt, got[r*n:(r+1)*n], act[r*vk:(r+1)*vk]); err != nil {
				t.Fatal(err)
			}
		}
		want := readFile(t, "vecdot/act."+vt.String()+".bin")
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("%v: byte %d (row %d) = %#x, want %#x", vt, i, i/n, got[i], want[i])
					break
				}
			}
		}
	}
}

func TestVecDot(t *testing.T) {
	for _, e := range fixtureTypes(t) {
		typ, _ := ParseType(e.Type)
		f, _ := FormatOf(typ)
		w := readFile(t, "vecdot/"+e.Type+".w.blocks.bin")
		x := readFile(t, "vecdot/act."+f.VecDotType.String()+".bin")
		ref := readF64(t, "vecdot/"+e.Type+".dot_ref.f64.bin")
		absref := readF64(t, "vecdot/"+e.Type+".dot_absref.f64.bin")
		ggml := readF32(t, "vecdot/"+e.Type+".dot.f32.bin")
		wn, _ := RowBytes(typ, vk)
		xn, _ := RowBytes(f.VecDotType, vk)
		var worst float64
		for r := 0; r < 8; r++ {
			for c := 0; c < 5; c++ {
				got, err := VecDot(typ, vk, w[r*wn:(r+1)*wn], x[c*xn:(c+1)*xn])
				if err != nil {
					t.Fatal(err)
				}
				i := r*5 + c
				d := math.Abs(float64(got) - ref[i])
				worst = max(worst, d/absref[i])
				if d > 1e-6*absref[i] {
					t.Errorf("%s w%d·a%d: %g, ref %g (%.3g·absref)", e.Type, r, c, got, ref[i], d/absref[i])
				}
				if d2 := math.Abs(float64(got) - float64(ggml[i])); d2 > 2e-6*absref[i] {
					t.Errorf("%s w%d·a%d: %g, ggml %g", e.Type, r, c, got, ggml[i])
				}
			}
		}
		t.Logf("%-5s worst |go-ref|/absref = %.2g", e.Type, worst)
	}
}
