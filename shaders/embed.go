// Package shaders holds the Metal kernels of the runtime as MSL source: one
// .metal file per op family, kargs.h (the argument structs shared with the
// host, mirrored field by field in Go by kargs.go) and quants.h (the block
// decoders shared by every quantized kernel). The host (metal) compiles
// Library() at run time with newLibraryWithSource and fills the kargs
// mirrors; internal/mslemu compiles each file as C++ for the CPU emulation
// harness that the tests of this package run (make shader-test).
package shaders

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.metal *.h
var files embed.FS

// Files lists the .metal sources, sorted.
func Files() []string {
	names, _ := fs.Glob(files, "*.metal")
	sort.Strings(names)
	return names
}

// WriteFiles writes every embedded source (.metal and headers) into dir, for
// tools that compile them from disk (the emulation harness).
func WriteFiles(dir string) error {
	names, _ := fs.Glob(files, "*")
	for _, n := range names {
		data, err := files.ReadFile(n)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Read returns one embedded file.
func Read(name string) ([]byte, error) { return files.ReadFile(name) }

var includeRE = regexp.MustCompile(`(?m)^#include "([^"]+)"\s*$`)

// Library returns every .metal file concatenated into one translation unit
// with the local includes inlined once (Metal's runtime compiler has no
// include path), ready for newLibraryWithSource.
func Library() (string, error) {
	var b strings.Builder
	seen := map[string]bool{}
	var inline func(name string, depth int) error
	inline = func(name string, depth int) error {
		if depth > 8 {
			return fmt.Errorf("shaders: include depth exceeded at %s", name)
		}
		src, err := files.ReadFile(name)
		if err != nil {
			return fmt.Errorf("shaders: %w", err)
		}
		last := 0
		for _, m := range includeRE.FindAllSubmatchIndex(src, -1) {
			b.Write(src[last:m[0]])
			inc := string(src[m[2]:m[3]])
			if !seen[inc] {
				seen[inc] = true
				if err := inline(inc, depth+1); err != nil {
					return err
				}
			}
			last = m[1]
		}
		b.Write(src[last:])
		b.WriteString("\n")
		return nil
	}
	for _, f := range Files() {
		fmt.Fprintf(&b, "// ---- %s ----\n", f)
		if err := inline(f, 0); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// KernelNames lists every entry point (kernel-qualified function) of the library, in file
// order.
func KernelNames() []string {
	re := regexp.MustCompile(`\bkernel\s+void\s+(\w+)\s*\(`)
	cm := regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	var names []string
	for _, f := range Files() {
		src, _ := files.ReadFile(f)
		for _, m := range re.FindAllSubmatch(cm.ReplaceAll(src, nil), -1) {
			names = append(names, string(m[1]))
		}
	}
	return names
}
