//go:build !linux && !darwin

package convert

// systemMemory returns 0: the RAM size is unknown on this system.
func systemMemory() int64 { return 0 }
