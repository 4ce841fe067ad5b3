// Package shaders holds the Metal kernels of the runtime as MSL source: one
// .metal file per op family, kargs.h (the argument structs shared with the
// host, mirrored field by field in Go by kargs.go) and quants.h (the block
// decoders shared by every quantized kernel). The host (metal) compiles
// Library() at run time with newLibraryWithSource and fills the kargs
// mirrors; internal/mslemu compiles each file as C++ for the CPU emulation
// harness that the tests of this package run (make shader-test).
//
// The files that need MSL 4 (Metal 4 tensor operations: TensorFiles, the M5
// path) are not part of Library(): they make a second library,
// TensorLibrary(), which the host compiles with MSL 4.0 only where the GPU
// has the tensor operations, so that Library() still compiles with MSL 3.0
// or 2.4 on older macOS.
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

// Files lists the .metal sources, sorted: those of Library() and those of
// TensorLibrary() (the emulation harness compiles and tests them all).
func Files() []string {
	names, _ := fs.Glob(files, "*.metal")
	sort.Strings(names)
	return names
}

// tensorFiles are the sources that need MSL 4 (<metal_tensor>,
// MetalPerformancePrimitives): the kernels of the M5 path.
var tensorFiles = map[string]bool{"tensor.metal": true, "tensor_moe.metal": true, "tensor_attn.metal": true, "tensor_q8.metal": true}

// TensorFiles lists the .metal sources of TensorLibrary(), sorted.
func TensorFiles() []string {
	var out []string
	for _, f := range Files() {
		if tensorFiles[f] {
			out = append(out, f)
		}
	}
	return out
}

// libraryFiles lists the .metal sources of Library(): every file but the
// tensor files.
func libraryFiles() []string {
	var out []string
	for _, f := range Files() {
		if !tensorFiles[f] {
			out = append(out, f)
		}
	}
	return out
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

// Library returns every .metal file but the tensor files concatenated into
// one translation unit with the local includes inlined once (Metal's runtime
// compiler has no include path), ready for newLibraryWithSource (MSL 3.0,
// or 2.4).
func Library() (string, error) { return concat(libraryFiles()) }

// TensorLibrary returns the tensor files (TensorFiles: the M5 path's
// kernels, which need MSL 4.0 and a GPU with Metal 4 tensor operations) as
// one translation unit like Library(), for a second newLibraryWithSource
// with MTLLanguageVersion 4.0. Their system includes (<metal_tensor>,
// <MetalPerformancePrimitives/MetalPerformancePrimitives.h>) stay as they
// are: Apple's compiler resolves them.
func TensorLibrary() (string, error) { return concat(TensorFiles()) }

// concat inlines the local includes of names (each header once) and
// concatenates them.
func concat(names []string) (string, error) {
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
	for _, f := range names {
		fmt.Fprintf(&b, "// ---- %s ----\n", f)
		if err := inline(f, 0); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// KernelNames lists every entry point (kernel-qualified function) of both
// libraries (Library and TensorLibrary), in file order.
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
