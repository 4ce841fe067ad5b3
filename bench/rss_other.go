//go:build !linux && !darwin

package bench

// PeakRSS is not measured on this system: it returns 0.
func PeakRSS() int64 { return 0 }

// ResetPeakRSS does nothing here.
func ResetPeakRSS() bool { return false }
