//go:build unix

package video

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own and makes the end of
// its context kill that whole group, so nothing ffmpeg started outlives it.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if err == syscall.ESRCH {
			return os.ErrProcessDone
		}
		return err
	}
}

// toFile switches in from the pipe to a file read through the file
// protocol only: each run gets its own copy of the clip as descriptor 3
// (unlinkedCopy). There is nothing to clean up.
func (in *input) toFile() (cleanup func(), err error) {
	in.url, in.whitelist, in.fd = "file:/dev/fd/3", "file", true
	return func() {}, nil
}

// unlinkedCopy writes data to a new private temporary file (mode 0600)
// that is removed from its directory before anything is written, and
// returns it open at its start: only the descriptor reaches the file, and
// it vanishes when the last one is closed, even if this process is
// killed.
func unlinkedCopy(data []byte) (*os.File, error) {
	f, err := os.CreateTemp("", "clef-video-*")
	if err != nil {
		return nil, decoderError(fmt.Sprintf("cannot create a temporary file for the video: %v", err))
	}
	err = os.Remove(f.Name())
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, decoderError(fmt.Sprintf("cannot write the video to a temporary file: %v", err))
	}
	return f, nil
}
