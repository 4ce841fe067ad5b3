package main

// The command is where backends are registered: the engine, the daemon and
// the model code reach them only through the engine/backend registry. The
// CPU backend is always there; on Apple silicon the Metal backend registers
// too, the engine prefers it and falls back to the CPU with a log line when
// no Metal device can be opened (backends_darwin.go).
import _ "github.com/clefrt/clef/engine/cpu"
