//go:build darwin && arm64

package engine

// On Apple silicon the Metal backend registers itself as "metal"; Open
// prefers it and falls back to the CPU backend (with a log line from the
// metal package) when no Metal device can be opened.
import _ "github.com/clefrt/clef/metal"
