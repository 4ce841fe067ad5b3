//go:build (amd64 || arm64) && !purego

package kernels

import (
	"fmt"
	"os"
	"strings"
)

// isaLevel orders the kernel sets of this architecture (the constants, names
// and detection are in cpu_<arch>.go): each level's kernels need the
// instructions of every level below it.
type isaLevel int

// String returns the level's name, as CLEF_CPU_ISA spells it.
func (l isaLevel) String() string { return isaNames[l] }

// cpuLevel is the highest level this CPU (and OS) runs.
var cpuLevel = detectISA()

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

// level is the kernel set in use; isaErr is why CLEF_CPU_ISA was refused
// (reported once on stderr when the package starts).
var level, isaErr = chooseISA(os.Getenv("CLEF_CPU_ISA"), cpuLevel)

func init() {
	if isaErr != nil {
		fmt.Fprintf(os.Stderr, "clef: kernels: %v\n", isaErr)
	}
}

// fast selects the assembly kernels (level >= isaFast); tests clear it to
// run the generic twins whatever the level.
var fast = level >= isaFast

// accelerated names the kernel set in use.
var accelerated = level.String()

// setISA switches the kernel set (tests force each level with it).
func setISA(l isaLevel) {
	level = l
	fast = l >= isaFast
	accelerated = l.String()
}

// hasISA reports whether the kernels of level l run: fast kernels are on
// and the chosen level is at least l. A kernel set of a level is one
// dispatch line, e.g. if hasISA(isaAVX512) { return pkTable512[typ] }.
func hasISA(l isaLevel) bool { return fast && level >= l }
