//go:build darwin && arm64

package metal

// The Objective-C side of the Metal backend, through purego (no cgo): the
// frameworks are dlopened, every class and selector the backend uses is
// looked up once (loadObjC), and the messages the encoder sends for every
// dispatch are typed Go functions over one objc_msgSend address.
//
// Two ways of sending are used:
//   - setup and per-command-buffer messages (a few per commit) go through
//     purego/objc's ID.Send and objc.Send[T], which marshal their arguments
//     by reflection (about a microsecond each);
//   - the per-dispatch messages (setComputePipelineState:, setBytes:...,
//     setBuffer:..., dispatchThreadgroups:...) and the status poll are plain
//     purego.SyscallN calls of objc_msgSend with uintptr arguments: no
//     reflection, no interface boxing. A typed function from
//     purego.RegisterFunc would read better but is itself built on
//     reflect.MakeFunc and costs as much as ID.Send, which is what a
//     ~1.2k-dispatch forward pass should not pay ~10 times per dispatch.
//
// All of it runs on the locked OS thread of one open device
// (device_darwin.go), except the process-wide device lookup, which locks
// its own thread for its autorelease pool.

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// MTLSize is Metal's MTLSize (three NSUInteger).
type MTLSize struct {
	Width, Height, Depth uint64
}

// nsRange is Foundation's NSRange (two NSUInteger).
type nsRange struct {
	Location, Length uint64
}

// Metal constants used by the backend (values from Apple's headers).
const (
	mtlResourceStorageModeShared  = 0
	mtlResourceStorageModePrivate = 2 << 4

	// MTLCommandBufferStatus.
	mtlCommandBufferStatusNotEnqueued = 0
	mtlCommandBufferStatusCompleted   = 4
	mtlCommandBufferStatusError       = 5

	mtlDataTypeBool      = 53
	mtlDataTypeInt       = 29
	nsUTF8StringEncoding = 4

	// GPU families (supportsFamily:).
	mtlGPUFamilyApple7  = 1007
	mtlGPUFamilyApple8  = 1008
	mtlGPUFamilyApple9  = 1009
	mtlGPUFamilyApple10 = 1010
	mtlGPUFamilyMetal3  = 5001
	mtlGPUFamilyMetal4  = 5002

	// MTLLanguageVersion values: (major << 16) | minor.
	mtlLanguageVersion3_0 = 3<<16 | 0
	mtlLanguageVersion2_4 = 2<<16 | 4

	// Limits of a compute encoder (Metal feature set tables).
	maxSetBytes      = 4096 // setBytes:length:atIndex:
	maxBufferIndex   = 30   // 31 entries in the buffer argument table
	maxGroupThreads  = 1024 // maxThreadsPerThreadgroup on Apple7 and later
	maxThreadgroupTG = 32 << 10
)

// mtlCommandBufferErrors names MTLCommandBufferError codes (the NSError code
// of a failed command buffer) and says what each usually means here.
var mtlCommandBufferErrors = map[int64]string{
	1:  "internal error",
	2:  "timeout: the GPU watchdog stopped a command buffer that ran too long",
	3:  "page fault: a kernel read or wrote outside its buffers",
	4:  "access revoked: the GPU stopped serving this process",
	5:  "not permitted",
	7:  "out of memory: more than the GPU can keep resident",
	8:  "invalid resource: a buffer was released while in use",
	9:  "memoryless",
	10: "device removed",
	11: "stack overflow",
}

var (
	objcOnce sync.Once
	objcErr  error

	// msgSend is objc_msgSend's address, for the SyscallN sends below.
	msgSend uintptr

	mtlCreateSystemDefaultDevice func() objc.ID
	mtlCopyAllDevices            func() objc.ID

	classNSString, classNSAutoreleasePool                   objc.Class
	classMTLCompileOptions, classMTLFunctionConstantValues  objc.Class
	classMTLResidencySetDescriptor                          objc.Class // nil before macOS 15
	selAlloc, selNew, selRelease, selRetain, selDrain       objc.SEL
	selInitWithBytes, selUTF8String, selRespondsToSelector  objc.SEL
	selLocalizedDescription, selCode, selCount, selObjectAt objc.SEL
	selSetLabel                                             objc.SEL

	// MTLDevice.
	selName, selMaxBufferLength, selRecommendedMaxWorkingSetSize, selSupportsFamily objc.SEL
	selNewCommandQueue, selNewLibraryWithSource, selNewComputePipelineState         objc.SEL
	selNewBufferWithLength, selNewBufferWithBytesNoCopy, selNewResidencySet         objc.SEL
	// MTLCompileOptions, MTLLibrary, MTLFunctionConstantValues.
	selSetLanguageVersion, selSetMathMode, selSetFastMathEnabled objc.SEL
	selNewFunctionWithName, selNewFunctionWithNameConsts         objc.SEL
	selSetConstantValue                                          objc.SEL
	// MTLComputePipelineState.
	selMaxTotalThreads, selThreadExecutionWidth, selStaticThreadgroupMemory objc.SEL
	// MTLBuffer.
	selContents objc.SEL
	// MTLCommandQueue, MTLCommandBuffer, encoders.
	selCommandBuffer, selComputeCommandEncoder, selBlitCommandEncoder, selEndEncoding objc.SEL
	selCommit, selStatus, selError, selGPUStartTime                                   objc.SEL
	selGPUEndTime, selFillBuffer                                                      objc.SEL
	selSetComputePipelineState, selSetBytes, selSetBuffer                             objc.SEL
	selDispatchThreadgroups, selDispatchIndirect                                      objc.SEL
	// Residency sets (macOS 15): MTLResidencySetDescriptor, MTLResidencySet,
	// MTLCommandQueue.
	selSetInitialCapacity, selAddAllocation, selRemoveAllocation, selRemoveAllAllocations objc.SEL
	selRequestResidency, selEndResidency, selAddResidencySet, selRemoveResidencySet       objc.SEL
)

// loadObjC dlopens Metal (and CoreGraphics, which a command-line process
// needs for a default device), binds the C functions and looks up every
// class and selector, once per process.
func loadObjC() error {
	objcOnce.Do(func() { objcErr = bindObjC() })
	return objcErr
}

func bindObjC() error {
	if _, err := purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
		return fmt.Errorf("loading CoreGraphics: %w", err)
	}
	mtl, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("loading Metal.framework: %w", err)
	}
	libobjc, err := purego.Dlopen("/usr/lib/libobjc.A.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("loading libobjc: %w", err)
	}
	if msgSend, err = purego.Dlsym(libobjc, "objc_msgSend"); err != nil {
		return fmt.Errorf("libobjc: %w", err)
	}
	for _, f := range []struct {
		fn   *func() objc.ID
		name string
	}{{&mtlCreateSystemDefaultDevice, "MTLCreateSystemDefaultDevice"}, {&mtlCopyAllDevices, "MTLCopyAllDevices"}} {
		sym, err := purego.Dlsym(mtl, f.name)
		if err != nil {
			return fmt.Errorf("Metal.framework: %w", err)
		}
		purego.RegisterFunc(f.fn, sym)
	}
	classNSString = objc.GetClass("NSString")
	classNSAutoreleasePool = objc.GetClass("NSAutoreleasePool")
	classMTLCompileOptions = objc.GetClass("MTLCompileOptions")
	classMTLFunctionConstantValues = objc.GetClass("MTLFunctionConstantValues")
	classMTLResidencySetDescriptor = objc.GetClass("MTLResidencySetDescriptor")
	if classNSString == 0 || classNSAutoreleasePool == 0 || classMTLCompileOptions == 0 || classMTLFunctionConstantValues == 0 {
		return fmt.Errorf("the Objective-C runtime lacks NSString, NSAutoreleasePool or the Metal classes")
	}

	r := objc.RegisterName
	selAlloc, selNew, selRelease, selRetain, selDrain = r("alloc"), r("new"), r("release"), r("retain"), r("drain")
	selInitWithBytes, selUTF8String = r("initWithBytes:length:encoding:"), r("UTF8String")
	selRespondsToSelector = r("respondsToSelector:")
	selLocalizedDescription, selCode = r("localizedDescription"), r("code")
	selCount, selObjectAt, selSetLabel = r("count"), r("objectAtIndex:"), r("setLabel:")

	selName, selMaxBufferLength = r("name"), r("maxBufferLength")
	selRecommendedMaxWorkingSetSize, selSupportsFamily = r("recommendedMaxWorkingSetSize"), r("supportsFamily:")
	selNewCommandQueue = r("newCommandQueue")
	selNewLibraryWithSource = r("newLibraryWithSource:options:error:")
	selNewComputePipelineState = r("newComputePipelineStateWithFunction:error:")
	selNewBufferWithLength = r("newBufferWithLength:options:")
	selNewBufferWithBytesNoCopy = r("newBufferWithBytesNoCopy:length:options:deallocator:")
	selNewResidencySet = r("newResidencySetWithDescriptor:error:")

	selSetLanguageVersion, selSetMathMode, selSetFastMathEnabled = r("setLanguageVersion:"), r("setMathMode:"), r("setFastMathEnabled:")
	selNewFunctionWithName = r("newFunctionWithName:")
	selNewFunctionWithNameConsts = r("newFunctionWithName:constantValues:error:")
	selSetConstantValue = r("setConstantValue:type:atIndex:")

	selMaxTotalThreads = r("maxTotalThreadsPerThreadgroup")
	selThreadExecutionWidth = r("threadExecutionWidth")
	selStaticThreadgroupMemory = r("staticThreadgroupMemoryLength")

	selContents = r("contents")

	selCommandBuffer, selComputeCommandEncoder = r("commandBuffer"), r("computeCommandEncoder")
	selBlitCommandEncoder, selEndEncoding = r("blitCommandEncoder"), r("endEncoding")
	selCommit, selStatus, selError = r("commit"), r("status"), r("error")
	selGPUStartTime, selGPUEndTime = r("GPUStartTime"), r("GPUEndTime")
	selFillBuffer = r("fillBuffer:range:value:")
	selSetComputePipelineState = r("setComputePipelineState:")
	selSetBytes, selSetBuffer = r("setBytes:length:atIndex:"), r("setBuffer:offset:atIndex:")
	selDispatchThreadgroups = r("dispatchThreadgroups:threadsPerThreadgroup:")
	selDispatchIndirect = r("dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:threadsPerThreadgroup:")

	selSetInitialCapacity = r("setInitialCapacity:")
	selAddAllocation, selRemoveAllocation = r("addAllocation:"), r("removeAllocation:")
	selRemoveAllAllocations = r("removeAllAllocations")
	selRequestResidency, selEndResidency = r("requestResidency"), r("endResidency")
	selAddResidencySet, selRemoveResidencySet = r("addResidencySet:"), r("removeResidencySet:")
	return nil
}

// The per-dispatch sends. Every argument is an integer or a pointer, so
// SyscallN places them in x0.. exactly as objc_msgSend's callee expects.

// sendSetPipeline sends [enc setComputePipelineState:p].
func sendSetPipeline(enc, p objc.ID) {
	purego.SyscallN(msgSend, uintptr(enc), uintptr(selSetComputePipelineState), uintptr(p))
}

// sendSetBytes sends [enc setBytes:p length:n atIndex:idx] (Metal copies
// the bytes during the call).
func sendSetBytes(enc objc.ID, p unsafe.Pointer, n, idx int) {
	purego.SyscallN(msgSend, uintptr(enc), uintptr(selSetBytes), uintptr(p), uintptr(n), uintptr(idx))
}

// sendSetBuffer sends [enc setBuffer:buf offset:off atIndex:idx].
func sendSetBuffer(enc, buf objc.ID, off, idx int) {
	purego.SyscallN(msgSend, uintptr(enc), uintptr(selSetBuffer), uintptr(buf), uintptr(off), uintptr(idx))
}

// sendDispatch sends [enc dispatchThreadgroups:*grid
// threadsPerThreadgroup:*group]. An MTLSize is 24 bytes, more than the 16
// that AAPCS64 passes in registers, so the caller passes a pointer to a
// copy the callee may overwrite: grid and group must be scratch copies.
func sendDispatch(enc objc.ID, grid, group *MTLSize) {
	purego.SyscallN(msgSend, uintptr(enc), uintptr(selDispatchThreadgroups), uintptr(unsafe.Pointer(grid)), uintptr(unsafe.Pointer(group)))
}

// sendDispatchIndirect sends [enc dispatchThreadgroupsWithIndirectBuffer:buf
// indirectBufferOffset:off threadsPerThreadgroup:*group] (group: a scratch
// copy, as for sendDispatch).
func sendDispatchIndirect(enc, buf objc.ID, off int, group *MTLSize) {
	purego.SyscallN(msgSend, uintptr(enc), uintptr(selDispatchIndirect), uintptr(buf), uintptr(off), uintptr(unsafe.Pointer(group)))
}

// sendStatus returns [cmd status] (an MTLCommandBufferStatus).
func sendStatus(cmd objc.ID) int {
	r, _, _ := purego.SyscallN(msgSend, uintptr(cmd), uintptr(selStatus))
	return int(r)
}

// withPool runs fn inside a fresh autorelease pool, drained when fn
// returns, with the goroutine locked to its thread meanwhile (a pool must
// be drained on the thread that made it). The device thread is locked
// already; this is for the process-wide setup calls.
func withPool(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool := objc.ID(classNSAutoreleasePool).Send(selNew)
	defer pool.Send(selDrain)
	fn()
}

// newPool pushes an autorelease pool on the calling (locked) thread.
func newARPool() objc.ID { return objc.ID(classNSAutoreleasePool).Send(selNew) }

// nsString returns a new (+1) NSString holding s.
func nsString(s string) objc.ID {
	b := []byte(s)
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	return objc.ID(classNSString).Send(selAlloc).Send(selInitWithBytes, p, uint64(len(b)), uint64(nsUTF8StringEncoding))
}

// goString copies an NSString into a Go string.
func goString(s objc.ID) string {
	if s == 0 {
		return ""
	}
	p := objc.Send[unsafe.Pointer](s, selUTF8String)
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// nsError describes an NSError: its localizedDescription, which for
// Metal's compiler holds the whole log ("unknown error" for nil).
func nsError(err objc.ID) string {
	if err == 0 {
		return "unknown error"
	}
	return goString(err.Send(selLocalizedDescription))
}

// setLabel sets an object's label (shown by Xcode's GPU tools and in
// Metal's validation messages).
func setLabel(id objc.ID, label string) {
	s := nsString(label)
	id.Send(selSetLabel, s)
	release(s)
}

// release sends release to a +1 object (nil is ignored).
func release(id objc.ID) {
	if id != 0 {
		id.Send(selRelease)
	}
}

// responds reports whether id implements sel (an OS-version check for
// newer API).
func responds(id objc.ID, sel objc.SEL) bool {
	return id != 0 && objc.Send[bool](id, selRespondsToSelector, sel)
}
