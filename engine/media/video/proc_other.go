//go:build !unix

package video

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ownGroup leaves cmd as it is: without Unix process groups the end of its
// context kills the process itself (exec.CommandContext's default).
func ownGroup(cmd *exec.Cmd) {}

// toFile switches in from the pipe to a private temporary file holding the
// clip, read through the file protocol only; cleanup removes the file.
// (Without Unix descriptors to hand over, the file keeps its name while
// the clip decodes.)
func (in *input) toFile() (cleanup func(), err error) {
	path, err := tempCopy(in.data)
	if err != nil {
		return nil, err
	}
	in.url, in.whitelist, in.data = "file:"+path, "file", nil
	return func() { os.Remove(path) }, nil
}

// tempCopy writes data to a new private temporary file (mode 0600) and
// returns its path; the caller removes it.
func tempCopy(data []byte) (string, error) {
	f, err := os.CreateTemp("", "clef-video-*")
	if err != nil {
		return "", decoderError(fmt.Sprintf("cannot create a temporary file for the video: %v", err))
	}
	path := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", decoderError(fmt.Sprintf("cannot write the video to a temporary file: %v", err))
	}
	return path, nil
}

// unlinkedCopy is never called here (input.fd is never set).
func unlinkedCopy([]byte) (*os.File, error) {
	return nil, errors.New("video: no descriptor passing on this system")
}
