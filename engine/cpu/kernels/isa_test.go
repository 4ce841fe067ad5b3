//go:build (amd64 || arm64) && !purego

package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/clefrt/clef/quant"
)

// forEachISA runs f with every kernel level forced in turn (as
// CLEF_CPU_ISA would), skipping, and saying so, the levels this CPU lacks.
func forEachISA(t *testing.T, f func(t *testing.T)) {
	saved := level
	defer setISA(saved)
	for l := isaGeneric; l < isaLevel(len(isaNames)); l++ {
		t.Run(l.String(), func(t *testing.T) {
			if l > cpuLevel {
				t.Skipf("this CPU runs at most %s: the %s kernels (%s) are not covered here", cpuLevel, l, isaNeeds[l])
			}
			setISA(l)
			defer setISA(saved)
			if Accelerated() != l.String() {
				t.Fatalf("Accelerated() = %q at level %s", Accelerated(), l)
			}
			f(t)
		})
	}
}

// TestGEMMEachISA runs the shared GEMM table and the fast-versus-generic
// checks at every kernel level this CPU runs.
func TestGEMMEachISA(t *testing.T) {
	forEachISA(t, func(t *testing.T) {
		gemmTable(t)
		TestFastMatchesGeneric(t)
	})
}

// TestChooseISA checks the CLEF_CPU_ISA choice on this architecture's
// levels (generic, mid, top): a level up to the CPU's is taken (names in any
// case, spaces trimmed), one above it or an unknown name is refused with an
// error that names both, and the CPU's level is kept.
func TestChooseISA(t *testing.T) {
	if len(isaNames) != 3 {
		t.Fatalf("the cases below expect three levels, there are %d", len(isaNames))
	}
	mid, top := isaLevel(1), isaLevel(2)
	for _, c := range []struct {
		env     string
		have    isaLevel
		want    isaLevel
		errPart string
	}{
		{"", top, top, ""},
		{"", mid, mid, ""},
		{"generic", top, isaGeneric, ""},
		{" " + strings.ToUpper(mid.String()) + " ", top, mid, ""},
		{top.String(), top, top, ""},
		{mid.String(), mid, mid, ""},
		{top.String(), mid, mid, "refused: this CPU runs at most " + mid.String() + " (" + top.String() + " needs"},
		{mid.String(), isaGeneric, isaGeneric, "refused: this CPU runs at most generic"},
		{"bogus", mid, mid, `"bogus" is not one of generic, ` + mid.String() + ", " + top.String() + "; using " + mid.String()},
	} {
		got, err := chooseISA(c.env, c.have)
		if got != c.want {
			t.Errorf("chooseISA(%q, %s) = %s, want %s", c.env, c.have, got, c.want)
		}
		switch {
		case c.errPart == "" && err != nil:
			t.Errorf("chooseISA(%q, %s): unexpected error %v", c.env, c.have, err)
		case c.errPart != "" && (err == nil || !strings.Contains(err.Error(), c.errPart)):
			t.Errorf("chooseISA(%q, %s): error %v, want one containing %q", c.env, c.have, err, c.errPart)
		}
	}
}

// q8Blocks returns nb random q8_0 blocks per row for rows rows: every
// code value occurs (-128 only if min128); row 1 is all code -128 (-127
// without min128) and row 2 all +127 or -127 in runs (the extremes of both
// operands), scales random of both signs.
func q8Blocks(rng *rand.Rand, rows, nb int, min128 bool) []byte {
	b := make([]byte, rows*34*nb+64)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for r := 0; r < rows; r++ {
		for blk := 0; blk < nb; blk++ {
			o := (r*nb + blk) * 34
			for j := 2; j < 34; j++ {
				switch r {
				case 1:
					b[o+j] = 0x80
				case 2:
					b[o+j] = 127
					if (j/4+blk)%2 == 0 {
						b[o+j] = 0x81 // -127
					}
				}
			}
			if !min128 {
				for j := 2; j < 34; j++ {
					if b[o+j] == 0x80 {
						b[o+j] = 0x81
					}
				}
			}
			v := float32(rng.Float64()*0.01+0.001) * float32(1-2*int(rng.Uint32()&1))
			binary.LittleEndian.PutUint16(b[o:], quant.Float32ToFloat16(v))
		}
	}
	return b
}
