//go:build !(darwin && arm64)

package metal

import "fmt"

// Available reports whether a Metal device can be used: never on this
// platform.
func Available() (bool, string) {
	return false, "Metal needs macOS on Apple silicon (darwin/arm64)"
}

// New fails on this platform; NewEmulated runs the kernels on the CPU.
func New() (*Backend, error) {
	return nil, fmt.Errorf("metal: %s", "Metal needs macOS on Apple silicon (darwin/arm64)")
}
