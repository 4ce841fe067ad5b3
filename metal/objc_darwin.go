//go:build darwin && arm64

package metal

// The Objective-C side of the Metal backend, through purego (no cgo): every
// selector the backend sends is registered once here, and the few C
// functions (MTLCreateSystemDefaultDevice, MTLCopyAllDevices) are bound at
// run time from the dlopened frameworks. All calls happen on the backend's
// locked OS thread (see loop in device_darwin.go).

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// MTLSize is Metal's MTLSize (three NSUInteger).
type MTLSize struct {
	Width, Height, Depth uint64
}

// Metal constants used by the backend.
const (
	mtlResourceStorageModeShared    = 0
	mtlCommandBufferStatusCompleted = 4
	mtlCommandBufferStatusError     = 5
	mtlDataTypeBool                 = 53
	mtlDataTypeInt                  = 29
	nsUTF8StringEncoding            = 4

	// GPU families (supportsFamily:).
	mtlGPUFamilyApple7 = 1007
	mtlGPUFamilyApple8 = 1008
	mtlGPUFamilyApple9 = 1009
	mtlGPUFamilyMetal3 = 5001

	// MTLLanguageVersion values: (major << 16) | minor.
	mtlLanguageVersion3_0 = 3<<16 | 0
	mtlLanguageVersion2_4 = 2<<16 | 4
)

var (
	objcOnce sync.Once
	objcErr  error

	mtlCreateSystemDefaultDevice func() objc.ID
	mtlCopyAllDevices            func() objc.ID

	classNSString          objc.Class
	classNSAutoreleasePool objc.Class
	classMTLCompileOptions objc.Class
	classMTLFunctionConsts objc.Class

	selAlloc, selInit, selNew, selRelease, selRetain, selDrain                         objc.SEL
	selInitWithBytes, selUTF8String, selLocalizedDescription, selCount, selObjectAtIdx objc.SEL
	selRespondsToSelector                                                              objc.SEL
	selName, selMaxBufferLength, selRecommendedMaxWorkingSetSize, selHasUnifiedMemory  objc.SEL
	selSupportsFamily, selMaxThreadgroupMemoryLength, selNewCommandQueue               objc.SEL
	selSetLanguageVersion, selSetMathMode, selSetFastMathEnabled                       objc.SEL
	selNewLibraryWithSource, selNewFunctionWithName, selNewFunctionWithNameConsts      objc.SEL
	selSetConstantValue, selNewComputePipelineState, selMaxTotalThreads                objc.SEL
	selNewBufferWithLength, selNewBufferWithBytes, selNewBufferWithBytesNoCopy         objc.SEL
	selContents, selLength                                                             objc.SEL
	selCommandBuffer, selComputeCommandEncoder, selSetComputePipelineState             objc.SEL
	selSetBytes, selSetBuffer, selDispatchThreadgroups, selEndEncoding                 objc.SEL
	selDispatchIndirect                                                                objc.SEL
	selCommit, selWaitUntilCompleted, selStatus, selError                              objc.SEL
	selGPUStartTime, selGPUEndTime                                                     objc.SEL
)

// loadObjC dlopens Metal (and CoreGraphics, which a command-line process
// needs for a default device) and registers every selector.
func loadObjC() error {
	objcOnce.Do(func() {
		if _, err := purego.Dlopen("/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics", purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
			objcErr = fmt.Errorf("loading CoreGraphics: %w", err)
			return
		}
		mtl, err := purego.Dlopen("/System/Library/Frameworks/Metal.framework/Metal", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			objcErr = fmt.Errorf("loading Metal.framework: %w", err)
			return
		}
		purego.RegisterLibFunc(&mtlCreateSystemDefaultDevice, mtl, "MTLCreateSystemDefaultDevice")
		purego.RegisterLibFunc(&mtlCopyAllDevices, mtl, "MTLCopyAllDevices")
		classNSString = objc.GetClass("NSString")
		classNSAutoreleasePool = objc.GetClass("NSAutoreleasePool")
		classMTLCompileOptions = objc.GetClass("MTLCompileOptions")
		classMTLFunctionConsts = objc.GetClass("MTLFunctionConstantValues")
		if classNSString == 0 || classNSAutoreleasePool == 0 || classMTLCompileOptions == 0 || classMTLFunctionConsts == 0 {
			objcErr = fmt.Errorf("the Objective-C runtime lacks NSString, NSAutoreleasePool or the Metal classes")
			return
		}
		r := objc.RegisterName
		selAlloc, selInit, selNew, selRelease, selRetain, selDrain = r("alloc"), r("init"), r("new"), r("release"), r("retain"), r("drain")
		selInitWithBytes, selUTF8String = r("initWithBytes:length:encoding:"), r("UTF8String")
		selLocalizedDescription, selCount, selObjectAtIdx = r("localizedDescription"), r("count"), r("objectAtIndex:")
		selRespondsToSelector = r("respondsToSelector:")
		selName, selMaxBufferLength = r("name"), r("maxBufferLength")
		selRecommendedMaxWorkingSetSize, selHasUnifiedMemory = r("recommendedMaxWorkingSetSize"), r("hasUnifiedMemory")
		selSupportsFamily, selMaxThreadgroupMemoryLength = r("supportsFamily:"), r("maxThreadgroupMemoryLength")
		selNewCommandQueue = r("newCommandQueue")
		selSetLanguageVersion, selSetMathMode, selSetFastMathEnabled = r("setLanguageVersion:"), r("setMathMode:"), r("setFastMathEnabled:")
		selNewLibraryWithSource = r("newLibraryWithSource:options:error:")
		selNewFunctionWithName, selNewFunctionWithNameConsts = r("newFunctionWithName:"), r("newFunctionWithName:constantValues:error:")
		selSetConstantValue = r("setConstantValue:type:atIndex:")
		selNewComputePipelineState, selMaxTotalThreads = r("newComputePipelineStateWithFunction:error:"), r("maxTotalThreadsPerThreadgroup")
		selNewBufferWithLength, selNewBufferWithBytes = r("newBufferWithLength:options:"), r("newBufferWithBytes:length:options:")
		selNewBufferWithBytesNoCopy = r("newBufferWithBytesNoCopy:length:options:deallocator:")
		selContents, selLength = r("contents"), r("length")
		selCommandBuffer, selComputeCommandEncoder = r("commandBuffer"), r("computeCommandEncoder")
		selSetComputePipelineState = r("setComputePipelineState:")
		selSetBytes, selSetBuffer = r("setBytes:length:atIndex:"), r("setBuffer:offset:atIndex:")
		selDispatchThreadgroups, selEndEncoding = r("dispatchThreadgroups:threadsPerThreadgroup:"), r("endEncoding")
		selDispatchIndirect = r("dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:threadsPerThreadgroup:")
		selDispatchIndirect = r("dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:threadsPerThreadgroup:")
		selCommit, selWaitUntilCompleted, selStatus, selError = r("commit"), r("waitUntilCompleted"), r("status"), r("error")
		selGPUStartTime, selGPUEndTime = r("GPUStartTime"), r("GPUEndTime")
	})
	return objcErr
}

// nsString returns a new (+1) NSString holding s.
func nsString(s string) objc.ID {
	b := []byte(s)
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	str := objc.ID(classNSString).Send(selAlloc).Send(selInitWithBytes, p, uint64(len(b)), uint64(nsUTF8StringEncoding))
	return str
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

// nsError describes an NSError (0: "unknown error").
func nsError(err objc.ID) string {
	if err == 0 {
		return "unknown error"
	}
	return goString(err.Send(selLocalizedDescription))
}

func release(id objc.ID) {
	if id != 0 {
		id.Send(selRelease)
	}
}

func responds(id objc.ID, sel objc.SEL) bool {
	return objc.Send[bool](id, selRespondsToSelector, sel)
}
