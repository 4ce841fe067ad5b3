// Package metal is the Metal backend: backend.Backend on an Apple GPU,
// driven through purego's objc package (no cgo), with the kernels of
// shaders/ compiled at run time from the source embedded in the binary.
//
// Layout: the host ops mirror the kernel files of shaders/, and are
// platform-neutral over a small device interface (gpu.go: one opened
// device, everything it makes released by Close), so they are tested
// everywhere.
//   - backend.go: the Backend and its tensor handle, Weight (matrices,
//     vectors and stacked experts [E, out, in]: a contiguous stack is one
//     view with an expert stride, a parted one a view per expert; MLX scales
//     and biases one view each), Upload, Read, Free, Close.
//   - commit.go, cost.go: how work reaches the GPU. Launches gather in an
//     open batch that becomes one command buffer at ~0.25 s of estimated
//     work (bytes and FLOPs against an M1 base chip, divided by the slowdown
//     measured on completed buffers: real kernels reach a fraction of the
//     roofline) or 48 launches, and at every Read. After each commit the
//     host waits until at most two buffers are unfinished (Throttle); Read
//     waits for all. The decision's context (Interrupt) is checked at every
//     launch and commit and while throttling, and a done one drops the open
//     batch, so a cancelled decision leaves at most three buffers of about a
//     quarter second each to finish. Ops whose one launch would exceed 0.2 s
//     (calibrated alike) split it (matmul and expert rows, attention query
//     chunks). SetTrace commits and waits after every launch and names a
//     failing one; Stats counts.
//   - pool.go: every byte of an open (weight views, copies, uploads,
//     activations, the pool's cache) counted against the working set
//     (recommendedMaxWorkingSetSize), refused with a MemoryError before the
//     GPU would fail; activations pooled by size class, the cache bounded
//     and trimmed least recently released first.
//   - pipelines.go: every pipeline the ops can launch, prepared at open (a
//     compile failure fails the open, with the compiler's log).
//   - rows.go: backend.RowChunker (row views, Concat on the device), so the
//     model runs in row chunks and the prefix cache works on Metal, and
//     backend.ChunkSizer: 2048-row chunks (ChunkRows: the MoE tiles' fill
//     against activation memory).
//   - matmul.go (matmul.metal): MatMul (mat-vec or simdgroup-matrix tiles),
//     Embed (get_rows_*), GatherBlend (gather_blend_*).
//   - moe.go (moe.metal: moe_tiles, moe_gu_*, moe_down_*): Route and MoE: token lists built on
//     the device, one gathered launch per projection for a contiguous stack,
//     one launch per expert for a parted one.
//   - attention.go, norm.go, rope.go (its tables uploaded once and cached),
//     eltwise.go: the ops of the kernel file of the same name.
//   - device_darwin.go, objc_darwin.go (darwin/arm64): the device
//     (MTLCreateSystemDefaultDevice, MTLCopyAllDevices fallback, Apple7
//     check), the library (compiled once per process), the pipelines, no-copy
//     weight views (16 KiB pages), each batch encoded in one hop to one
//     locked OS thread (every call there in its own autorelease pool) with
//     typed message sends (no reflection per launch), waits and throttling
//     polled, a failed command buffer named (BufferError).
//   - residency_darwin.go: a residency set per open (macOS 15+) holding the
//     weight views, renewed while the device is open; before macOS 15
//     nothing, and weights paged out while idle come back from the file.
//   - emu.go (only with the mslemu build tag): the same backend on the
//     emulated GPU (internal/mslemu), which runs the conformance suite and
//     `clef selftest` off a Mac. Like an MTLDevice it is process-wide (its
//     kernels compiled once per process) with per-open buffers, pipelines and
//     batches; Dispatch records and Commit runs, a buffer used after Free
//     fails, live buffers are counted and the working set can be set. The
//     shipped binary holds no emulator (emu_off.go; make no-emulator checks
//     its symbol table).
//   - selftest.go: the conformance suite (engine/backend/conformance), then
//     per-op comparison with the CPU backend at the model's sizes, each
//     pipeline's limits (threads, threadgroup memory, execution width), a
//     per-kernel GPU-time table with the achieved GB/s and TFLOP/s against
//     the chip's peak (internal/chips), and --trace (one launch per command
//     buffer: the first fault named).
//
// The argument structs the kernels take are mirrored in Go beside their C
// definitions (shaders/kargs.go).
//
// On darwin/arm64 the package registers "metal" in the backend registry; the
// engine prefers it and falls back to the CPU backend when no device opens.
// None of the darwin code has run on Apple hardware yet (shaders/README.md).
package metal
