package mslemu

import (
	"math/rand"
	"os"
	"testing"
)

// fragCoord is the scalar model of thread_elements() on an 8x8 simdgroup
// matrix: lane l holds row (l/4 & 4) + (l/2 % 4), columns c and c+1 with
// c = (l/4 & 2)*2 + (l%2)*2, the layout MLX's steel kernels build their
// fragments on (BaseMMAFrag::get_coord).
func fragCoord(l int) (row, col int) {
	return (l/4)&4 + (l/2)%4, (l/4)&2*2 + (l%2)*2
}

// TestFragCoordCovers checks the model itself: the 32 lanes hold the 64
// elements once each, and a row's elements sit in lanes l, l^1, l^8, l^9
// (the lanes a row reduction shuffles over).
func TestFragCoordCovers(t *testing.T) {
	seen := map[int]int{}
	for l := 0; l < 32; l++ {
		r, c := fragCoord(l)
		for _, e := range []int{8*r + c, 8*r + c + 1} {
			if p, ok := seen[e]; ok {
				t.Fatalf("element %d held by lanes %d and %d", e, p, l)
			}
			seen[e] = l
		}
		for _, x := range []int{1, 8, 9} {
			if r2, _ := fragCoord(l ^ x); r2 != r {
				t.Fatalf("lane %d (row %d) and lane %d (row %d)", l, r, l^x, r2)
			}
		}
	}
	if len(seen) != 64 {
		t.Fatalf("%d elements held", len(seen))
	}
}

// TestThreadElements runs probe_frag (testdata/frag.metal) in the race
// orders and checks each lane's elements, writes through them and the
// products and stores of the written matrices against the scalar model.
func TestThreadElements(t *testing.T) {
	if !Available() {
		t.Skipf("%s not found", Clang)
	}
	dir, err := os.MkdirTemp("", "emu-frag")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h, err := Build(dir, "testdata/frag.metal")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Orders = RaceOrders
	const nsg = 2
	rng := rand.New(rand.NewSource(3))
	a := make([]float32, 64*nsg)
	for i := range a {
		a[i] = float32(rng.Intn(17) - 8) // small integers: the products are exact
	}
	job := func(m int32) *Job {
		return &Job{Kernel: "probe_frag", Grid: [3]int{1, 1, 1}, Group: [3]int{32 * nsg, 1, 1},
			Buffers: []Buffer{mode(m), {Index: 1, Data: F32(a)}, {Index: 2, Data: F32(make([]float32, 320*nsg))}}}
	}
	out, err := h.Run(job(0))
	if err != nil {
		t.Fatal(err)
	}
	got := ToF32(out[2])
	mul := func(x, y []float32) []float32 {
		p := make([]float32, 64)
		for i := 0; i < 8; i++ {
			for j := 0; j < 8; j++ {
				for k := 0; k < 8; k++ {
					p[8*i+j] += x[8*i+k] * y[8*k+j]
				}
			}
		}
		return p
	}
	check := func(what string, g, w []float32) {
		t.Helper()
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s: element %d (row %d, column %d) = %g, want %g", what, i, i/8, i%8, g[i], w[i])
			}
		}
	}
	for s := 0; s < nsg; s++ {
		as, gs := a[64*s:64*s+64], got[320*s:320*s+320]
		read := make([]float32, 64)
		w := make([]float32, 64)
		neg := append([]float32(nil), as...)
		for l := 0; l < 32; l++ {
			r, c := fragCoord(l)
			read[2*l], read[2*l+1] = as[8*r+c], as[8*r+c+1]
			w[8*r+c], w[8*r+c+1] = 1000*float32(l), 1000*float32(l)+1
			if l%3 == 0 {
				neg[8*r+c], neg[8*r+c+1] = -neg[8*r+c], -neg[8*r+c+1]
			}
		}
		check("lanes' elements of a", gs[0:64], read)
		check("w written through thread_elements()", gs[64:128], w)
		check("w·a", gs[128:192], mul(w, as))
		check("a with lanes l%3==0 negated", gs[192:256], neg)
		check("that times a", gs[256:320], mul(neg, as))
	}
	wantReport(t, h, job(1), "thread_elements() were taken by lanes 0xffff")
}
