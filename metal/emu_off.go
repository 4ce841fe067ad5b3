//go:build !mslemu

package metal

import "errors"

// errNoEmulator is NewEmulated's error in a binary built without the
// emulator.
var errNoEmulator = errors.New("metal: this binary was built without the MSL emulator (build with -tags mslemu)")

// EmulatorAvailable reports whether NewEmulated can run: never in a binary
// built without the mslemu tag, such as the shipped one.
func EmulatorAvailable() (bool, string) { return false, errNoEmulator.Error() }

// NewEmulated fails: the emulated GPU (emu.go, internal/mslemu) is only
// compiled with the mslemu build tag.
func NewEmulated() (*Backend, error) { return nil, errNoEmulator }
