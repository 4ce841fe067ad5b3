// Package metal is the Metal backend: backend.Backend on an Apple GPU,
// driven through purego's objc package (no cgo), with the kernels of
// shaders/ compiled at run time from the source embedded in the binary.
//
// Layout: the host ops mirror the kernel files of shaders/, and are
// platform-neutral over a small device interface (gpu.go), so they are
// tested everywhere.
//   - backend.go: the Backend and its tensor handle, Weight (matrices,
//     vectors and stacked experts [E, out, in]: a contiguous stack is one
//     view with an expert stride, a parted one a view per expert), Upload,
//     Read, Free and the launch plumbing.
//   - matmul.go (matmul.metal): MatMul (mat-vec or simdgroup-matrix tiles),
//     Embed (get_rows_*), GatherBlend (gather_blend_*).
//   - moe.go (moe.metal, mul_mm_id_*): Route and MoE: token lists built on
//     the device, one gathered launch per projection for a contiguous stack,
//     one launch per expert for a parted one.
//   - attention.go, norm.go, rope.go, eltwise.go: the ops of the kernel file
//     of the same name.
//   - device_darwin.go, objc_darwin.go (darwin/arm64): the device
//     (MTLCreateSystemDefaultDevice, MTLCopyAllDevices fallback, Apple7 check),
//     the library (newLibraryWithSource, MSL 3.0 then 2.4, safe math), the
//     pipeline cache (by kernel name and function constants), no-copy
//     weight views (16 KiB pages, each under maxBufferLength, counted against
//     recommendedMaxWorkingSetSize), the activation arena (size classes),
//     and one command buffer per Read, all on one locked OS thread with its
//     autorelease pool drained per command buffer.
//   - emu.go (only with the mslemu build tag): the same backend on the
//     emulated GPU (internal/mslemu), which runs the conformance suite and
//     `clef selftest` off a Mac; the shipped binary holds no emulator
//     (emu_off.go; make no-emulator checks its symbol table).
//   - selftest.go: the conformance suite (engine/backend/conformance), then
//     per-op comparison with the CPU backend at the model's sizes, and the
//     achieved GB/s and TFLOP/s against the chip's peak (internal/chips).
//
// The argument structs the kernels take are mirrored in Go beside their C
// definitions (shaders/kargs.go).
//
// On darwin/arm64 the package registers "metal" in the backend registry; the
// engine prefers it and falls back to the CPU backend when no device opens.
// None of the darwin code has run on Apple hardware yet (shaders/README.md).
package metal
