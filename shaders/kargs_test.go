package shaders

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// goKargs maps each C struct of kargs.h to its Go mirror.
var goKargs = map[string]reflect.Type{
	"kargs_eltwise":      reflect.TypeFor[KargsEltwise](),
	"kargs_norm":         reflect.TypeFor[KargsNorm](),
	"kargs_rope":         reflect.TypeFor[KargsRope](),
	"kargs_add_rows":     reflect.TypeFor[KargsAddRows](),
	"kargs_get_rows":     reflect.TypeFor[KargsGetRows](),
	"kargs_gather_blend": reflect.TypeFor[KargsGatherBlend](),
	"kargs_im2col":       reflect.TypeFor[KargsIm2Col](),
	"kargs_matmul":       reflect.TypeFor[KargsMatmul](),
	"kargs_moe":          reflect.TypeFor[KargsMoe](),
	"kargs_attn":         reflect.TypeFor[KargsAttn](),
	"kargs_moe_tiles":    reflect.TypeFor[KargsMoeTiles](),
	"kargs_q8k":          reflect.TypeFor[KargsQ8K](),
	"kargs_attn_limbs":   reflect.TypeFor[KargsAttnLimbs](),
}

// TestKargsMirror compiles kargs.h with clang, prints the size of
// every struct and the offset and size of every field, and compares them
// with the Go mirror field by field.
func TestKargsMirror(t *testing.T) {
	cc := ""
	for _, c := range []string{"clang-19", "clang", "cc", "gcc"} {
		if _, err := exec.LookPath(c); err == nil {
			cc = c
			break
		}
	}
	if cc == "" {
		t.Skip("no C compiler found: cannot check kargs.h against the Go mirror")
	}
	hdr, err := os.ReadFile("kargs.h")
	if err != nil {
		t.Fatal(err)
	}
	structRE := regexp.MustCompile(`(?s)typedef struct \{(.*?)\} (\w+);`)
	fieldRE := regexp.MustCompile(`(?m)^\s*KARGS_\w+\s+(\w+);|^\s*float\s+(\w+);`)
	var prog strings.Builder
	prog.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"kargs.h\"\nint main(void) {\n")
	fields := map[string][]string{}
	var order []string
	for _, m := range structRE.FindAllStringSubmatch(string(hdr), -1) {
		name := m[2]
		order = append(order, name)
		prog.WriteString("  printf(\"" + name + " %zu\\n\", sizeof(" + name + "));\n")
		for _, f := range fieldRE.FindAllStringSubmatch(m[1], -1) {
			fn := f[1] + f[2]
			fields[name] = append(fields[name], fn)
			prog.WriteString("  printf(\"" + name + "." + fn + " %zu %zu\\n\", offsetof(" + name + ", " + fn + "), sizeof(((" + name + " *)0)->" + fn + "));\n")
		}
	}
	prog.WriteString("  return 0;\n}\n")
	if len(order) != len(goKargs) {
		t.Fatalf("kargs.h has %d structs %v, the Go mirror %d", len(order), order, len(goKargs))
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "kargs.c")
	if err := os.WriteFile(src, []byte(prog.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kargs")
	if out, err := exec.Command(cc, "-I", ".", src, "-o", bin).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(ln)
		for _, v := range f[1:] {
			n, _ := strconv.Atoi(v)
			got[f[0]] = append(got[f[0]], n)
		}
	}
	for _, name := range order {
		gt, ok := goKargs[name]
		if !ok {
			t.Errorf("kargs.h struct %s has no Go mirror", name)
			continue
		}
		if int(gt.Size()) != got[name][0] {
			t.Errorf("%s: C size %d, Go %s size %d", name, got[name][0], gt.Name(), gt.Size())
		}
		var gf []reflect.StructField
		for i := 0; i < gt.NumField(); i++ {
			if f := gt.Field(i); f.Type.Size() > 0 {
				gf = append(gf, f)
			}
		}
		if len(gf) != len(fields[name]) {
			t.Errorf("%s: C has %d fields, Go %s has %d", name, len(fields[name]), gt.Name(), len(gf))
			continue
		}
		for i, cf := range fields[name] {
			off, size := got[name+"."+cf][0], got[name+"."+cf][1]
			if int(gf[i].Offset) != off || int(gf[i].Type.Size()) != size {
				t.Errorf("%s.%s: C offset %d size %d, Go %s.%s offset %d size %d", name, cf, off, size, gt.Name(), gf[i].Name, gf[i].Offset, gf[i].Type.Size())
			}
			want := strings.ReplaceAll(cf, "_", "")
			if cf != "_pad" && !strings.EqualFold(want, gf[i].Name) {
				t.Errorf("%s.%s mirrored by Go field %s", name, cf, gf[i].Name)
			}
		}
	}
}
