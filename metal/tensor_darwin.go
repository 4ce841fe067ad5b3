//go:build darwin && arm64

package metal

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/clefrt/clef/shaders"
	"github.com/ebitengine/purego/objc"
)

// mtlLanguageVersion4_0 is MTLLanguageVersion4_0 (macOS 26): the first with
// <metal_tensor> and MetalPerformancePrimitives.
const mtlLanguageVersion4_0 = 4<<16 | 0

// tensorLib is the process-wide tensor library (shaders.TensorLibrary),
// compiled at most once, like the main library, when the tensor path asks
// for it (tensorChoice: a GPU of family Apple10, or CLEF_METAL_TENSOR=1),
// with MSL 4.0 and safe math. A failure is
// remembered (an OS before macOS 26 has no MSL 4.0: no use compiling again
// at every open) with the compiler's log.
var tensorLib struct {
	once sync.Once
	id   objc.ID
	log  string
}

// compileTensorLibrary compiles the tensor library on the device thread
// (locked, inside an autorelease pool) the first time it is asked for.
func compileTensorLibrary(d *sysDevice) {
	tensorLib.once.Do(func() {
		src, err := shaders.TensorLibrary()
		if err != nil {
			tensorLib.log = err.Error()
			return
		}
		source := nsString(src)
		defer release(source)
		opts := objc.ID(classMTLCompileOptions).Send(selNew)
		defer release(opts)
		opts.Send(selSetLanguageVersion, uint64(mtlLanguageVersion4_0))
		if responds(opts, selSetMathMode) {
			opts.Send(selSetMathMode, int64(0)) // MTLMathModeSafe
		} else {
			opts.Send(selSetFastMathEnabled, false)
		}
		var nserr objc.ID
		lib := d.id.Send(selNewLibraryWithSource, source, opts, unsafe.Pointer(&nserr))
		if lib == 0 {
			tensorLib.log = fmt.Sprintf("MSL 4.0: %s", nsError(nserr))
			return
		}
		tensorLib.id = lib
	})
}

// TensorLibrary compiles the tensor library (once per process) and reports
// whether this device has it, or the compiler's log (tensorLibraryGPU).
func (g *metalGPU) TensorLibrary() (bool, string) {
	if err := g.do(func() { compileTensorLibrary(g.sys) }); err != nil {
		return false, err.Error()
	}
	return tensorLib.id != 0, tensorLib.log
}

// libraryFor returns the library that holds kernel: the tensor library for
// the tensor path's kernels (isTensorKernel) once compiled, else the main
// one.
func (g *metalGPU) libraryFor(kernel string) objc.ID {
	if isTensorKernel(kernel) && tensorLib.id != 0 {
		return tensorLib.id
	}
	return g.library
}
