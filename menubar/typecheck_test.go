package menubar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The AppKit front needs cgo and the macOS SDK, so it cannot be built off a
// Mac. These tests type-check it instead: `go list -deps` for darwin/arm64
// with cgo on (it runs no compiler) gives every package's files in
// dependency order, and go/types with FakeImportC checks them, the
// standard library and macdriver included. Calls into macdriver's Go API
// are fully checked; expressions naming C.x are not.

type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	CgoFiles   []string
	ImportMap  map[string]string
	Error      *struct{ Err string }
}

// darwinUniverse is the type-checked darwin/arm64 dependency graph of a package.
type darwinUniverse struct {
	fset    *token.FileSet
	checked map[string]*types.Package
}

func (u *darwinUniverse) importer(importMap map[string]string) types.ImporterFrom {
	return importerFunc(func(path string) (*types.Package, error) {
		if p, ok := importMap[path]; ok {
			path = p
		}
		if path == "unsafe" {
			return types.Unsafe, nil
		}
		if p := u.checked[path]; p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("package %s not checked yet", path)
	})
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
func (f importerFunc) ImportFrom(path, _ string, _ types.ImportMode) (*types.Package, error) {
	return f(path)
}

func (u *darwinUniverse) check(path string, files []*ast.File, importMap map[string]string, bodies bool) (*types.Package, []error) {
	var errs []error
	conf := types.Config{
		FakeImportC:      true,
		Importer:         u.importer(importMap),
		Sizes:            types.SizesFor("gc", "arm64"),
		IgnoreFuncBodies: !bodies,
		Error:            func(err error) { errs = append(errs, err) },
	}
	pkg, _ := conf.Check(path, u.fset, files, nil)
	return pkg, errs
}

// loadDarwin type-checks pattern's darwin/arm64 cgo dependency graph.
// Function bodies are checked in this module's packages only.
func loadDarwin(t *testing.T, pattern string) *darwinUniverse {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goBin, "list", "-e", "-deps", "-json", pattern)
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	u := &darwinUniverse{fset: token.NewFileSet(), checked: map[string]*types.Package{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	seenApp := false
	for {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.ImportPath == "unsafe" || p.ImportPath == "C" {
			continue
		}
		var files []*ast.File
		for _, name := range append(append([]string(nil), p.GoFiles...), p.CgoFiles...) {
			if name == "app_darwin.go" {
				seenApp = true
			}
			f, err := parser.ParseFile(u.fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", name, err)
			}
			files = append(files, f)
		}
		ours := strings.HasPrefix(p.ImportPath, "github.com/clefrt/clef")
		pkg, errs := u.check(p.ImportPath, files, p.ImportMap, ours)
		for _, e := range errs {
			t.Errorf("%s: %v", p.ImportPath, e)
		}
		if len(errs) > 0 {
			t.FailNow()
		}
		u.checked[p.ImportPath] = pkg
	}
	if pattern == "." && !seenApp {
		t.Fatal("app_darwin.go was not in the darwin file set")
	}
	return u
}

func TestTypeCheckDarwinMenuBar(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the darwin standard library and macdriver")
	}
	u := loadDarwin(t, ".")
	if u.checked["github.com/progrium/macdriver/cocoa"] == nil || u.checked["github.com/clefrt/clef/menubar"] == nil {
		t.Fatal("macdriver cocoa or the menu bar was not checked")
	}

	// The checker must catch a wrong call into macdriver: a test that cannot fail is no test.
	bad := `package bad
import (
	"github.com/progrium/macdriver/cocoa"
	"github.com/progrium/macdriver/core"
)
func f() {
	cocoa.NSWorkspace_sharedWorkspace().OpenURL(core.URL("http://127.0.0.1:8089/"))
	cocoa.NSStatusBar_System().StatusItemWithLength(cocoa.NSVariableStatusItemLength).Button().SetTitle(42)
}
`
	f, err := parser.ParseFile(u.fset, "bad.go", bad, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, errs := u.check("bad", []*ast.File{f}, nil, true)
	if len(errs) != 2 {
		t.Fatalf("checker found %d errors in the bad file, want 2: %v", len(errs), errs)
	}
	for _, want := range []string{"OpenURL", "42"} {
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e.Error(), want)
		}
		if !found {
			t.Errorf("no error mentions %s: %v", want, errs)
		}
	}
}
