//go:build mslemu

package metal

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/clefrt/clef/internal/mslemu"
	"github.com/clefrt/clef/shaders"
)

// emuBuf is device memory of the emulated GPU.
type emuBuf struct{ data []byte }

func (b *emuBuf) Len() int { return len(b.data) }

// emuGPU runs every dispatch at once on the CPU through the MSL emulation
// harness (internal/mslemu): the same kernel source as on a Mac, compiled as C++.
// It exists so that the backend's host logic (shape checks, launch geometry,
// buffer binding, the MoE plan) is tested on machines without Metal.
type emuGPU struct {
	mu      sync.Mutex
	work    string
	kernels map[string]*mslemu.Harness
}

// EmulatorAvailable reports whether NewEmulated can run: this binary holds
// the emulator (the mslemu build tag) and clang++-19 is on PATH.
func EmulatorAvailable() (bool, string) {
	if !mslemu.Available() {
		return false, fmt.Sprintf("the MSL emulation harness needs %s (apt-get install clang-19)", mslemu.Clang)
	}
	return true, ""
}

// NewEmulated returns the backend on the emulated GPU. It compiles every
// shader with clang++-19 (cached between runs), so it needs clang-19 and takes
// a while the first time. Close removes its scratch directory.
func NewEmulated() (*Backend, error) {
	if !mslemu.Available() {
		return nil, fmt.Errorf("metal: the emulated GPU needs %s on PATH", mslemu.Clang)
	}
	work, err := os.MkdirTemp("", "clef-metal-emu")
	if err != nil {
		return nil, err
	}
	src := filepath.Join(work, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return nil, err
	}
	if err := shaders.WriteFiles(src); err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	g := &emuGPU{work: work, kernels: map[string]*mslemu.Harness{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 2)
	for _, f := range shaders.Files() {
		wg.Add(1)
		go func(f string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			h, err := mslemu.Build(work, filepath.Join(src, f))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			for _, k := range h.Kernels {
				g.kernels[k.Name] = h
			}
		}(f)
	}
	wg.Wait()
	if firstErr != nil {
		os.RemoveAll(work)
		return nil, firstErr
	}
	return newBackend(g, "metal-emu"), nil
}

func (g *emuGPU) Name() string { return "emulated GPU (MSL as C++ on CPU fibers)" }

func (g *emuGPU) Alloc(n int) (gbuf, error) {
	if n < 0 {
		return nil, fmt.Errorf("metal: alloc of %d bytes", n)
	}
	return &emuBuf{data: make([]byte, n)}, nil
}

func (g *emuGPU) Upload(data []byte) (gbuf, error) {
	return &emuBuf{data: append([]byte(nil), data...)}, nil
}

func (g *emuGPU) Wrap(data []byte) (gbuf, int, error) { return &emuBuf{data: data}, 0, nil }

func (g *emuGPU) Release(b gbuf) {}

func (g *emuGPU) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[*mslemu.Harness]bool{}
	for _, h := range g.kernels {
		if !seen[h] {
			seen[h] = true
			h.Close()
		}
	}
	return os.RemoveAll(g.work)
}

func (g *emuGPU) Read(ctx context.Context, b gbuf, off int, dst []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	eb, ok := b.(*emuBuf)
	if !ok || off < 0 || off+len(dst) > len(eb.data) {
		return fmt.Errorf("metal: read of %d bytes at %d outside the buffer", len(dst), off)
	}
	copy(dst, eb.data[off:])
	return nil
}

// Dispatch runs d now. A buffer bound twice at the same offset is passed
// once and aliased, as Metal would see one MTLBuffer.
func (g *emuGPU) Dispatch(d *dispatch) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.kernels[d.Kernel]
	if h == nil {
		return fmt.Errorf("metal: no kernel %q", d.Kernel)
	}
	grid := d.Grid
	if d.Indirect != nil {
		eb, ok := d.Indirect.Buf.(*emuBuf)
		if !ok || d.Indirect.Off < 0 || d.Indirect.Off+12 > len(eb.data) {
			return fmt.Errorf("metal: %s: indirect grid outside its buffer", d.Kernel)
		}
		for i := range grid {
			grid[i] = int(binary.LittleEndian.Uint32(eb.data[d.Indirect.Off+4*i:]))
		}
		if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
			return nil
		}
	}
	job := &mslemu.Job{Kernel: d.Kernel, Grid: grid, Group: d.Group, Alias: map[int]int{}}
	for _, c := range d.Consts {
		v := []byte{byte(c.Value), byte(c.Value >> 8), byte(c.Value >> 16), byte(c.Value >> 24)}
		if c.Bool {
			v = []byte{0}
			if c.Value != 0 {
				v[0] = 1
			}
		}
		job.Consts = append(job.Consts, mslemu.Const{Index: c.Index, Value: v})
	}
	job.Buffers = append(job.Buffers, mslemu.Buffer{Index: 0, Data: d.Args})
	type key struct {
		b   *emuBuf
		off int
	}
	first := map[key]int{}    // buffer -> kernel index it was first bound at
	var bound []key           // job.Buffers[i+1]'s buffer
	written := map[int]bool{} // positions in job.Buffers to copy back
	for _, a := range d.Bufs {
		eb, ok := a.Buf.(*emuBuf)
		if !ok {
			return fmt.Errorf("metal: %s: buffer %d is not an emulator buffer", d.Kernel, a.Index)
		}
		if a.Off < 0 || a.Off > len(eb.data) {
			return fmt.Errorf("metal: %s: offset %d outside buffer %d", d.Kernel, a.Off, a.Index)
		}
		k := key{eb, a.Off}
		idx, seen := first[k]
		if !seen {
			first[k] = a.Index
			job.Buffers = append(job.Buffers, mslemu.Buffer{Index: a.Index, Data: eb.data[a.Off:]})
			bound = append(bound, k)
			idx = a.Index
		} else {
			job.Alias[a.Index] = idx
		}
		if a.Out {
			for i := 1; i < len(job.Buffers); i++ {
				if job.Buffers[i].Index == idx {
					written[i] = true
				}
			}
		}
	}
	res, err := h.Run(job)
	if err != nil {
		return err
	}
	for i := range written {
		k := bound[i-1]
		copy(k.b.data[k.off:], res[i])
	}
	return nil
}

// EmulatedForTest returns the backend on the emulated GPU for a test, closed
// when the test ends. It skips the test when clang-19 is missing or under
// -short (compiling and emulating every kernel is slow). Only with the
// mslemu build tag, which only tests use.
func EmulatedForTest(t testing.TB) *Backend {
	t.Helper()
	if !mslemu.Available() {
		t.Skipf("%s not found: the emulated GPU needs clang-19", mslemu.Clang)
	}
	if testing.Short() {
		t.Skip("slow: compiles and emulates every kernel")
	}
	b, err := NewEmulated()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
