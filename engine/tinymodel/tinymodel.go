// Package tinymodel embeds a tiny, seeded-random Clef-Omni release (the
// clef-tiny golden model: a 2-layer, 64-wide Qwen3-Omni thinker, a 32-wide
// joint schema head and a 512-token BPE tokenizer) so that `clef demo` and
// `clef decide` run on a machine with no model downloaded.
//
// The model is synthetic: its weights are random, so its probabilities mean
// nothing. It exists to show the pipeline end to end and to test it.
package tinymodel

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed release
var release embed.FS

// Name is how the embedded model is named in messages.
const Name = "clef-tiny (embedded, synthetic)"

// Warning is the plain statement every user of the embedded model sees.
const Warning = "the embedded clef-tiny model is synthetic (random weights): its probabilities mean nothing. " +
	"Point clef at a real release with --model PATH or CLEF_MODEL=PATH."

// FS returns the release directory's files (config.json, the safetensors
// shards and index, joint_head.*, tokenizer.json, ...) at the root.
func FS() fs.FS {
	sub, err := fs.Sub(release, "release")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sub
}

// WriteDir writes the embedded release into a new temporary directory and
// returns its path and a function that removes it. The readers map files, so
// the model needs to be on disk.
func WriteDir() (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "clef-tiny-")
	if err != nil {
		return "", nil, fmt.Errorf("tiny model: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	src := FS()
	entries, err := fs.ReadDir(src, ".")
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("tiny model: %w", err)
	}
	for _, e := range entries {
		data, err := fs.ReadFile(src, e.Name())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644)
		}
		if err != nil {
			cleanup()
			return "", nil, fmt.Errorf("tiny model: %w", err)
		}
	}
	return dir, cleanup, nil
}
