//go:build !purego

package kernels

import (
	"fmt"
	"os"
	"strings"

	"github.com/clefrt/clef/quant"
	"golang.org/x/sys/cpu"
)

// isaLevel orders the amd64 kernel sets: each level's kernels need the
// instructions of every level below it.
type isaLevel int

const (
	// isaGeneric runs the pure-Go twins.
	isaGeneric isaLevel = iota
	// isaAVX2 needs AVX2, FMA and F16C (q8_0_amd64.s, packed_amd64.s,
	// legacy_amd64.s, half_amd64.s, dotf32_amd64.s).
	isaAVX2
	// isaAVX512 adds AVX-512 F, BW, VL and VNNI (q8_0_avx512_amd64.s).
	isaAVX512
)

var isaNames = [...]string{isaGeneric: "generic", isaAVX2: "avx2", isaAVX512: "avx512"}

// String returns the level's name, as CLEF_CPU_ISA spells it.
func (l isaLevel) String() string { return isaNames[l] }

// cpuLevel is the highest level this CPU (and OS) runs.
var cpuLevel = detectISA()

func detectISA() isaLevel {
	x := &cpu.X86
	switch {
	case !(x.HasAVX2 && x.HasFMA && x.HasF16C):
		return isaGeneric
	case !(x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI):
		return isaAVX2
	}
	return isaAVX512
}

// chooseISA returns the level to run: cpuLevel unless env (the value of
// CLEF_CPU_ISA) names a lower one. A level the CPU lacks, or a name that
// is no level, is refused: the result is then cpuLevel (for a level above
// it) and an error saying so.
func chooseISA(env string, have isaLevel) (isaLevel, error) {
	env = strings.TrimSpace(strings.ToLower(env))
	if env == "" {
		return have, nil
	}
	for l, name := range isaNames {
		if env != name {
			continue
		}
		if isaLevel(l) > have {
			return have, fmt.Errorf("CLEF_CPU_ISA=%s refused: this CPU runs at most %s (%s needs %s); using %s",
				env, have, env, isaNeeds[l], have)
		}
		return isaLevel(l), nil
	}
	return have, fmt.Errorf("CLEF_CPU_ISA=%q is not one of %s; using %s", env, strings.Join(isaNames[:], ", "), have)
}

var isaNeeds = [...]string{isaGeneric: "nothing", isaAVX2: "AVX2, FMA and F16C", isaAVX512: "AVX2, FMA, F16C and AVX-512 F, BW, VL, VNNI"}

// level is the kernel set in use; isaErr is why CLEF_CPU_ISA was refused
// (reported once on stderr when the package starts).
var level, isaErr = chooseISA(os.Getenv("CLEF_CPU_ISA"), cpuLevel)

func init() {
	if isaErr != nil {
		fmt.Fprintf(os.Stderr, "clef: kernels: %v\n", isaErr)
	}
}

// fast selects the AVX2 kernels (level >= isaAVX2); tests clear it to run
// the generic twins whatever the level.
var fast = level >= isaAVX2

// accelerated names the kernel set in use.
var accelerated = level.String()

// setISA switches the kernel set (tests force each level with it).
func setISA(l isaLevel) {
	level = l
	fast = l >= isaAVX2
	accelerated = l.String()
}

// hasISA reports whether the kernels of level l run: fast kernels are on
// and the chosen level is at least l. A kernel set of a level is one
// dispatch line, e.g. if hasISA(isaAVX512) { return pkTable512[typ] }.
func hasISA(l isaLevel) bool { return fast && level >= l }

// fastF32 reports whether dotF32x4 has a fast version.
const fastF32 = true

//go:noescape
func dotQ8_0x4AVX2(w *byte, stride int, x *byte, nb int, r *[4]float32)

//go:noescape
func dotF32x4AVX2(w *float32, k int, x *float32, n8 int, r *[4]float32)

//go:noescape
func dotBF16x4AVX2(w *byte, stride int, x *float32, n8 int, r *[4]float32)

//go:noescape
func dotF16x4AVX2(w *byte, stride int, x *float32, n8 int, r *[4]float32)

// fastHalf reports whether dotHalfx4Fast exists.
const fastHalf = true

// dotHalfx4Fast dots the first 8·n8 values of four f16 or bf16 rows
// (stride bytes apart) with float32 activations.
func dotHalfx4Fast(bf16 bool, w *byte, stride int, x *float32, n8 int, r *[4]float32) {
	if bf16 {
		dotBF16x4AVX2(w, stride, x, n8, r)
	} else {
		dotF16x4AVX2(w, stride, x, n8, r)
	}
}

//go:noescape
func dotBF16x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotF16x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

//go:noescape
func dotF32x2x4AVX2(w *byte, stride int, x *float32, xstride int, n8 int, r *[8]float32)

// fastFloat2x4 reports whether dotFloat2x4Fast exists.
const fastFloat2x4 = true

// dotFloat2x4Fast dots the first 8·n8 values of two f32/f16/bf16 rows
// (stride bytes apart) with four float32 activation rows (xstride bytes
// apart) into r[4·row+act].
func dotFloat2x4Fast(typ quant.Type, w *byte, stride int, x *float32, xstride, n8 int, r *[8]float32) {
	switch typ {
	case quant.BF16:
		dotBF16x2x4AVX2(w, stride, x, xstride, n8, r)
	case quant.F16:
		dotF16x2x4AVX2(w, stride, x, xstride, n8, r)
	default:
		dotF32x2x4AVX2(w, stride, x, xstride, n8, r)
	}
}

//go:noescape
func widenBF16AVX2(dst *float32, src *byte, n8 int)

//go:noescape
func widenF16AVX2(dst *float32, src *byte, n8 int)

//go:noescape
func widenF32AVX2(dst *float32, src *byte, n8 int)

// fastWiden reports whether widenFast exists.
const fastWiden = true

// widenFast widens the first 8·n8 f32/f16/bf16 values of src to float32.
func widenFast(typ quant.Type, dst *float32, src *byte, n8 int) {
	switch typ {
	case quant.BF16:
		widenBF16AVX2(dst, src, n8)
	case quant.F16:
		widenF16AVX2(dst, src, n8)
	default:
		widenF32AVX2(dst, src, n8)
	}
}

func dotQ8_0x4Fast(w *byte, stride int, x *byte, nb int, r *[4]float32) {
	if hasISA(isaAVX512) {
		dotQ8_0x4AVX512(w, stride, x, nb, r)
		return
	}
	dotQ8_0x4AVX2(w, stride, x, nb, r)
}

// fastKDot reports whether kDot4Fast exists: on amd64 the K formats go
// to the packed-weight kernels (packed_amd64.s) instead.
const fastKDot = false

func kDot4Fast(tile *byte, rowStride int, x *byte, nb int, r *[4]float32) {
	panic("unreachable: fastKDot is false")
}

func dotF32x4Fast(w *float32, k int, x *float32, n8 int, r *[4]float32) {
	dotF32x4AVX2(w, k, x, n8, r)
}
