// Package mslemu runs Metal kernels on the CPU: it compiles a .metal file as C++
// with clang++-19 through a shim header (csrc/msl_shim.h) that provides the
// MSL types, address spaces, threadgroup memory, barriers, simd-group
// functions and simdgroup matrices, links it with a fiber executor
// (csrc/runtime.cpp) and runs dispatches described by a Job. It also holds
// the lint that rejects the MSL constructs the shim cannot emulate faithfully.
//
// The pipeline for one .metal file:
//  1. clang++-19 -E with __METAL_VERSION__ and MSL_EMU defined expands
//     includes and macros (kernels may test MSL_EMU for emulator-only checks,
//     such as msl::check_aligned);
//  2. the kernel signatures ([[buffer(n)]], [[threadgroup(n)]], builtins) and
//     [[function_constant(n)]] globals are parsed from the expansion;
//  3. the expansion is rewritten (statement-level threadgroup arrays become
//     static thread_local, [[threadgroup(n)]] attributes are dropped) and
//     compiled with one generated wrapper per kernel that binds buffers and
//     builtins from the executor's per-thread context, and the size of the
//     threadgroup arrays each kernel declares (in its body and in the
//     functions it calls), which the runtime adds to the job's dynamic
//     threadgroup memory and checks against the 32 KiB limit.
//
// Besides running kernels, the runtime reports what a GPU would do
// differently or reject: a collective's result in a divergent branch covers
// only that branch's lanes; a barrier not reached by every thread, or reached
// from different call sites, a threadgroup-memory total over 32 KiB, and
// simdgroup-matrix loads, stores or products that differ between the lanes of
// a simdgroup stop the run with an error naming the kernel; with Orders > 1
// every dispatch runs the threads of each threadgroup in several orders and
// outputs that differ are reported as a race. `half` rounds to fp16 after
// every operation.
package mslemu

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

//go:embed csrc
var csrc embed.FS

// Clang is the compiler the harness uses.
const Clang = "clang++-19"

// Available reports whether clang++-19 is on PATH.
func Available() bool {
	_, err := exec.LookPath(Clang)
	return err == nil
}

// Param is one kernel parameter: Attr is "buffer", "threadgroup" or the
// builtin's attribute name (thread_position_in_grid, ...).
type Param struct {
	Attr  string
	Index int
	Name  string
}

// Kernel is one MSL entry point (a kernel-qualified function).
type Kernel struct {
	Name   string
	Params []Param
	// TGArrays lists the threadgroup arrays the kernel declares, in its body
	// and in the functions it calls ("float scratch[32] (in rms_norm_f32)");
	// set by Build.
	TGArrays []string
}

var (
	kernelRE = regexp.MustCompile(`\bkernel\s+void\s+(\w+)\s*\(`)
	attrRE   = regexp.MustCompile(`\[\[\s*(\w+)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]`)
	fconstRE = regexp.MustCompile(`\b(\w+)\s*\[\[\s*function_constant\(\s*(\d+)\s*\)\s*\]\]`)
	tgArrRE  = regexp.MustCompile(`(?m)(^\s*|[;{]\s*)threadgroup(\s+[\w:<>, ]+?\s+(\w+)\s*(\[[^\];]+\]\s*)+;)`)
	// A threadgroup variable that is not an array (and not a pointer) would
	// become per-thread under the rewrite.
	tgScalarRE = regexp.MustCompile(`(^|[;{])\s*threadgroup\s+[\w:<>, ]+?\s+\w+\s*(=[^=]|;|,)`)
	tgAttrRE   = regexp.MustCompile(`\[\[\s*threadgroup\s*\(\s*\d+\s*\)\s*\]\]`)
	// tgDeclRE is one threadgroup array declaration: type, name, dimensions
	// (statement-level when the text before it ends a statement or opens a block).
	tgDeclRE = regexp.MustCompile(`\bthreadgroup\s+([\w:<>, ]+?)\s+(\w+)\s*((?:\[[^\];]+\]\s*)+);`)
	callRE   = regexp.MustCompile(`\b([A-Za-z_]\w*)\s*\(`)
	nsRE     = regexp.MustCompile(`\bnamespace(\s+\w+)?\s*$`)
)

// builtins lists the thread-position attributes the executor provides.
var builtins = map[string]bool{
	"thread_position_in_grid":        true,
	"threadgroup_position_in_grid":   true,
	"thread_position_in_threadgroup": true,
	"threads_per_threadgroup":        true,
	"threadgroups_per_grid":          true,
	"thread_index_in_threadgroup":    true,
	"thread_index_in_simdgroup":      true,
	"simdgroup_index_in_threadgroup": true,
	"threads_per_simdgroup":          true,
	"simdgroups_per_threadgroup":     true,
}

// KernelNames lists the names of every entry point in src, in
// source order. It is what "N kernels" counts.
func KernelNames(src []byte) []string {
	var names []string
	for _, m := range kernelRE.FindAllSubmatch(stripComments(src), -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// ParseKernels parses the kernel signatures of preprocessed MSL.
func ParseKernels(src []byte) ([]Kernel, error) {
	s := string(src)
	var ks []Kernel
	for _, loc := range kernelRE.FindAllStringSubmatchIndex(s, -1) {
		name := s[loc[2]:loc[3]]
		start := loc[1]
		depth, end := 1, -1
		for i := start; i < len(s) && end < 0; i++ {
			switch s[i] {
			case '(':
				depth++
			case ')':
				depth--
				if depth == 0 {
					end = i
				}
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("kernel %s: unterminated parameter list", name)
		}
		k := Kernel{Name: name}
		for _, p := range splitParams(s[start:end]) {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			am := attrRE.FindStringSubmatch(p)
			if am == nil {
				return nil, fmt.Errorf("kernel %s: parameter %q has no [[attribute]]", name, p)
			}
			fields := strings.Fields(strings.TrimSpace(p[:strings.Index(p, "[[")]))
			par := Param{Attr: am[1], Name: strings.TrimLeft(fields[len(fields)-1], "*&")}
			switch {
			case am[1] == "buffer" || am[1] == "threadgroup":
				if am[2] == "" {
					return nil, fmt.Errorf("kernel %s: %s without an index", name, am[1])
				}
				fmt.Sscan(am[2], &par.Index)
			case builtins[am[1]]:
			default:
				return nil, fmt.Errorf("kernel %s: attribute [[%s]] is not emulated", name, am[1])
			}
			k.Params = append(k.Params, par)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

func splitParams(s string) []string {
	var out []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '<':
			depth++
		case ')', ']', '>':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[last:i])
				last = i + 1
			}
		}
	}
	return append(out, s[last:])
}

func stripComments(src []byte) []byte {
	block := regexp.MustCompile(`(?s)/\*.*?\*/`)
	line := regexp.MustCompile(`//[^\n]*`)
	return line.ReplaceAll(block.ReplaceAll(src, nil), nil)
}

// Lint reports the MSL constructs the shim cannot emulate faithfully. file is
// used in the messages only.
func Lint(file string, src []byte) []error {
	rules := []struct {
		re  *regexp.Regexp
		why string
	}{
		{regexp.MustCompile(`\(\s*(u?(char|short|int|long)|half|float|bfloat)[234]\s*\)\s*[\w(]`),
			"C-style vector cast: clang compiles it as a bit-cast, MSL as a conversion; write float4(x)"},
		{regexp.MustCompile(`\b\d+(\.\d*)?h\b`), "half literal suffix h: write half(1.0f)"},
		{regexp.MustCompile(`\)\s*(threadgroup|device|constant)\s*(const\s*)?\{`), "address-space-qualified member function"},
		{regexp.MustCompile(`\[\[\s*host_name`), "template host_name instantiation: write each entry point as a plain non-template function"},
		{regexp.MustCompile(`\b(u?long|half|float|int)[234]?x[234]\b`), "matrix types (float4x4, half4x4) are not emulated"},
		{regexp.MustCompile(`\bis_function_constant_defined\b`), "is_function_constant_defined is not emulated"},
		{regexp.MustCompile(`\b(bfloat[234]?|simdgroup_bfloat8x8)\b`), "bfloat needs MSL 3.1: decode bf16 bits with as_type<float>(uint(bits) << 16)"},
		{regexp.MustCompile(`\bsimd_(ballot|vote)\b`), "simd_ballot is not emulated"},
		{regexp.MustCompile(`\bsize_t\b`), "size_t does not exist in MSL"},
	}
	var errs []error
	clean := stripComments(src)
	for i, ln := range strings.Split(string(clean), "\n") {
		for _, r := range rules {
			if r.re.MatchString(ln) {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %s", file, i+1, r.why, strings.TrimSpace(ln)))
			}
		}
		if tgScalarRE.MatchString(ln) {
			errs = append(errs, fmt.Errorf("%s:%d: threadgroup variables must be arrays (threadgroup T name[N];), one declaration per statement: %s",
				file, i+1, strings.TrimSpace(ln)))
		}
	}
	return errs
}

// Harness is one compiled .metal file. Run starts the binary once as a
// server and sends it one job after another.
type Harness struct {
	Bin     string
	Kernels []Kernel
	// Orders is how many orders a Job with Orders == 0 runs the threads of
	// each threadgroup in (see Job.Orders). Build sets it from
	// $CLEF_EMU_ORDERS (default 1); tests of kernels set RaceOrders.
	Orders int

	mu     sync.Mutex
	proc   *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
}

// workDir is one scratch directory: the shim sources are written into it
// once and the runtime object is compiled there at most once.
type workDir struct {
	srcOnce sync.Once
	srcErr  error
	rtOnce  sync.Once
	rtObj   string
	rtErr   error
}

var (
	workMu   sync.Mutex
	workDirs = map[string]*workDir{}
)

func workFor(dir string) *workDir {
	workMu.Lock()
	defer workMu.Unlock()
	w := workDirs[dir]
	if w == nil {
		w = &workDir{}
		workDirs[dir] = w
	}
	return w
}

// writeCSrc copies the shim sources into dir.
func writeCSrc(dir string) error {
	return fsWalk("csrc", func(p string, data []byte) error {
		dst := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
}

func fsWalk(dir string, fn func(string, []byte) error) error {
	ents, err := csrc.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := dir + "/" + e.Name()
		if e.IsDir() {
			if err := fsWalk(p, fn); err != nil {
				return err
			}
			continue
		}
		b, err := csrc.ReadFile(p)
		if err != nil {
			return err
		}
		if err := fn(p, b); err != nil {
			return err
		}
	}
	return nil
}

func run(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := out.String()
		if len(msg) > 6000 {
			msg = msg[:6000] + "\n..."
		}
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, msg)
	}
	return nil
}

// cflags: -fexcess-precision=16 makes every _Float16 (half) operation round
// to fp16 as the GPU does; clang's default keeps a whole expression in float
// and rounds once.
var cflags = []string{"-std=c++17", "-O2", "-w", "-fno-strict-aliasing", "-ffp-contract=off", "-fexcess-precision=16",
	"-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0"}

// funcBodies maps each function defined at file scope (or in a namespace) of
// preprocessed source to the text of its bodies (overloads share a name).
func funcBodies(s string) map[string][]string {
	out := map[string][]string{}
	for i := 0; i < len(s); i++ {
		if s[i] != '{' {
			continue
		}
		head := strings.TrimRight(s[:i], " \t\r\n")
		if nsRE.MatchString(head[max(0, len(head)-200):]) {
			continue // a namespace's functions are at file scope too
		}
		end := matchBrace(s, i)
		if strings.HasSuffix(head, ")") {
			if open := matchParenBack(head, len(head)-1); open > 0 {
				name := strings.TrimRight(head[:open], " \t\r\n")
				j := len(name)
				for j > 0 && (isIdent(name[j-1])) {
					j--
				}
				if name = name[j:]; name != "" {
					out[name] = append(out[name], s[i:end])
				}
			}
		}
		i = end - 1
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// matchBrace returns the index just past the brace that closes s[i] == '{'.
func matchBrace(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(s)
}

// matchParenBack returns the index of the '(' that s[i] == ')' closes, or -1.
func matchParenBack(s string, i int) int {
	depth := 0
	for j := i; j >= 0; j-- {
		switch s[j] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// staticTGMem returns, for kernel name, a C++ expression for the bytes of the
// threadgroup arrays declared in its body and in every function it calls
// (each function once), as Metal allocates them for the whole dispatch, and
// the declarations it counted.
func staticTGMem(funcs map[string][]string, name string) (string, []string, error) {
	if _, ok := funcs[name]; !ok {
		return "", nil, fmt.Errorf("kernel %s: body not found", name)
	}
	seen := map[string]bool{name: true}
	queue := []string{name}
	expr := "0ul"
	var decls []string
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		for _, body := range funcs[f] {
			for _, loc := range tgDeclRE.FindAllStringSubmatchIndex(body, -1) {
				before := strings.TrimRight(body[:loc[0]], " \t\r\n")
				if before != "" && !strings.ContainsAny(before[len(before)-1:], ";{}") {
					continue
				}
				m := []string{"", body[loc[2]:loc[3]], body[loc[4]:loc[5]], body[loc[6]:loc[7]]}
				typ, dims := strings.TrimSpace(m[1]), strings.Join(strings.Fields(m[3]), "")
				expr += fmt.Sprintf(" + sizeof(%s%s)", typ, dims)
				decls = append(decls, fmt.Sprintf("%s %s%s (in %s)", typ, m[2], dims, f))
			}
			for _, c := range callRE.FindAllStringSubmatch(body, -1) {
				if _, ok := funcs[c[1]]; ok && !seen[c[1]] {
					seen[c[1]] = true
					queue = append(queue, c[1])
				}
			}
		}
	}
	return expr, decls, nil
}

// Build compiles metalFile (whose includes resolve against its own directory)
// into a harness binary under work, a scratch directory that several Builds
// may share.
func Build(work, metalFile string) (*Harness, error) {
	wd := workFor(work)
	wd.srcOnce.Do(func() { wd.srcErr = writeCSrc(work) })
	if wd.srcErr != nil {
		return nil, wd.srcErr
	}
	base := strings.TrimSuffix(filepath.Base(metalFile), ".metal")
	abs, err := filepath.Abs(metalFile)
	if err != nil {
		return nil, err
	}
	exp := filepath.Join(work, base+".expanded.cpp")
	if err := run(work, Clang, "-E", "-x", "c++", "-std=c++17", "-D__METAL_VERSION__=310", "-DMSL_EMU=1",
		"-I", filepath.Join(work, "csrc", "include"), "-I", filepath.Dir(abs), abs, "-o", exp); err != nil {
		return nil, err
	}
	src, err := os.ReadFile(exp)
	if err != nil {
		return nil, err
	}
	ks, err := ParseKernels(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", metalFile, err)
	}
	var fcs [][2]string
	for _, m := range fconstRE.FindAllSubmatch(src, -1) {
		fcs = append(fcs, [2]string{string(m[1]), string(m[2])})
	}
	// Adjacent declarations share their separator, so rewrite to a fixed point.
	body := src
	for {
		// The first thread of each threadgroup to reach the declaration fills
		// the array with NaN bytes: reads before writes show up in results.
		next := tgArrRE.ReplaceAll(body, []byte("${1}static thread_local${2} static thread_local unsigned long msl_gen_${3} = 0; "+
			"msl_rt_poison(${3}, sizeof(${3}), &msl_gen_${3});"))
		if bytes.Equal(next, body) {
			break
		}
		body = next
	}
	body = tgAttrRE.ReplaceAll(body, nil)
	funcs := funcBodies(string(src))
	tgStatic := map[string]string{}
	for i, k := range ks {
		expr, decls, err := staticTGMem(funcs, k.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", metalFile, err)
		}
		tgStatic[k.Name] = expr
		ks[i].TGArrays = decls
	}

	var g bytes.Buffer
	g.WriteString("#include \"csrc/msl_shim.h\"\n")
	g.Write(body)
	g.WriteString("\n// ---- generated dispatch wrappers ----\n")
	g.WriteString("struct msl_kentry { const char *name; void (*fn)(msl::ctx &); unsigned long tgstatic; };\n")
	g.WriteString("struct msl_fcentry { int index; void *p; int size; };\n")
	for _, k := range ks {
		var args []string
		for _, p := range k.Params {
			switch p.Attr {
			case "buffer":
				args = append(args, fmt.Sprintf("c.buf[%d]", p.Index))
			case "threadgroup":
				args = append(args, fmt.Sprintf("c.tgmem[%d]", p.Index))
			default:
				if strings.HasPrefix(p.Attr, "thread_index") || strings.HasPrefix(p.Attr, "simdgroup_index") ||
					p.Attr == "threads_per_simdgroup" || p.Attr == "simdgroups_per_threadgroup" {
					args = append(args, "c."+p.Attr)
				} else {
					args = append(args, "msl::anyvec{c."+p.Attr+"}")
				}
			}
		}
		fmt.Fprintf(&g, "static void msl_wrap_%s(msl::ctx &c) { %s(%s); }\n", k.Name, k.Name, strings.Join(args, ", "))
	}
	g.WriteString("extern const msl_kentry msl_kernels[] = {\n")
	for _, k := range ks {
		fmt.Fprintf(&g, "  {\"%s\", msl_wrap_%s, %s},\n", k.Name, k.Name, tgStatic[k.Name])
	}
	g.WriteString("  {nullptr, nullptr, 0}};\n")
	fmt.Fprintf(&g, "extern const int msl_nkernels = %d;\n", len(ks))
	g.WriteString("extern const msl_fcentry msl_fconsts[] = {\n")
	for _, fc := range fcs {
		fmt.Fprintf(&g, "  {%s, (void *)&%s, (int)sizeof(%s)},\n", fc[1], fc[0], fc[0])
	}
	g.WriteString("  {-1, nullptr, 0}};\n")
	fmt.Fprintf(&g, "extern const int msl_nfconsts = %d;\n", len(fcs))

	gen := filepath.Join(work, base+".gen.cpp")
	if err := os.WriteFile(gen, g.Bytes(), 0o644); err != nil {
		return nil, err
	}
	// Harness binaries are cached by the hash of everything that goes into
	// them, so repeated test runs skip the C++ compile.
	key := sha256.New()
	for _, part := range [][]byte{[]byte(strings.Join(cflags, " ")), g.Bytes()} {
		key.Write(part)
	}
	fsWalk("csrc", func(p string, data []byte) error { key.Write([]byte(p)); key.Write(data); return nil })
	cached := ""
	if dir := cacheDir(); dir != "" {
		cached = filepath.Join(dir, fmt.Sprintf("%s-%x.harness", base, key.Sum(nil)[:12]))
		if st, err := os.Stat(cached); err == nil && st.Mode().IsRegular() {
			return &Harness{Bin: cached, Kernels: ks, Orders: defaultOrders()}, nil
		}
	}
	wd.rtOnce.Do(func() {
		wd.rtObj = filepath.Join(work, "runtime.o")
		wd.rtErr = run(work, Clang, append(append([]string{}, cflags...), "-c", "csrc/runtime.cpp", "-o", wd.rtObj)...)
	})
	if wd.rtErr != nil {
		return nil, wd.rtErr
	}
	bin := filepath.Join(work, base+".harness")
	if err := run(work, Clang, append(append([]string{}, cflags...), gen, wd.rtObj, "-o", bin, "-lpthread")...); err != nil {
		return nil, fmt.Errorf("%s: %w", metalFile, err)
	}
	if cached != "" {
		tmp := cached + fmt.Sprintf(".%d.tmp", os.Getpid())
		if data, err := os.ReadFile(bin); err == nil && os.WriteFile(tmp, data, 0o755) == nil {
			if os.Rename(tmp, cached) == nil {
				bin = cached
			} else {
				os.Remove(tmp)
			}
		}
	}
	return &Harness{Bin: bin, Kernels: ks, Orders: defaultOrders()}, nil
}

// RaceOrders is the number of fiber orders the kernel tests use: forward,
// reverse and one seeded shuffle.
const RaceOrders = 3

// MaxOrders is the most fiber orders one job may ask for.
const MaxOrders = 16

// defaultOrders is $CLEF_EMU_ORDERS, if it is a number in 1..MaxOrders, else 1.
func defaultOrders() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("CLEF_EMU_ORDERS"), &n); err == nil && n >= 1 && n <= MaxOrders {
		return n
	}
	return 1
}

// cacheDir is where compiled harnesses are kept ($CLEF_EMU_CACHE, else the
// user cache directory; "off" disables the cache).
func cacheDir() string {
	dir := os.Getenv("CLEF_EMU_CACHE")
	if dir == "off" {
		return ""
	}
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(base, "clef", "msl-emu")
	}
	if os.MkdirAll(dir, 0o755) != nil {
		return ""
	}
	return dir
}

// Buffer is one bound buffer: its contents go in, and come back after the run.
type Buffer struct {
	Index int
	Data  []byte
}

// Const is one function-constant value, by its [[function_constant(n)]] index.
type Const struct {
	Index int
	Value []byte
}

// Job describes one dispatch: dispatchThreadgroups(Grid, Group) with the
// given buffers, threadgroup-memory lengths (index -> bytes) and constants.
type Job struct {
	Kernel  string
	Grid    [3]int
	Group   [3]int
	Consts  []Const
	TGMem   map[int]int
	Buffers []Buffer
	// Alias binds index k to the memory of the buffer bound at Alias[k]
	// (an in-place op: the same MTLBuffer at two indices).
	Alias map[int]int
	// Orders > 1 runs the dispatch that many times from the same inputs, the
	// threads of each threadgroup resumed forward, in reverse, then in seeded
	// shuffles, and reports outputs that differ as a race (a read of memory
	// another thread writes without a barrier between). 0 means the
	// harness's Orders.
	Orders int
}

// Run executes job and returns every buffer's contents after it, in the order
// of job.Buffers.
func (h *Harness) Run(job *Job) ([][]byte, error) {
	found := false
	for _, k := range h.Kernels {
		found = found || k.Name == job.Kernel
	}
	if !found {
		return nil, fmt.Errorf("mslemu: no kernel %q in %s", job.Kernel, h.Bin)
	}
	orders := job.Orders
	if orders == 0 {
		orders = max(h.Orders, 1)
	}
	if orders < 1 || orders > MaxOrders {
		return nil, fmt.Errorf("mslemu: %s: %d fiber orders (want 1..%d)", job.Kernel, orders, MaxOrders)
	}
	var b bytes.Buffer
	w32 := func(v int) { binary.Write(&b, binary.LittleEndian, uint32(v)) }
	w32(0x4a4c534d)
	w32(len(job.Kernel))
	b.WriteString(job.Kernel)
	for _, v := range job.Grid {
		w32(v)
	}
	for _, v := range job.Group {
		w32(v)
	}
	w32(len(job.Consts))
	for _, c := range job.Consts {
		w32(c.Index)
		w32(len(c.Value))
		b.Write(c.Value)
	}
	idx := make([]int, 0, len(job.TGMem))
	for i := range job.TGMem {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	w32(len(idx))
	for _, i := range idx {
		w32(i)
		w32(job.TGMem[i])
	}
	w32(len(job.Buffers))
	for _, buf := range job.Buffers {
		w32(buf.Index)
		binary.Write(&b, binary.LittleEndian, uint64(len(buf.Data)))
		b.Write(buf.Data)
	}
	aliases := make([]int, 0, len(job.Alias))
	for k := range job.Alias {
		aliases = append(aliases, k)
	}
	sort.Ints(aliases)
	w32(len(aliases))
	for _, k := range aliases {
		w32(k)
		w32(job.Alias[k])
	}
	w32(orders)
	return h.exchange(job.Kernel, b.Bytes(), len(job.Buffers))
}

// exchange sends one job to the harness server (started on first use and
// restarted after a failed job) and reads back n buffers.
func (h *Harness) exchange(kernel string, job []byte, n int) ([][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		cmd := exec.Command(h.Bin, "-serve")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		h.stderr = &bytes.Buffer{}
		cmd.Stderr = h.stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		h.proc, h.stdin, h.stdout = cmd, stdin, bufio.NewReaderSize(stdout, 1<<20)
	}
	fail := func(err error) ([][]byte, error) {
		h.stdin.Close()
		werr := h.proc.Wait()
		msg := strings.TrimSpace(h.stderr.String())
		h.proc = nil
		if msg == "" && werr != nil {
			msg = werr.Error()
		}
		if msg != "" && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
			// The harness stopped the run and said why on stderr.
			return nil, fmt.Errorf("mslemu: %s: %s", kernel, msg)
		}
		return nil, fmt.Errorf("mslemu: %s: %v: %s", kernel, err, msg)
	}
	if _, err := h.stdin.Write(job); err != nil {
		return fail(err)
	}
	res := make([][]byte, n)
	var hdr [8]byte
	for i := range res {
		if _, err := io.ReadFull(h.stdout, hdr[:]); err != nil {
			return fail(err)
		}
		size := binary.LittleEndian.Uint64(hdr[:])
		if size > 1<<34 {
			return fail(errors.New("absurd buffer size in harness output"))
		}
		res[i] = make([]byte, size)
		if _, err := io.ReadFull(h.stdout, res[i]); err != nil {
			return fail(err)
		}
	}
	return res, nil
}

// Close stops the harness server.
func (h *Harness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		return nil
	}
	h.stdin.Close()
	err := h.proc.Wait()
	h.proc = nil
	return err
}

// F32 encodes float32s little-endian.
func F32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// ToF32 decodes little-endian float32s.
func ToF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// I32 encodes int32s little-endian.
func I32(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// ToI32 decodes little-endian int32s.
func ToI32(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
