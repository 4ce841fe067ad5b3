package bench

// The tests open engines: register the CPU backend, as the command does.
import _ "github.com/clefrt/clef/engine/cpu"
