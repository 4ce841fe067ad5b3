package main

import (
	"fmt"
	"os"

	"github.com/clefrt/clef/hub"
)

// modelPath turns a --model value into the path a loader opens. An
// existing file or directory is returned as it is; ORG/NAME[@REV][:TYPE]
// resolves through the Hugging Face cache without the network (the
// snapshot of the revision, or the quantized file clef pull --quantize
// wrote); a model that is not there is an error saying to run clef pull.
// Anything else (a mistyped path) is returned as it is, for the loader to
// name. "" stays "".
func modelPath(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if _, err := os.Stat(v); err == nil {
		return v, nil
	}
	ref, err := hub.ParseRef(v)
	if err != nil {
		return v, nil
	}
	cache, err := hub.DefaultCache()
	if err != nil {
		return "", err
	}
	r, err := cache.Resolve(ref)
	if err != nil {
		return "", fmt.Errorf("--model %s: no such file or directory, and %w", v, err)
	}
	return r.Path()
}

// isHubName reports whether v names a model of the Hub (ORG/NAME[@REV][:TYPE])
// rather than a file or directory: it is not an existing path and parses
// as a model id. The daemon's LaunchAgent keeps such a name as it is, so
// that each start resolves it again.
func isHubName(v string) bool {
	if v == "" {
		return false
	}
	if _, err := os.Stat(v); err == nil {
		return false
	}
	_, err := hub.ParseRef(v)
	return err == nil
}
