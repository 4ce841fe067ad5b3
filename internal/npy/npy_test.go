package npy

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, shape := range [][]int{{3}, {2, 3}, {1, 2, 3}} {
		n := 1
		for _, d := range shape {
			n *= d
		}
		in := make([]float32, n)
		for i := range in {
			in[i] = float32(i) - 2.5
		}
		var buf bytes.Buffer
		if err := WriteFloat32(&buf, in, shape...); err != nil {
			t.Fatal(err)
		}
		if buf.Len()%64 != n*4%64 {
			t.Errorf("header not padded to 64 bytes")
		}
		a, err := Read(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Shape) != len(shape) || len(a.F) != n {
			t.Fatalf("shape %v -> %v", shape, a.Shape)
		}
		for i := range in {
			if a.F[i] != in[i] {
				t.Fatalf("value %d: %v != %v", i, a.F[i], in[i])
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	var buf bytes.Buffer
	WriteFloat32(&buf, []float32{1, 2, 3, 4}, 2, 2)
	good := buf.Bytes()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XNUMPY"), good[6:]...),
		"truncated": good[:len(good)-1],
		"header":    good[:20],
	} {
		if _, err := Read(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := WriteFloat32(&buf, []float32{1}, 2); err == nil {
		t.Error("shape mismatch accepted")
	}
}
