package metal

import "github.com/clefrt/clef/shaders"

func kernelNamesForTest() []string { return shaders.KernelNames() }
