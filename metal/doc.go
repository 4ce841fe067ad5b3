// Package metal is the Metal backend: backend.Backend on an Apple GPU,
// driven through purego's objc package (no cgo), with the kernels of
// shaders/ compiled at run time from the source embedded in the binary.
//
// Layout:
//   - backend.go: the ops (shape checks, kernel choice, launch geometry,
//     buffer binding, the MoE plan) over a small device interface (gpu.go);
//     platform-neutral, so it is tested everywhere.
//   - device_darwin.go, objc_darwin.go (darwin/arm64): the device
//     (MTLCreateSystemDefaultDevice, MTLCopyAllDevices fallback, Apple7 check),
//     the library (newLibraryWithSource, MSL 3.0 then 2.4, safe math), the
//     pipeline cache (by kernel name and function constants), no-copy
//     weight views (16 KiB pages, each under maxBufferLength, counted against
//     recommendedMaxWorkingSetSize), the activation arena (size classes),
//     and one command buffer per Read, all on one locked OS thread with its
//     autorelease pool drained per command buffer.
//   - emu.go: the same backend on the emulated GPU (shaders/emu), which
//     runs the conformance suite and `clef selftest` off a Mac.
//   - kargs.go: the Go mirror of shaders/kargs.h.
//   - selftest.go: per-op comparison with the CPU backend and the
//     achieved GB/s and TFLOP/s against the chip's peak.
//
// On darwin/arm64 the package registers "metal" in the backend registry; the
// engine prefers it and falls back to the CPU backend when no device opens.
// None of the darwin code has run on Apple hardware yet (shaders/README.md).
package metal
